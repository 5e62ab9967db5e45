"""The sampling noise of a second moment, from smooth random multipliers of each sample (a multiplier bootstrap).

A stream of samples gives ``C = Q / n`` with ``Q = sum_i phi_i phi_i^T`` (``phi_i = phi(x_i)``, D features). Its
sampling noise ``C - E[C]`` is estimated by ``A`` draws, each a multiplier-bootstrap replicate
(Chernozhukov, Chetverikov and Kato 2013, "Gaussian approximations and multiplier bootstrap for maxima of sums of
high-dimensional random vectors", Ann. Statist. 41(6); the wild bootstrap of Wu 1986 and Mammen 1993)::

    E_a = (1 / n) sum_i (s_a(x_i) - sbar_a) phi_i phi_i^T = (S_a - sbar_a Q) / n,   sbar_a = (1 / n) sum_i s_a(x_i)

with the multiplier a smooth random function of the sample (a random Fourier function)::

    s_a(x) = sqrt(2) cos(<omega_a, x> + b_a),   omega_a ~ N(0, (ratio / bandwidth)^2 I),   b_a ~ U[0, 2 pi)

drawn from the seed, so it is the same on every rank and for every order or batching of the samples, and it moves
with ``x`` continuously (a change of ``x`` by ``delta`` moves ``s_a`` by at most ``sqrt(2) |omega_a| |delta|``):
the last bits of an embedding do not matter. Over the random phase ``E[s_a] = 0`` and ``E[s_a^2] = 1``; for
samples farther apart than about ``1 / |omega|`` (``bandwidth / ratio`` per coordinate) the multipliers are
uncorrelated (``E[s_a(x) s_a(y)] = exp(-|x - y|^2 ratio^2 / (2 bandwidth^2))``, the Gaussian kernel at a
``ratio`` times finer scale, Rahimi and Recht 2007), and draws of different ``a`` are uncorrelated. So, conditional
on the samples, ``E_a`` has mean 0 and covariance ``(1/n^2) sum_i (phi_i phi_i^T - C)^{(x)2}``, the covariance of
``C - E[C]`` under i.i.d. sampling: the multiplier bootstrap's replicate.

What it assumes: the samples are i.i.d. and distinct at the scale ``bandwidth / ratio``. Equal samples share their
multiplier: a side collapsed onto one point gives ``E_a = 0`` exactly (its noise is 0: every draw of it is that
point); duplicated or near-duplicated samples (closer than ``bandwidth / ratio``) count as one sample of their
total weight, which over-states their noise (a conservative bias: ``k`` tight clusters behave as ``k`` samples,
not ``n``; measured in docs/benchmarks/finc-significance.md, "FINC significance on the multiplier draws").

State per stream: ``n``, ``Q``, the ``A`` multiplier sums ``w_a = sum_i s_a(x_i)`` and the ``A`` matrices
``S_a = sum_i s_a(x_i) phi_i phi_i^T``: ``(1 + A)`` D x D float64 sums, all plain sums (order-free, all-reduced
with the rest). FINC's generated side also keeps the ``A`` mean draws ``F_a = sum_i s_a(x_i) phi_i`` (D each, for
the standard errors of its mode shares). A stream may keep no draws (``A = 0``: ``n`` and ``Q`` only); FINC keeps them
on one side ([`finc_null`][lightning_spectral.functional.finc_null]).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_positive, check_positive_int
from lightning_spectral.algebra.gram import add_feature_sums_

#: Default number of multiplier draws (each a D x D float64 sum), kept by FINC's generated side only.
DEFAULT_DRAWS = 3

#: The multipliers' frequencies are this many times the kernel's (``omega ~ N(0, (ratio / bandwidth)^2 I)``).
DEFAULT_RATIO = 100.0

_frequencies: dict[tuple, tuple[Tensor, Tensor]] = {}


def check_draws(value: int, name: str = "draws") -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer in [1, 64]."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise ValueError(
            f"`{name}` must be an integer in [1, 64] (the sampling-noise draws; default {DEFAULT_DRAWS}), got "
            f"{value!r}."
        )
    return value


#: Default number of draws a metric keeps for the standard errors of its scores (``noise_draws``): two D x D sums
#: beside the metric's own, so the noise estimate's state is at most twice the metric's.
DEFAULT_SCORE_DRAWS = 2


def check_noise_draws(value: int, name: str = "noise_draws") -> int:
    """Return ``value`` or raise ``ValueError`` unless it is an integer in [0, 64] (0: no standard errors)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 64:
        raise ValueError(
            f"`{name}` must be an integer in [0, 64] (the multiplier draws kept for standard errors; 0 keeps none "
            f"and reports no `se`; default {DEFAULT_SCORE_DRAWS}), got {value!r}."
        )
    return value


class Multipliers:
    """The multiplier functions ``s_a(x) = sqrt(2) cos(<omega_a, x> + b_a)``, ``a = 1..A`` (module doc).

    Args:
        draws: ``A``.
        bandwidth: the kernel's bandwidth ``sigma`` (> 0); the frequencies are ``ratio / sigma`` per coordinate.
        seed: identical on every rank.
        ratio: the multipliers' frequency over the kernel's (> 0).

    Examples:
        >>> import torch
        >>> weights = Multipliers(3, bandwidth=1.0, seed=0)
        >>> x = torch.randn(1000, 4)
        >>> w = weights(x)
        >>> w.shape, bool((w.mean(0).abs() < 0.15).all()), bool(((w**2).mean(0) - 1).abs().max() < 0.15)
        (torch.Size([1000, 3]), True, True)
        >>> torch.equal(weights(x.flip(0)), w.flip(0))     # a function of each sample alone
        True
    """

    def __init__(self, draws: int, bandwidth: Optional[float], seed: int, ratio: float = DEFAULT_RATIO) -> None:
        self.draws = check_positive_int(draws, "draws")
        #: ``None`` while the kernel's ``sigma="auto"`` is not fixed (its metric sets it then).
        self.bandwidth = None if bandwidth is None else check_positive(bandwidth, "bandwidth")
        self.seed, self.ratio = int(seed), check_positive(ratio, "ratio")

    #: Widths of column blocks each scaled to unit row norm before the projection (inputs of the cosine kernel, whose
    #: row norms carry no meaning; ``bandwidth`` is then on the unit sphere); ``None``: the rows as given.
    unit_blocks: Optional[tuple[int, ...]] = None

    def frequencies(self, width: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """``omega`` (d, A) and ``b`` (A,), float64, drawn from the seed (CPU generator) for input width ``d``."""
        if self.bandwidth is None:
            raise RuntimeError("Multipliers: the kernel's sigma='auto' is not fixed yet (its metric fixes it first).")
        key = (width, self.draws, self.bandwidth, self.seed, self.ratio, str(device))
        if key not in _frequencies:
            generator = torch.Generator().manual_seed(self.seed + 7_919)
            omega = torch.randn(width, self.draws, generator=generator, dtype=torch.float64)
            phase = torch.rand(self.draws, generator=generator, dtype=torch.float64) * (2 * math.pi)
            _frequencies[key] = ((omega * (self.ratio / self.bandwidth)).to(device), phase.to(device))
        return _frequencies[key]

    def __call__(self, x: Tensor) -> Tensor:
        """(N, A) float64: ``s_a(x_i)`` for the samples ``x`` (N, d), computed in float64."""
        omega, phase = self.frequencies(x.shape[1], x.device)
        x = x.double()
        if self.unit_blocks is not None:
            parts = x.split(list(self.unit_blocks), 1)
            x = torch.cat([torch.nn.functional.normalize(part, dim=1) for part in parts], 1)
        return math.sqrt(2.0) * torch.cos(x @ omega + phase)


class NoiseSums(NamedTuple):
    """One stream's second moment and its multiplier sums (module doc).

    Attributes:
        total: ``Q`` (D, D).
        weighted: ``S_a`` (A, D, D).
        weight_sums: ``w_a`` (A,).
        count: ``n``.
        feature_sum: ``s = sum_i phi_i`` (D,), or ``None`` when not kept.
        weighted_features: ``F_a = sum_i s_a(x_i) phi_i`` (A, D), the draws of the mean (`mean_draw`), or ``None``.
    """

    total: Tensor
    weighted: Tensor
    weight_sums: Tensor
    count: float
    feature_sum: Optional[Tensor] = None
    weighted_features: Optional[Tensor] = None

    @classmethod
    def of(
        cls, x: Tensor, feature_map, multipliers: Optional[Multipliers], chunk_size: int = 4096
    ) -> NoiseSums:
        """The sums of the samples ``x`` (N, d) under ``feature_map``, accumulated chunk by chunk (no draws when
        ``multipliers`` is ``None``)."""
        width = feature_map(x[:1]).shape[1]
        draws = 0 if multipliers is None else multipliers.draws
        total = torch.zeros(width, width, dtype=torch.float64, device=x.device)
        weighted = torch.zeros(draws, width, width, dtype=torch.float64, device=x.device)
        weight_sums = torch.zeros(draws, dtype=torch.float64, device=x.device)
        feature_sum = torch.zeros(width, dtype=torch.float64, device=x.device)
        weighted_features = torch.zeros(draws, width, dtype=torch.float64, device=x.device)
        for start in range(0, x.shape[0], chunk_size):
            chunk = x[start : start + chunk_size]
            add_feature_sums_(
                feature_map(chunk), feature_sum=feature_sum, outer=total,
                weights=None if multipliers is None else multipliers(chunk), weight_sums=weight_sums,
                weighted=weighted, weighted_features=weighted_features,
            )
        return cls(total, weighted, weight_sums, float(x.shape[0]), feature_sum, weighted_features)

    @property
    def draws(self) -> int:
        return int(self.weighted.shape[0])

    @property
    def sums(self) -> tuple[Tensor, ...]:
        """``(Q, S_1, ..., S_A)``: every matrix, in the order of `moment_weights` and `draw_weights`."""
        return (self.total, *self.weighted.unbind(0))

    def moment_weights(self, scale: float) -> list[float]:
        """Weights on `sums` of ``scale * C``."""
        return [scale / self.count] + [0.0] * self.draws

    def draw_weights(self, a: int, scale: float) -> list[float]:
        """Weights on `sums` of ``scale * E_a = scale (S_a - sbar_a Q) / n``."""
        mean = float(self.weight_sums[a]) / self.count
        row = [-scale * mean / self.count] + [0.0] * self.draws
        row[1 + a] = scale / self.count
        return row

    def moment(self) -> Tensor:
        """``C = Q / n`` (D, D)."""
        return self.total / self.count

    def draw(self, a: int) -> Tensor:
        """``E_a`` (D, D)."""
        return (self.weighted[a] - (float(self.weight_sums[a]) / self.count) * self.total) / self.count

    def mean_draw(self, a: int) -> Tensor:
        """The draw of the mean's noise ``e_a = (1 / n) sum_i (s_a(x_i) - sbar_a) phi_i = (F_a - sbar_a s) / n``
        (D,): the same multipliers as ``E_a``, so ``(e_a, E_a)`` is a joint replicate of ``(mu, C) - E[(mu, C)]``.

        Raises:
            RuntimeError: the sums keep no mean draws (``weighted_features`` is ``None``).
        """
        if self.weighted_features is None or self.feature_sum is None:
            raise RuntimeError("NoiseSums: these sums keep no draws of the mean (`weighted_features`).")
        mean = float(self.weight_sums[a]) / self.count
        return (self.weighted_features[a] - mean * self.feature_sum) / self.count

    def draws_times(self, vectors: Tensor) -> Tensor:
        """``E_a V`` for every draw (A, D, k), ``V`` (D, k), without forming ``E_a``:
        ``(S_a V - sbar_a Q V) / n`` (each sum read once, ``Q V`` shared by the draws)."""
        vectors = vectors.to(self.total.dtype)
        means = (self.weight_sums / self.count).to(self.total.dtype)
        return (self.weighted @ vectors - means[:, None, None] * (self.total @ vectors)) / self.count


def mean_draws_exact(x: Tensor, feature_map, multipliers: Multipliers) -> Tensor:
    """The oracle of `NoiseSums.mean_draw`: ``e_a = Phi^T (s_a - sbar_a) / n`` (A, D) in float64, ``Phi`` (n, D)."""
    phi = feature_map(x).double()
    weights = multipliers(x)
    return (weights - weights.mean(0)).T @ phi / x.shape[0]


def draws_exact(x: Tensor, feature_map, multipliers: Multipliers) -> tuple[Tensor, Tensor]:
    """The oracle, sample by sample: ``C`` (D, D) and the draws ``E_a`` (A, D, D) as n x n formulas.

    ``C = Phi^T Phi / n`` and ``E_a = Phi^T diag(s_a - sbar_a) Phi / n`` in float64, ``Phi`` (n, D).
    """
    phi = feature_map(x).double()
    weights = multipliers(x)
    centred = weights - weights.mean(0)
    n = x.shape[0]
    draws = torch.stack([phi.T @ (centred[:, a : a + 1] * phi) / n for a in range(weights.shape[1])])
    return phi.T @ phi / n, draws


def standard_error(replicates: Tensor) -> Tensor:
    """The standard error from ``A`` replicate draws of a scalar's noise ``d_a`` (A,): ``sqrt(mean_a d_a^2)``.

    The draws have mean 0 by construction (multipliers of mean 0), so their root mean square is the estimate, with
    about ``A`` degrees of freedom.
    """
    return replicates.double().pow(2).mean().sqrt()
