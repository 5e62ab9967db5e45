"""The noise of a count and a sum over the eigenvalues above a threshold: which modes pass moves with the sample.

FINC counts the eigenvalues of ``C_x - rho C_y`` above the null's threshold ``T`` and sums them (the score, the
mass of the novel or missing modes). An eigenvalue near ``T`` passes in one sample set and not in the next, and
``T`` itself is estimated from a few multiplier draws, so the count and the sum move by whole modes, which a
first-order standard error of the passing eigenvalues does not see. With each eigenvalue's law taken normal,
``lambda_i ~ N(l_i, s_i^2)``, independent, and the threshold's ``T ~ N(t, tau^2)`` common to all of them, the law of
total variance over ``T`` gives, to first order in ``tau``::

    p_i = Phi((l_i - t) / s_i),  f_i = phi((l_i - t) / s_i) / s_i     (the chance mode i passes; its density at t)
    Var N   = sum_i p_i (1 - p_i)         + (sum_i f_i)^2 tau^2
    Var S   = sum_i l_i^2 p_i (1 - p_i)   + (sum_i l_i f_i)^2 tau^2   (the step's part; the passing eigenvalues'
                                                                      own noise adds to it)

``N = sum_i 1[lambda_i > T]`` and ``S = sum_i lambda_i 1[lambda_i > T]``; the first terms are the modes' Bernoulli
draws given ``T``, the second ``T``'s shift of the expected count and sum.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor


class ThresholdStep(NamedTuple):
    """Variances (float64 scalars) of the count above a threshold and of the step's part of the sum above it."""

    count_variance: Tensor
    mass_variance: Tensor


def threshold_step(values: Tensor, errors: Tensor, threshold: float, threshold_se: float) -> ThresholdStep:
    """`ThresholdStep` of eigenvalues ``values`` (m,) with standard errors ``errors`` (m,) against ``threshold``
    with standard error ``threshold_se`` (module doc). An eigenvalue with ``errors`` 0 passes or not for sure.

    Examples:
        >>> import torch
        >>> step = threshold_step(torch.tensor([0.5, 0.1]), torch.tensor([0.01, 0.01]), 0.1, 0.0)
        >>> round(float(step.count_variance), 6)   # the first passes for sure, the second half the time
        0.25
    """
    values, errors = values.double(), errors.double()
    sure = errors <= 0
    scale = torch.where(sure, torch.ones_like(errors), errors)
    z = (values - threshold) / scale
    passes = torch.where(sure, (values > threshold).double(), 0.5 * torch.erfc(-z / math.sqrt(2.0)))
    density = torch.where(sure, torch.zeros_like(z), torch.exp(-0.5 * z * z) / (math.sqrt(2.0 * math.pi) * scale))
    bernoulli = passes * (1.0 - passes)
    tau2 = float(threshold_se) ** 2
    return ThresholdStep(
        bernoulli.sum() + density.sum().pow(2) * tau2,
        (values.pow(2) * bernoulli).sum() + (values * density).sum().pow(2) * tau2,
    )
