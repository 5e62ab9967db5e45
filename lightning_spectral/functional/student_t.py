"""Student-t tails (survival function and its inverse) in torch, for prediction intervals.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def student_t_sf(t: Tensor, dof: int) -> Tensor:
    """``P(T_nu >= t)`` for Student's t with an integer ``dof`` (Abramowitz & Stegun 26.7.3-4), float64, any shape.

    Examples:
        >>> import torch
        >>> [round(v, 4) for v in student_t_sf(torch.tensor([0.0, 1.943180, -1.0]), 6).tolist()]
        [0.5, 0.05, 0.822]
    """
    t = torch.as_tensor(t, dtype=torch.float64)
    theta = torch.atan(t / math.sqrt(dof))
    cos2, sin = torch.cos(theta) ** 2, torch.sin(theta)
    if dof % 2:  # odd: 2/pi (theta + sin theta (cos theta + 2/3 cos^3 theta + ...))
        term, total = torch.cos(theta), torch.zeros_like(t)
        if dof > 1:
            total = term.clone()
            for k in range(3, dof - 1, 2):
                term = term * cos2 * (k - 1) / k
                total = total + term
        inside = 2 / math.pi * (theta + sin * total)
    else:  # even: sin theta (1 + 1/2 cos^2 theta + 1.3/2.4 cos^4 theta + ...)
        term, total = torch.ones_like(t), torch.ones_like(t)
        for k in range(2, dof - 1, 2):
            term = term * cos2 * (k - 1) / k
            total = total + term
        inside = sin * total
    return ((1 - inside) / 2).clamp(0.0, 1.0)


def student_t_isf(p: float, dof: int) -> float:
    """The ``t`` with ``P(T_nu >= t) = p`` (bisection of `student_t_sf`, to 1e-12)."""
    low, high = -1e3, 1e3
    for _ in range(80):
        middle = (low + high) / 2
        if float(student_t_sf(torch.tensor(middle, dtype=torch.float64), dof)) > p:
            low = middle
        else:
            high = middle
    return (low + high) / 2
