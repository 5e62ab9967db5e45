"""Random Fourier features of the Gaussian kernel (Rahimi and Recht, NIPS 2007, Algorithm 1).

``phi(x) = [cos(x W), sin(x W)] / sqrt(r)`` with ``W ~ N(0, I / sigma^2)``: every row has norm 1, so the
covariance of any sample has trace exactly 1.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import Tensor

from lightning_spectral._checks import (
    all_finite,
    check_batch_memory,
    check_features,
    check_frequency_memory,
    check_positive,
    check_positive_int,
    check_seed,
)
from lightning_spectral.kernels.bandwidth import check_sigma
from lightning_spectral.kernels.feature_map import FeatureMap, standard_normal_draws


class GaussianRFF(FeatureMap):
    r"""Random Fourier features of the Gaussian kernel, $\phi(x) = [\cos(xW), \sin(xW)] / \sqrt{r}$.

    $\phi(x)^\top \phi(y) = \frac{1}{r} \sum_j \cos\big(w_j^\top (x - y)\big)$ is an unbiased estimate of
    $k(x, y) = \exp\big(-\|x - y\|^2 / (2\sigma^2)\big)$ with error $\sim 1/\sqrt{r}$, and $\|\phi(x)\| = 1$
    exactly.

    Args:
        in_features: width ``d`` of the inputs, or ``None`` to take it from the first batch
            ([`build`][lightning_spectral.kernels.FeatureMap.build]).
        n_frequencies: number of frequencies ``r``; the output has ``2r`` features (cos block, then sin block).
        sigma: Gaussian bandwidth (> 0), in the units of the inputs, or ``"auto"``: fixed later by
            [`set_bandwidth`][lightning_spectral.kernels.FeatureMap.set_bandwidth] (a metric fixes it from its
            reference rows, [`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]); ``sigma`` is ``None``
            until then.
        seed: seed of the CPU generator that draws the frequencies. The frequencies ``omega`` (d, r) are a
            float64 buffer, identical on every rank and device.
        persistent: save ``omega`` in ``state_dict`` (metrics redraw it from the seed instead).

    Shapes: input (N, d) floating point; output (N, 2r) in float32, or float64 for float64 input
    (float16 / bfloat16 are upcast to float32).

    Raises:
        ValueError: non-positive ``in_features`` / ``n_frequencies`` / ``sigma``; at call time wrong rank or
            width, NaN or Inf.

    Examples:
        >>> import torch
        >>> rff = GaussianRFF(in_features=3, n_frequencies=4, sigma=1.0, seed=0)
        >>> phi = rff(torch.randn(5, 3))
        >>> phi.shape
        torch.Size([5, 8])
        >>> torch.allclose(phi.norm(dim=1), torch.ones(5))
        True
    """

    squared_norm: Optional[float] = 1.0  # unit-norm rows

    omega: Tensor

    def __init__(
        self,
        in_features: Optional[int],
        n_frequencies: int,
        sigma: Union[float, str],
        seed: int = 0,
        persistent: bool = True,
    ) -> None:
        super().__init__()
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.sigma: Optional[float] = check_sigma(sigma)
        self.seed = check_seed(seed)
        self.in_features = None
        self.register_buffer("omega", torch.zeros(0, self.n_frequencies, dtype=torch.float64), persistent=persistent)
        if in_features is not None:
            self.build(in_features)

    @property
    def out_features(self) -> int:
        """Width of the output, ``2 * n_frequencies``."""
        return 2 * self.n_frequencies

    def _build(self) -> None:
        check_frequency_memory(type(self).__name__, self.in_features, self.n_frequencies)
        self.omega = self._draw().to(self.omega.device)

    def _draw(self) -> Tensor:
        if self.in_features is None or self.sigma is None:
            return torch.zeros(0, self.n_frequencies, dtype=torch.float64)
        return standard_normal_draws(self.in_features, self.n_frequencies, self.seed) / self.sigma

    @property
    def awaits_bandwidth(self) -> bool:
        """True while ``sigma="auto"`` is not fixed."""
        return self.sigma is None

    def set_bandwidth(self, sigma: float) -> None:
        """Fix ``sigma`` (``"auto"`` maps) and draw the frequencies ``Z / sigma`` if the width is known."""
        self.sigma = check_positive(sigma, "sigma")
        self.omega = self._draw().to(self.omega.device)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        # A parent's dtype cast (``.half()``, Lightning's "bf16-true") must not round the frequencies:
        # keep them float64 and only follow device moves, redrawing from the seed if a cast happened.
        super()._apply(fn, recurse)
        if self.omega.dtype != torch.float64:
            self.omega = self._draw().to(self.omega.device)
        return self

    def frequencies(self) -> Optional[Tensor]:
        """The frequencies ``omega`` (d, r), or ``None`` before the input width (and an ``"auto"`` sigma) is known."""
        return self.omega if self.built and self.sigma is not None else None

    def projection(self, x: Tensor) -> Tensor:
        """Phases ``x W`` of shape (N, r), in the compute dtype of ``x`` (validated); the first call of an unbuilt
        map fixes its input width.

        Raises:
            ValueError: the phases overflow (inputs near the float32 limit): scale the inputs (and sigma) down.
        """
        x = check_features(x, "x", width=self.in_features, owner=type(self).__name__)
        self.build(x.shape[1])
        check_batch_memory(type(self).__name__, x, self.n_frequencies)
        if self.sigma is None:
            raise RuntimeError(
                f"{type(self).__name__}(sigma='auto') maps no row before its bandwidth is fixed: call "
                "`set_bandwidth(sigma)` (a metric fixes it from its reference rows at the first read)."
            )
        omega = self.omega.to(device=x.device, dtype=x.dtype)
        return check_phases(x @ omega, type(self).__name__, x, self.omega)

    def forward(self, x: Tensor) -> Tensor:
        """Map inputs (N, d) to unit-norm features (N, 2r)."""
        phases = self.projection(x)
        return torch.cat([phases.cos(), phases.sin()], dim=1).mul_(1.0 / math.sqrt(self.n_frequencies))

    def feature_sum(self, x: Tensor) -> Tensor:
        """``forward(x).sum(0)`` (2r,) without the (N, 2r) features: all that a mean-only state needs."""
        phases = self.projection(x)
        return torch.cat([phases.cos().sum(0), phases.sin().sum(0)]).mul_(1.0 / math.sqrt(self.n_frequencies))

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, n_frequencies={self.n_frequencies}, "
            f"sigma={'auto' if self.sigma is None else format(self.sigma, 'g')}, seed={self.seed}"
        )


def check_phases(phases: Tensor, owner: str, x: Optional[Tensor] = None, frequencies: Optional[Tensor] = None) -> Tensor:
    """Return ``phases = x W`` or raise when they overflowed: ``cos(inf)`` would be a silent NaN.

    With ``x`` and ``frequencies`` given, the full check runs only when ``max |x| * max_j ||w_j||_1`` (a bound on
    every ``|x . w_j|``) comes near the dtype's range, which is cheaper than scanning the (N, r) phases.
    """
    if x is not None and frequencies is not None and x.numel():
        bound = float(x.detach().abs().max()) * float(frequencies.abs().sum(0).max())
        if bound < torch.finfo(phases.dtype).max / 4:
            return phases
    if not all_finite(phases):
        raise ValueError(
            f"{owner}: the random-feature phases x W overflow {phases.dtype} (inputs of magnitude near "
            f"{torch.finfo(phases.dtype).max:.1e} / ||w||); rescale the inputs (and sigma with them: the kernel only "
            "depends on x / sigma), or pass float64 inputs."
        )
    return phases
