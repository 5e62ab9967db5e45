r"""Kernel feature maps: the one random-Fourier-feature map every method shares, the cosine map, bandwidths.

Conventions (see ``DESIGN.md``): the Gaussian kernel and its random Fourier features are

$$k(x, y) = \exp\Big(-\frac{\|x - y\|^2}{2\sigma^2}\Big), \qquad
\phi(x) = \frac{1}{\sqrt{r}}\big[\cos(xW),\ \sin(xW)\big], \quad W = Z / \sigma,$$

with $Z \sim \mathcal{N}(0, I)$ of shape (d, r). Every row of $\phi$ has norm exactly 1, so
$\phi(x)^\top \phi(x) = k(x, x) = 1$ and every RFF covariance has trace 1 (FKEA, Ospanov et al. 2024, eq. 2;
FINC, Zhang et al., eq. 4).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from lightning_spectral._checks import (
    all_finite,
    check_bandwidths,
    check_features,
    check_frequency_memory,
    check_memory,
    check_positive,
    check_positive_int,
    check_seed,
)


def standard_normal_draws(in_features: int, n_frequencies: int, seed: int) -> Tensor:
    """The (d, r) float64 standard-normal matrix ``Z`` behind the frequencies, drawn on the CPU from ``seed``.

    A CPU ``torch.Generator`` makes the draw identical on every rank, device and run.
    """
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    return torch.randn(in_features, n_frequencies, generator=generator, dtype=torch.float64)


class FeatureMap(nn.Module):
    """A kernel's feature map ``phi`` whose input width may be fixed late: what an accumulator needs of a map.

    ``in_features`` is ``None`` until [`build`][lightning_spectral.features.FeatureMap.build] (or the first call) fixes
    it; ``out_features`` is the width ``D``
    of ``phi(x)`` (``None`` while it depends on an unknown input width);
    [`frequencies`][lightning_spectral.features.FeatureMap.frequencies] is what every rank must
    hold identically (``None`` for a map without randomness). A metric builds its map at construction and fixes the
    input width at the first batch, or from the other ranks' widths when its own rank saw no sample.
    """

    in_features: Optional[int]

    @property
    def out_features(self) -> Optional[int]:
        """Width ``D`` of the features (``None`` until it is known)."""
        raise NotImplementedError

    @property
    def built(self) -> bool:
        """Whether the input width is fixed."""
        return self.in_features is not None

    def build(self, in_features: int) -> "FeatureMap":
        """Fix the input width (a no-op when it is already ``in_features``). Returns ``self``.

        Raises:
            ValueError: the map was built for another width.
        """
        in_features = check_positive_int(in_features, "in_features")
        if self.in_features is not None and self.in_features != in_features:
            raise ValueError(
                f"{type(self).__name__} was built for inputs of width {self.in_features}, got width {in_features}."
            )
        if self.in_features is None:
            self.in_features = in_features
            self._build()
        return self

    def _build(self) -> None:
        """Allocate what depends on ``in_features`` (subclasses)."""

    def frequencies(self) -> Optional[Tensor]:
        """What every rank must hold identically (random frequencies, bandwidths), or ``None``."""
        return None


class GaussianRFF(FeatureMap):
    r"""Random Fourier features of the Gaussian kernel, $\phi(x) = [\cos(xW), \sin(xW)] / \sqrt{r}$.

    $\phi(x)^\top \phi(y) = \frac{1}{r} \sum_j \cos\big(w_j^\top (x - y)\big)$ is an unbiased estimate of
    $k(x, y) = \exp\big(-\|x - y\|^2 / (2\sigma^2)\big)$ with error $\sim 1/\sqrt{r}$, and $\|\phi(x)\| = 1$
    exactly.

    Args:
        in_features: width ``d`` of the inputs, or ``None`` to take it from the first batch
            ([`build`][lightning_spectral.features.FeatureMap.build]).
        n_frequencies: number of frequencies ``r``; the output has ``2r`` features (cos block, then sin block).
        sigma: Gaussian bandwidth (> 0), in the units of the inputs.
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

    omega: Tensor

    def __init__(
        self, in_features: Optional[int], n_frequencies: int, sigma: float, seed: int = 0, persistent: bool = True
    ) -> None:
        super().__init__()
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.sigma = check_positive(sigma, "sigma")
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
        if self.in_features is None:
            return torch.zeros(0, self.n_frequencies, dtype=torch.float64)
        return standard_normal_draws(self.in_features, self.n_frequencies, self.seed) / self.sigma

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        # A parent's dtype cast (``.half()``, Lightning's "bf16-true") must not round the frequencies:
        # keep them float64 and only follow device moves, redrawing from the seed if a cast happened.
        super()._apply(fn, recurse)
        if self.omega.dtype != torch.float64:
            self.omega = self._draw().to(self.omega.device)
        return self

    def frequencies(self) -> Optional[Tensor]:
        """The frequencies ``omega`` (d, r), or ``None`` before the input width is known."""
        return self.omega if self.built else None

    def projection(self, x: Tensor) -> Tensor:
        """Phases ``x W`` of shape (N, r), in the compute dtype of ``x`` (validated); the first call of an unbuilt
        map fixes its input width.

        Raises:
            ValueError: the phases overflow (inputs near the float32 limit): scale the inputs (and sigma) down.
        """
        x = check_features(x, "x", width=self.in_features, owner=type(self).__name__)
        self.build(x.shape[1])
        check_batch_memory(type(self).__name__, x, self.n_frequencies)
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
            f"sigma={self.sigma:g}, seed={self.seed}"
        )


def check_batch_memory(owner: str, x: Tensor, n_frequencies: int) -> None:
    """Raise before mapping a batch whose phases and (N, 2r) features cannot fit in memory (about 5 N r values).

    Raises:
        ValueError: naming ``n_frequencies``, the batch size and the bytes.
    """
    needed = 5 * x.shape[0] * n_frequencies * x.element_size()
    check_memory(
        owner, "n_frequencies", n_frequencies, needed, f"the features of a batch of {x.shape[0]} rows",
        "use a smaller `n_frequencies`, or smaller batches (`chunk_size`)",
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


class MultiBandwidthRFF(FeatureMap):
    r"""Random Fourier features at several bandwidths from one projection:
    $\phi_b(x) = [\cos(xZ/s_b), \sin(xZ/s_b)] / \sqrt{r}$.

    The standard-normal draws ``Z`` (d, r) are shared by every bandwidth (as
    [`GaussianRFF`][lightning_spectral.features.GaussianRFF] with the same
    seed would draw them), so ``x Z`` is computed once and rescaled per bandwidth (FastMMD, Zhao & Meng 2015,
    section 3.3, evaluates all kernels of a family from one set of frequencies the same way).

    Shapes: input (N, d); output (B, N, 2r) for B bandwidths. ``in_features=None`` takes the width from the first
    batch ([`build`][lightning_spectral.features.FeatureMap.build]).

    Examples:
        >>> import torch
        >>> x = torch.randn(5, 3, dtype=torch.float64)
        >>> multi = MultiBandwidthRFF(3, 16, sigmas=(1.0, 2.0))
        >>> torch.allclose(multi(x)[1], GaussianRFF(3, 16, sigma=2.0)(x))
        True
    """

    standard: Tensor

    def __init__(
        self, in_features: Optional[int], n_frequencies: int, sigmas: tuple[float, ...], seed: int = 0
    ) -> None:
        super().__init__()
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        empty = isinstance(sigmas, (list, tuple)) and not sigmas
        if empty or not isinstance(sigmas, (list, tuple, Tensor, np.ndarray)):
            raise ValueError(f"`sigmas` must be a non-empty sequence of bandwidths > 0, got {sigmas!r}.")
        self.sigmas = check_bandwidths(sigmas, "sigma")[0]
        self.seed = check_seed(seed)
        self.in_features = None
        self.register_buffer("standard", torch.zeros(0, self.n_frequencies, dtype=torch.float64), persistent=False)
        if in_features is not None:
            self.build(in_features)

    @property
    def out_features(self) -> int:
        """Width of each bandwidth's features, ``2 * n_frequencies``."""
        return 2 * self.n_frequencies

    @property
    def bandwidths(self) -> int:
        """B, the number of bandwidths (the leading dimension of the output)."""
        return len(self.sigmas)

    def _build(self) -> None:
        check_frequency_memory(type(self).__name__, self.in_features, self.n_frequencies)
        self.standard = self._draw().to(self.standard.device)

    def _draw(self) -> Tensor:
        if self.in_features is None:
            return torch.zeros(0, self.n_frequencies, dtype=torch.float64)
        return standard_normal_draws(self.in_features, self.n_frequencies, self.seed)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        super()._apply(fn, recurse)
        if self.standard.dtype != torch.float64:  # keep the draws float64 under a parent's dtype cast
            self.standard = self._draw().to(self.standard.device)
        return self

    def forward(self, x: Tensor) -> Tensor:
        """Map inputs (N, d) to (B, N, 2r), one unit-norm feature block per bandwidth."""
        projected, scale = self._projected(x), 1.0 / math.sqrt(self.n_frequencies)
        blocks = []
        for sigma in self.sigmas:
            phases = projected / sigma
            blocks.append(torch.cat([phases.cos(), phases.sin()], dim=1).mul_(scale))
        return torch.stack(blocks)

    def feature_sum(self, x: Tensor) -> Tensor:
        """``forward(x).sum(1)`` (B, 2r) without the (B, N, 2r) features: all that a mean-only state needs."""
        projected, scale = self._projected(x), 1.0 / math.sqrt(self.n_frequencies)
        sums = []
        for sigma in self.sigmas:
            phases = projected / sigma
            sums.append(torch.cat([phases.cos().sum(0), phases.sin().sum(0)]).mul_(scale))
        return torch.stack(sums)

    def _projected(self, x: Tensor) -> Tensor:
        """``x Z`` (N, r), checked for overflow."""
        x = check_features(x, "x", width=self.in_features, owner=type(self).__name__)
        self.build(x.shape[1])
        check_batch_memory(type(self).__name__, x, self.n_frequencies * (1 + len(self.sigmas)))
        projected = x @ self.standard.to(device=x.device, dtype=x.dtype)
        return check_phases(projected, type(self).__name__, x / min(self.sigmas), self.standard)

    def frequencies(self) -> Optional[Tensor]:
        """What every rank must hold identically: the draws and the bandwidths (``None`` before the width is known)."""
        if not self.built:
            return None
        return torch.cat([self.standard.flatten(), torch.tensor(self.sigmas, dtype=torch.float64).to(self.standard)])


class LinearMap(FeatureMap):
    """The identity, the feature map of the linear kernel ``k(x, y) = x . y``: ``phi(x) = x``, ``D = d``.

    Examples:
        >>> import torch
        >>> LinearMap()(torch.tensor([[3.0, 4.0]]))
        tensor([[3., 4.]])
    """

    def __init__(self, in_features: Optional[int] = None) -> None:
        super().__init__()
        self.in_features = None
        if in_features is not None:
            self.build(in_features)

    @property
    def out_features(self) -> Optional[int]:
        """``d``, the input width (``None`` until it is known)."""
        return self.in_features

    def forward(self, x: Tensor) -> Tensor:
        """Validated inputs (N, d), in their compute dtype."""
        x = check_features(x, "x", width=self.in_features, owner=type(self).__name__)
        self.build(x.shape[1])
        return x


class CosineMap(LinearMap):
    r"""L2 normalisation, the feature map of the cosine kernel $k(x, y) = x^\top y / (\|x\| \|y\|)$.

    Rows with norm <= ``eps`` have no direction: they raise instead of silently becoming NaN or zero
    (a zero row would break the trace-1 identity every method relies on).

    Examples:
        >>> import torch
        >>> CosineMap()(torch.tensor([[3.0, 4.0]]))
        tensor([[0.6000, 0.8000]])
    """

    def __init__(self, eps: float = 1e-12, in_features: Optional[int] = None) -> None:
        super().__init__(in_features)
        self.eps = check_positive(eps, "eps")

    def forward(self, x: Tensor) -> Tensor:
        """Map inputs (N, d) to unit-norm rows (N, d).

        Raises:
            ValueError: a row has (near) zero norm, or the usual shape / NaN problems.
        """
        return _UnitRows.apply(super().forward(x), self.eps)


def unit_rows(x: Tensor, eps: float = 1e-12) -> tuple[Tensor, Tensor]:
    """``(x / ||x||, 1 / ||x||)`` row by row, shapes (N, d) and (N, 1), for finite ``x``; no graph.

    Two passes in the common case. When a squared norm overflows or underflows (a float32 row near 1e20, or
    below 1e-15), every row is divided by its largest entry first.

    Raises:
        ValueError: a row has norm <= ``eps`` (it has no direction).
    """
    with torch.no_grad():
        norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
        safe = math.sqrt(torch.finfo(x.dtype).tiny) * 1e4  # squares of entries this small still add up exactly
        if x.numel() and all_finite(norms) and float(norms.min()) >= safe:
            _check_directions(norms, eps)
            inverse = norms.reciprocal()
            return x * inverse, inverse
        scale = x.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
        scaled = x / scale
        norms = torch.linalg.vector_norm(scaled, dim=1, keepdim=True)
        _check_directions(norms * scale, eps)  # inf only for rows beyond the dtype's range, which pass
        return scaled.div_(norms), norms.reciprocal_().div_(scale)


def _check_directions(lengths: Tensor, eps: float) -> None:
    zero = lengths.squeeze(1) <= eps
    if bool(zero.any()):
        raise ValueError(
            f"CosineMap: {int(zero.sum())} of {lengths.shape[0]} rows have norm <= {eps:g}; the cosine kernel "
            "is undefined for them. Drop those samples or use the Gaussian kernel."
        )


class _UnitRows(torch.autograd.Function):
    """``y = x / ||x||`` row by row (`unit_rows`), with the closed-form backward ``dx = (g - y (y . g)) / ||x||``.

    Four passes over (N, d) in the backward instead of autograd's ~10 through the overflow-safe scaling
    (docs/benchmarks.md, issue 14).
    """

    @staticmethod
    def forward(ctx: object, x: Tensor, eps: float) -> Tensor:
        y, inverse_norms = unit_rows(x, eps)
        ctx.save_for_backward(y, inverse_norms)  # type: ignore[attr-defined]
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: object, grad: Tensor) -> tuple[Tensor, None]:
        y, inverse_norms = ctx.saved_tensors  # type: ignore[attr-defined]
        along = (y * grad).sum(dim=1, keepdim=True)
        return torch.addcmul(grad, y, along, value=-1.0).mul_(inverse_norms), None


def gaussian_kernel(x: Tensor, y: Optional[Tensor] = None, sigma: float = 1.0) -> Tensor:
    r"""The exact kernel matrix $K_{ij} = \exp\big(-\|x_i - y_j\|^2 / (2\sigma^2)\big)$, shape (N, M), float64.

    For small inputs: the oracle the random-feature routes are tested against.

    Examples:
        >>> import torch
        >>> gaussian_kernel(torch.zeros(1, 2), torch.ones(1, 2), sigma=1.0)
        tensor([[0.3679]], dtype=torch.float64)
    """
    sigma = check_positive(sigma, "sigma")
    x = check_features(x, "x").double()
    if y is None:
        distances = scaled_distances(x, x, sigma).fill_diagonal_(0.0)  # k(x, x) = 1 exactly (not cdist's round-off)
    else:
        distances = scaled_distances(x, check_features(y, "y", width=x.shape[1]).double(), sigma)
    return torch.exp(-0.5 * distances.square())


def scaled_distances(x: Tensor, y: Tensor, sigma: float = 1.0) -> Tensor:
    """``||x_i - y_j|| / sigma`` (N, M) for finite float64 rows, without overflow or underflow at any magnitude.

    ``torch.cdist`` squares the entries (and, for many rows, expands ``||x||^2 + ||y||^2 - 2 x.y``): rows near
    1e155 give ``inf - inf = NaN`` and rows below 1e-155 give 0. Both sets are divided by their largest
    magnitude ``s`` first, and ``s / sigma`` is applied after: the kernel depends on ``x / sigma`` only. As with
    ``cdist`` itself, distances below ~1e-8 of the rows' magnitude are round-off (the expanded form).
    """
    scale = float(torch.cat([x.abs().flatten(), y.abs().flatten()]).max()) if x.numel() and y.numel() else 0.0
    if scale == 0.0:
        return torch.zeros(x.shape[0], y.shape[0], dtype=x.dtype, device=x.device)
    distances = torch.cdist(x / scale, y / scale)
    ratio = scale / sigma  # may overflow to inf for huge inputs and a tiny sigma: those distances are infinite
    return torch.where(distances > 0, distances * ratio, 0.0)


def median_bandwidth(x: Tensor, max_samples: int = 2000, seed: int = 0) -> float:
    """Median pairwise Euclidean distance of (a random subsample of) ``x``: a starting point for ``sigma``.

    This is a heuristic, not a rule from the papers (FKEA tunes sigma per dataset, FINC's rule is not fully
    specified). Scores are comparable only at one fixed sigma, embedding and sample size; smaller sigma
    splits data into more, finer modes.

    Args:
        x: samples (N, d), N >= 2.
        max_samples: subsample size (the cost is O(max_samples^2 d)).
        seed: seed of the subsample.

    Raises:
        ValueError: fewer than 2 samples, or all sampled points identical.

    Examples:
        >>> import torch
        >>> median_bandwidth(torch.tensor([[0.0], [1.0], [3.0]]))
        2.0
    """
    x = check_features(x, "x").double()
    max_samples = check_positive_int(max_samples, "max_samples")
    seed = check_seed(seed)
    if x.shape[0] < 2:
        raise ValueError(f"median_bandwidth needs at least 2 samples, got {x.shape[0]}.")
    if x.shape[0] > max_samples:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        x = x[torch.randperm(x.shape[0], generator=generator)[:max_samples].to(x.device)]
    scale = float(x.abs().max())  # distances of x / scale neither overflow nor underflow (inputs near 1e300)
    median = float(torch.pdist(x / scale).median()) * scale if scale > 0 else 0.0
    if not math.isfinite(median):
        raise ValueError(
            f"median_bandwidth: the median pairwise distance {median} exceeds float64's range; rescale the inputs."
        )
    if median <= 0:
        raise ValueError("median_bandwidth: the median pairwise distance is 0 (most samples are identical).")
    return median


KERNELS = ("gaussian", "cosine")


def kernel_feature_map(
    kernel: str,
    in_features: Optional[int],
    sigma: Optional[float],
    n_frequencies: int,
    seed: int,
    persistent: bool = True,
) -> FeatureMap:
    """A normalised kernel's feature map: [`GaussianRFF`][lightning_spectral.features.GaussianRFF] (``"gaussian"``) or
    [`CosineMap`][lightning_spectral.features.CosineMap] (``"cosine"``).

    Raises:
        ValueError: unknown ``kernel``, or ``sigma`` missing / not > 0 for the Gaussian kernel.
    """
    if kernel == "cosine":
        return CosineMap(in_features=in_features)
    if kernel != "gaussian":
        raise ValueError(f"`kernel` must be one of {KERNELS}, got {kernel!r}.")
    if sigma is None:
        raise ValueError(
            "The Gaussian kernel needs a bandwidth `sigma`; start from `median_bandwidth(x)` or, for SPEC, match the "
            "two embeddings with `lightning_spectral.functional.match_bandwidth`."
        )
    return GaussianRFF(in_features, n_frequencies, sigma, seed, persistent=persistent)


class PairedFeatureMap(FeatureMap):
    """Two embeddings of the same samples mapped side by side: ``[phi_a(x_a), phi_b(x_b)]`` (N, D_a + D_b).

    Used by SPEC, whose joint covariance ``(1/n) A^T A`` of ``A = [Phi_a, Phi_b]`` holds both kernel
    covariances and the cross-covariance. The Gaussian maps draw from the same ``seed``, so two identical
    embeddings with one bandwidth get identical features (their SPEC difference is exactly 0). Called with one
    tensor, it maps the concatenated input ``[x_a, x_b]`` (N, d_a + d_b), the rows an accumulator holds.

    Args:
        kernel: ``"gaussian"`` (random Fourier features, ``D = 2 r`` per embedding) or ``"cosine"`` (``D = d``).
        in_features: widths ``(d_a, d_b)``, or ``None`` to fix them later
            ([`build`][lightning_spectral.features.PairedFeatureMap.build]).
        sigma: bandwidths ``(sigma_a, sigma_b)`` for the Gaussian kernel (ignored for cosine).
        n_frequencies: ``r`` per embedding for the Gaussian kernel.
        seed: frequency seed.
        persistent: save the frequencies in ``state_dict``.

    Examples:
        >>> import torch
        >>> paired = PairedFeatureMap("cosine", (3, 2))
        >>> paired(torch.randn(4, 3), torch.randn(4, 2)).shape, paired.widths
        (torch.Size([4, 5]), (3, 2))
    """

    in_features: Optional[tuple[int, int]]  # type: ignore[assignment]

    def __init__(
        self,
        kernel: str,
        in_features: Optional[tuple[int, int]] = None,
        sigma: tuple[Optional[float], Optional[float]] = (None, None),
        n_frequencies: int = 2000,
        seed: int = 0,
        persistent: bool = True,
    ) -> None:
        super().__init__()
        self.kernel, self.in_features = kernel, None
        self.map_a = kernel_feature_map(kernel, None, sigma[0], n_frequencies, seed, persistent)
        self.map_b = kernel_feature_map(kernel, None, sigma[1], n_frequencies, seed, persistent)
        if in_features is not None:
            self.build(in_features)

    def build(self, in_features: tuple[int, int]) -> "PairedFeatureMap":  # type: ignore[override]
        """Fix the two input widths ``(d_a, d_b)`` (a no-op when they are already these). Returns ``self``.

        Raises:
            ValueError: not a pair of integers >= 1, or other widths than the map was built for.
        """
        if not isinstance(in_features, (tuple, list)) or len(in_features) != 2:
            raise ValueError(f"`in_features` must be a pair (d_a, d_b), got {in_features!r}.")
        widths = tuple(check_positive_int(width, "in_features") for width in in_features)
        if self.in_features is not None and self.in_features != widths:
            raise ValueError(f"PairedFeatureMap was built for widths {self.in_features}, got {widths}.")
        self.in_features = widths  # type: ignore[assignment]
        self.map_a.build(widths[0])
        self.map_b.build(widths[1])
        return self

    @property
    def widths(self) -> tuple[int, int]:
        """``(D_a, D_b)``: the feature widths of the two embeddings.

        Raises:
            RuntimeError: before the input widths are known (cosine kernel).
        """
        if self.map_a.out_features is None or self.map_b.out_features is None:
            raise RuntimeError("PairedFeatureMap: the feature widths are unknown until the input widths are.")
        return self.map_a.out_features, self.map_b.out_features

    @property
    def out_features(self) -> Optional[int]:
        """``D_a + D_b`` (``None`` until known)."""
        if self.map_a.out_features is None or self.map_b.out_features is None:
            return None
        return self.map_a.out_features + self.map_b.out_features

    def forward(self, x_a: Tensor, x_b: Optional[Tensor] = None) -> Tensor:
        """Map a pair of batches (N, d_a), (N, d_b) of the same N samples, or their concatenation (N, d_a + d_b),
        to (N, D_a + D_b)."""
        if x_b is None:
            if self.in_features is None:
                raise RuntimeError("PairedFeatureMap: build it with the widths (d_a, d_b) to map a concatenated batch.")
            x_a, x_b = x_a[:, : self.in_features[0]], x_a[:, self.in_features[0] :]
        phi_a, phi_b = self.map_a(x_a), self.map_b(x_b)
        if self.in_features is None:
            self.in_features = (x_a.shape[1], x_b.shape[1])  # type: ignore[assignment]
        return torch.cat([phi_a, phi_b.to(phi_a.dtype)], dim=1)

    def frequencies(self) -> Optional[Tensor]:
        """What every rank must hold identically: both frequency matrices, or the widths for the cosine kernel."""
        if self.in_features is None:
            return None
        if isinstance(self.map_a, GaussianRFF):
            return torch.cat([self.map_a.omega.flatten(), self.map_b.omega.flatten()])
        return torch.tensor(self.in_features, dtype=torch.float64)
