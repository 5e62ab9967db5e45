"""FINC: novel modes of a generated distribution against a reference (Zhang, Jalali, Li, Farnia), and the oracle.

The rho-conditional covariance ``L = C_gen - rho C_ref`` (FINC eq. 4, both sides through the same random
frequencies) has positive eigenvalues along modes that the generated samples hold more than ``rho`` times as
often as the reference; its mirror ``C_ref - rho C_gen`` finds the under-represented (missing) modes.
``trace(L) = 1 - rho`` and its eigenvalues lie in ``[-rho, 1]``.

**Significance** (beyond the paper: FINC's Algorithm 1 keeps every positive eigenvalue and its Theorem 1 bounds
only the random-feature error, not the sampling noise). Finite samples give ``L`` many small positive eigenvalues
from noise alone. Write ``L = E[L] + N`` with ``N = (C_gen - E C_gen) - rho (C_ref - E C_ref)`` the sampling noise.
The null hypothesis "no mode is over-represented more than rho-fold" is ``E[L] <= 0`` (negative semi-definite);
under it Weyl's inequality gives ``lambda_k(L) <= lambda_k(E[L]) + lambda_max(N) <= lambda_max(N)`` for every k,
and more generally, with fewer than k positive eigenvalues in ``E[L]``, ``lambda_k(L) <= lambda_max(N)``. So the
p-value of the k-th eigenvalue is ``P(lambda_max(N) >= lambda_k)``, and declaring the eigenvalues with p-value
``<= significance`` significant names a spurious extra mode with probability at most ``significance``.

The law of ``lambda_max(N)`` is estimated from the data. Each side is split into ``G`` groups by a hash of each
sample's values (`content_groups`); ``Q_j`` is group j's outer-product sum and ``n_j`` its size. For a
contrast ``h`` (a row of the G x G Hadamard matrix other than the all-ones one, entries +-1)::

    E(h) = sum_j (h_j - hbar) Q_j / (n sqrt(1 - hbar^2)),   hbar = sum_j h_j n_j / n

is a draw of ``C - E C`` for that side: the side's mean cancels (``sum_j (h_j - hbar) n_j = 0``) and, groups
being independent, its covariance equals that of ``C - E C`` (``sum_j (h_j - hbar)^2 n_j = n (1 - hbar^2)``).
The draws of ``N`` are ``+-(E_gen(h_a) - s rho E_ref(h_a))``, the ``a``-th contrast of one side paired with the
``a``-th of the other, ``s = +-1``: ``lambda_max`` and ``-lambda_min`` of ``2 (G - 1)`` matrices, ``4 (G - 1)``
draws from ``G - 1`` independent contrast pairs. At ``rho > 1`` this bound is loose: the noise is largest along
the shared modes, where ``E[L] = (1 - rho) C`` is far below 0 on one distribution. There the null is one distribution on
both sides ("same distribution", the case the level is stated for) and each draw is the top eigenvalue of
``(1 - rho) C_pool + N*`` (`null_model`; ``4 (G - 1)`` draws). With their mean ``m`` and standard
deviation ``s``, the p-value is the Student-t prediction interval's, with ``nu = G - 1`` degrees of freedom (the
independent pairs behind the draws; the draws of one pair share its contrasts)::

    p(lambda) = P(T_nu >= (lambda - m) / (s sqrt(1 + 1/nu)))

An eigenvalue is significant when ``p <= significance`` (default 0.05) and it exceeds ``min_eigenvalue``
(default 1e-3: anything worth less than about 0.1 % of extra probability mass is not reported). The groups
depend on each sample's values alone, so groups, draws and every number are the same for any order, batch size,
sharding or float dtype of the same samples. ``novelty = sum of the significant eigenvalues`` (about the extra
probability mass of the novel modes times their within-mode kernel similarity; FINC section 3).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_dense, check_features, check_positive
from lightning_spectral.features import GaussianRFF, gaussian_kernel
from lightning_spectral.linalg import (
    DEFAULT_CHUNK_SIZE,
    add_covariance_,
    eigen_dtype,
    extreme_eigenvalues,
    symmetric_eigh,
    symmetrize,
    weighted_sum,
)

#: Default significance level: on same-distribution data at most this share of runs names any mode.
DEFAULT_SIGNIFICANCE = 0.05
#: Default absolute minimum of a significant eigenvalue (a tolerance rather than FINC Algorithm 1's "> 0").
DEFAULT_MIN_EIGENVALUE = 1e-3
#: Default number of content groups per side (the null's draws come from their contrasts).
DEFAULT_GROUPS = 4


def check_significance(value: float, name: str = "significance") -> float:
    """Return ``float(value)`` or raise ``ValueError`` unless it is a level in (0, 1)."""
    value = check_positive(value, name)
    if not value < 1:
        raise ValueError(f"`{name}` must be a significance level in (0, 1) (e.g. 0.05), got {value!r}.")
    return value


def check_groups(value: int, name: str = "groups") -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is a power of two in [2, 64]."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in {2**k for k in range(1, 7)}:
        raise ValueError(f"`{name}` must be a power of two in [2, 64] (the groups per side; default 4), got {value!r}.")
    return value


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


class Moment(NamedTuple):
    """An uncentred second moment kept as the sums it was accumulated in: ``C = (Q_1 + ... + Q_k) / count``.

    The matrices FINC decomposes are weighted sums of such moments, formed in one pass
    ([`weighted_sum`][lightning_spectral.linalg.weighted_sum]) instead of one full-size temporary per operation.

    Attributes:
        sums: (D, D) outer-product sums ``Q_j = sum_i phi(x_i) phi(x_i)^T``, symmetric (as
            [`add_gram_`][lightning_spectral.linalg.add_gram_] leaves them); float64 in this library.
        count: the number of samples behind them.
    """

    sums: tuple[Tensor, ...]
    count: float

    @classmethod
    def of(cls, x: Tensor, feature_map: Callable[[Tensor], Tensor], chunk_size: int = DEFAULT_CHUNK_SIZE) -> Moment:
        """The moment of the samples ``x`` (N, d) under ``feature_map``, accumulated chunk by chunk."""
        width = feature_map(x[:1]).shape[1]
        total = torch.zeros(width, width, dtype=torch.float64, device=x.device)
        return cls((add_covariance_(total, x, feature_map, chunk_size),), float(x.shape[0]))

    def terms(self, scale: float) -> list[tuple[float, Tensor]]:
        """``scale * C`` as ``(weight, matrix)`` terms of [`weighted_sum`][lightning_spectral.linalg.weighted_sum]."""
        return [(scale / self.count, total) for total in self.sums]


class Groups(NamedTuple):
    """One side's samples in ``G`` content groups (`content_groups`): group j's sum ``Q_j`` and size ``n_j``.

    Attributes:
        sums: G (D, D) outer-product sums.
        counts: G group sizes.
    """

    sums: tuple[Tensor, ...]
    counts: tuple[float, ...]

    @classmethod
    def of(
        cls, x: Tensor, feature_map: Callable[[Tensor], Tensor], groups: int, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> Groups:
        """The groups of the samples ``x`` (N, d) under ``feature_map``."""
        index = content_groups(x, groups)
        width = feature_map(x[:1]).shape[1]
        sums = []
        for j in range(groups):
            total = torch.zeros(width, width, dtype=torch.float64, device=x.device)
            part = x[index == j]
            sums.append(add_covariance_(total, part, feature_map, chunk_size) if len(part) else total)
        return cls(tuple(sums), tuple(float((index == j).sum()) for j in range(groups)))

    @property
    def count(self) -> float:
        """The side's sample count."""
        return float(sum(self.counts))

    def moment(self) -> Moment:
        """The side's second moment ``C = sum_j Q_j / n``."""
        return Moment(self.sums, self.count)

    def contrast_terms(self, contrast: Tensor, scale: float) -> list[tuple[float, Tensor]]:
        """``scale * E(h)`` (module doc) for the +-1 contrast ``h`` (G,), as ``(weight, matrix)`` terms."""
        counts = torch.tensor(self.counts, dtype=torch.float64)
        n = float(counts.sum())
        mean = float((contrast * counts).sum()) / n
        norm = n * math.sqrt(max(1.0 - mean**2, 1e-12))
        pairs = zip(contrast.tolist(), self.sums, strict=True)
        return [(scale * (float(h) - mean) / norm, total) for h, total in pairs]


def hadamard_contrasts(groups: int) -> Tensor:
    """(G - 1, G) float64: the rows of the Sylvester Hadamard matrix other than the all-ones one (entries +-1,
    mutually orthogonal, each summing to 0)."""
    matrix = torch.ones(1, 1, dtype=torch.float64)
    while matrix.shape[0] < groups:
        matrix = torch.cat([torch.cat([matrix, matrix], 1), torch.cat([matrix, -matrix], 1)], 0)
    return matrix[1:]


class NullModel(NamedTuple):
    """The estimated law of ``lambda_max`` of the sampling noise (module doc): its draws, their mean and spread.

    Attributes:
        draws: (K,) float64, the ``lambda_max`` draws.
        dof: ``nu``, the independent contrast pairs behind them.
    """

    draws: Tensor
    dof: int

    @property
    def mean(self) -> float:
        return float(self.draws.mean())

    @property
    def scale(self) -> float:
        """``s sqrt(1 + 1/nu)``: the spread of a new draw about the estimated mean (prediction interval)."""
        spread = float(self.draws.std()) if self.draws.numel() > 1 else 0.0
        return max(spread, 1e-300) * math.sqrt(1 + 1 / self.dof)

    def p_values(self, values: Tensor) -> Tensor:
        """``P(T_nu >= (lambda - m) / scale)`` for each eigenvalue, float64, same shape."""
        return student_t_sf((values.double() - self.mean) / self.scale, self.dof)

    def threshold(self, significance: float) -> float:
        """The eigenvalue whose p-value is ``significance``."""
        return self.mean + self.scale * student_t_isf(significance, self.dof)


def null_weights(x: Groups, y: Groups, rho: float) -> Tensor:
    """(K, G_x + G_y) float64: the weights on ``x``'s then ``y``'s group sums of each matrix of `null_model`.

    The ``a``-th contrast of one side is paired with the ``a``-th of the other (``G_x = G_y``). At ``rho = 1``:
    ``E_x(h_a) - s E_y(h_a)``, ``s = +-1``; at ``rho != 1``: ``(1 - rho) C_pool + s E_x(h_a) - t rho E_y(h_a)``,
    ``s, t = +-1``.
    """

    def weights(side: Groups, contrast: Tensor, scale: float) -> list[float]:
        return [weight for weight, _ in side.contrast_terms(contrast, scale)]

    pooled = [(1.0 - rho) / (x.count + y.count)] * (len(x.sums) + len(y.sums))
    rows = []
    for a, b in zip(hadamard_contrasts(len(x.sums)), hadamard_contrasts(len(y.sums)), strict=True):
        for sign in (1.0, -1.0):
            if rho == 1.0:
                rows.append(weights(x, a, 1.0) + weights(y, b, -sign))
                continue
            for flip in (1.0, -1.0):
                row = weights(x, a, sign) + weights(y, b, -flip * rho)
                rows.append([w + p for w, p in zip(row, pooled, strict=True)])
    return torch.tensor(rows, dtype=torch.float64)


def combinations(sums: list[Tensor], weights: Tensor, dtype: torch.dtype, rows: int = 64) -> Tensor:
    """(K, D, D): ``sum_j weights[k, j] sums[j]`` for every row of ``weights`` (K, J), in one pass over the sums
    (each row block of every input read once into K float64 accumulators by a rank-1 ``addmm``, cast once to
    ``dtype``)."""
    first = sums[0]
    size, width = first.shape
    out = torch.empty((weights.shape[0], size, width), dtype=dtype, device=first.device)
    weights = weights.to(device=first.device, dtype=first.dtype)
    buffer = torch.empty((weights.shape[0], rows * width), dtype=first.dtype, device=first.device)
    for start in range(0, size, rows):
        end = min(start + rows, size)
        acc = buffer[:, : (end - start) * width]
        torch.mm(weights[:, :1], sums[0][start:end].reshape(1, -1), out=acc)
        for j in range(1, len(sums)):
            acc.addmm_(weights[:, j : j + 1], sums[j][start:end].reshape(1, -1))
        out[:, start:end] = acc.view(-1, end - start, width)
    return out


#: Matrices of the null formed at once (their memory: this many (2r)^2 matrices, float32 from FLOAT32_MIN_SIZE).
NULL_BATCH = 6


def null_model(x: Groups, y: Groups, rho: float) -> NullModel:
    """Draws of ``lambda_max`` of ``C_x - rho C_y`` on one distribution, from the groups' contrasts (module doc).

    Contrast ``a`` of one side is paired with contrast ``a`` of the other, so draws of different ``a`` are
    independent. At ``rho = 1`` each of the ``2 (G - 1)`` matrices ``E_x(h_a) - s E_y(h_a)`` (``s = +-1``) gives two
    draws, its largest eigenvalue and minus its smallest (the draw of the negated contrasts). At ``rho != 1`` one
    distribution gives ``E[C_x - rho C_y] = (1 - rho) C``: each draw is the largest eigenvalue of
    ``(1 - rho) C_pool + s E_x(h_a) - t rho E_y(h_a)`` (``C_pool`` both sides' second moment, ``s, t = +-1``).
    Either way ``4 (G - 1)`` draws. The matrices are formed `NULL_BATCH` at a time in one pass over the group
    sums (float32 from [`FLOAT32_MIN_SIZE`][lightning_spectral.linalg.FLOAT32_MIN_SIZE] rows, as the score's
    ``eigvalsh``);
    their ends by Lanczos ([`extreme_eigenvalues`][lightning_spectral.linalg.extreme_eigenvalues], residual ``1e-10
    ||A||`` in
    float64, ``1e-5 ||A||`` in float32; dense fallback), or a dense ``eigvalsh`` at ``rho != 1`` when a side has
    more samples than features or the matrix is small (there the top is a tight cluster just above 0 where
    Lanczos exhausts its budget; docs/benchmarks.md, issue 14).

    Raises:
        ValueError: the two sides have different numbers of groups.
    """
    if len(x.sums) != len(y.sums):
        raise ValueError(f"null_model: both sides need the same number of groups, got {len(x.sums)} and {len(y.sums)}.")
    size = x.sums[0].shape[0]
    dense = rho != 1.0 and (size <= 1024 or min(x.count, y.count) >= size)
    dtype = eigen_dtype("auto", size)
    rtol = 1e-5 if dtype == torch.float32 else 1e-10
    weights = null_weights(x, y, rho)
    sums = list(x.sums + y.sums)
    draws = []
    for start in range(0, weights.shape[0], NULL_BATCH):
        for matrix in combinations(sums, weights[start : start + NULL_BATCH], dtype):
            if dense:
                draws.append(float(torch.linalg.eigvalsh(matrix)[-1]))
            elif rho == 1.0:
                lowest, highest = extreme_eigenvalues(matrix, rtol=rtol, symmetric=True)
                draws += [float(highest), -float(lowest)]
            else:
                draws.append(float(extreme_eigenvalues(matrix, rtol=rtol, which="largest", symmetric=True)[1]))
    return NullModel(torch.tensor(draws, dtype=torch.float64), len(x.sums) - 1)


class DifferentialSpectrum(NamedTuple):
    """Eigenvalues (and eigenvectors) of ``C_x - rho C_y`` with their p-values and the significance threshold.

    Attributes:
        eigenvalues: (2r,) float64, descending.
        eigenvectors: (2r, 2r) float64 columns (not yet oriented), or ``None`` when only the score was needed.
        p_values: (2r,) float64, ``P(lambda_max(noise) >= lambda_k)`` (module doc).
        threshold: the eigenvalue at which a mode becomes significant:
            ``max(null quantile at the level, min_eigenvalue)``.
        significance: the level.
        min_eigenvalue: the absolute minimum of a significant eigenvalue.
        null: the estimated law of the noise's top eigenvalue.
    """

    eigenvalues: Tensor
    eigenvectors: Optional[Tensor]
    p_values: Tensor
    threshold: float
    significance: float
    min_eigenvalue: float
    null: NullModel

    @property
    def significant(self) -> Tensor:
        """(2r,) bool: p-value ``<= significance`` and eigenvalue ``> min_eigenvalue``."""
        return (self.p_values <= self.significance) & (self.eigenvalues > self.min_eigenvalue)

    @property
    def score(self) -> Tensor:
        """Sum of the significant eigenvalues (0 when none passes)."""
        return self.eigenvalues[self.significant].sum()


_HASH_PRIME = 2_147_483_647  # 2^31 - 1: every product below stays under 2^62, so int64 never overflows
_hash_weights: dict[tuple[int, str], Tensor] = {}


def content_groups(x: Tensor, groups: int) -> Tensor:
    """(N,) int64: the group in ``[0, groups)`` each row of ``x`` (N, d) joins, from its values alone.

    ``h(x) = sum_j w_j b_j(x) mod p`` over the 32-bit words ``b_j`` of the row's float32 rounding (``p = 2^31 - 1``,
    fixed random weights ``w``), and the row joins group ``h mod groups``. Integer sums modulo ``p`` do not depend
    on the order of anything, so any order, batching or sharding of the same rows gives the same groups. The words
    are those of the float32 rounding whatever the dtype, so a float32 and a float64 copy of the same samples
    split alike (float64 values beyond float32's range fold their two words into one). Equal rows join the same
    group; ``-0.0`` counts as ``0.0``.

    Examples:
        >>> import torch
        >>> x = torch.randn(1000, 4)
        >>> index = content_groups(x, 4)
        >>> torch.equal(index.flip(0), content_groups(x.flip(0), 4))    # order-free
        True
        >>> torch.equal(index, content_groups(x.double(), 4))           # dtype-free
        True
        >>> [200 < int((index == j).sum()) < 300 for j in range(4)]
        [True, True, True, True]
    """
    check_dense(x, "x", "content_groups")
    rounded = x.float().contiguous() + 0.0  # + 0.0 turns -0.0 into 0.0
    words = rounded.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    beyond = torch.isinf(rounded) & torch.isfinite(x)
    if bool(beyond.any()):  # float64 values outside float32's range: fold both words of the float64 value
        bits = (x.double().contiguous() + 0.0).view(torch.int64)
        words = torch.where(beyond, (bits ^ (bits >> 32)) & 0xFFFFFFFF, words)
    key = (words.shape[1], str(words.device))
    if key not in _hash_weights:
        generator = torch.Generator().manual_seed(20_240_917)
        _hash_weights[key] = torch.randint(1, _HASH_PRIME, (words.shape[1],), generator=generator).to(words.device)
    hashed = ((words % _HASH_PRIME) * _hash_weights[key] % _HASH_PRIME).sum(1) % _HASH_PRIME
    return hashed % groups


def reference_halves(x: Tensor) -> Tensor:
    """(N,) bool: ``content_groups(x, 2) == 0``, the two-group split (kept for callers of the previous rule)."""
    check_dense(x, "x", "reference_halves")
    return content_groups(x, 2) == 0


def differential_spectrum(
    x: Groups,
    y: Groups,
    rho: float,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    vectors: bool = True,
    null: Optional[NullModel] = None,
) -> DifferentialSpectrum:
    """Eigenvalues (and, with ``vectors``, eigenvectors) of ``C_x - rho C_y``, their p-values and the threshold.

    Without ``vectors`` one ``eigvalsh`` suffices (the score needs no eigenvectors), in float32 from
    [`FLOAT32_MIN_SIZE`][lightning_spectral.linalg.FLOAT32_MIN_SIZE] rows (the FINC score within 0.001 % of float64's at
    2r = 4096 and 8192, docs/benchmarks.md). ``null`` reuses a `null_model` of the same groups.
    """
    if null is None:
        null = null_model(x, y, rho)
    terms = x.moment().terms(1.0) + y.moment().terms(-rho)
    if vectors:
        values, eigenvectors = symmetric_eigh(weighted_sum(terms))
    else:  # float32 from FLOAT32_MIN_SIZE rows, as FKEAVendi; eigvalsh reads one triangle of the symmetric difference
        dtype = eigen_dtype("auto", x.sums[0].shape[0])
        values = torch.linalg.eigvalsh(weighted_sum(terms, dtype)).double().flip(0)
        eigenvectors = None
    threshold = max(null.threshold(significance), min_eigenvalue)
    return DifferentialSpectrum(
        values, eigenvectors, null.p_values(values), threshold, significance, min_eigenvalue, null
    )


def finc_spectrum(
    generated: Tensor,
    reference: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    rho: float = 1.0,
    seed: int = 0,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    groups: int = DEFAULT_GROUPS,
) -> DifferentialSpectrum:
    """FINC on two embedding sets (N, d) and (M, d): the spectrum of ``C_gen - rho C_ref``, p-values, threshold.

    Each side is split into ``groups`` content groups (`content_groups`) for the null (module doc).

    Raises:
        ValueError: an empty side, widths that differ, NaN / Inf, ``rho`` or ``min_eigenvalue`` not a number
            > 0, ``significance`` not in (0, 1), ``groups`` not a power of two in [2, 64], a side with fewer
            samples than groups.
    """
    rho = check_positive(rho, "rho")
    significance = check_significance(significance)
    min_eigenvalue = check_positive(min_eigenvalue, "min_eigenvalue")
    groups = check_groups(groups)
    generated = check_features(generated, "generated", owner="finc")
    reference = check_features(reference, "reference", width=generated.shape[1], owner="finc")
    if generated.shape[0] == 0 or reference.shape[0] < 2:
        raise ValueError("finc: needs at least 1 generated and 2 reference samples.")
    rff = GaussianRFF(generated.shape[1], n_frequencies, sigma, seed).to(generated.device)
    sides = {}
    for name, side in (("generated", generated), ("reference", reference)):
        sides[name] = Groups.of(side, rff, groups, chunk_size)
        check_group_counts("finc", name, sides[name].counts)
    return differential_spectrum(sides["generated"], sides["reference"], rho, significance, min_eigenvalue)


def check_group_counts(owner: str, side: str, counts: tuple[float, ...]) -> None:
    """Raise ``ValueError`` unless every content group of ``side`` holds at least one sample."""
    if min(counts) < 1:
        raise ValueError(
            f"{owner}: the {side} side needs samples in each of its {len(counts)} content groups (its groups hold "
            f"{[int(c) for c in counts]}); pass more {side} samples (at least a few per group) or fewer `groups`."
        )


def finc(
    generated: Tensor,
    reference: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    rho: float = 1.0,
    seed: int = 0,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    groups: int = DEFAULT_GROUPS,
) -> Tensor:
    """FINC novelty score: the sum of the significant eigenvalues of ``C_gen - rho C_ref`` (module doc).

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> shared = torch.randn(400, 2, generator=g) * 0.1
        >>> novel = torch.randn(100, 2, generator=g) * 0.1 + 10.0
        >>> score = finc(torch.cat([shared[:200], novel]), shared[200:], sigma=1.0, n_frequencies=256)
        >>> 0.25 < float(score) < 0.4   # about the novel share, 1/3, times its within-mode similarity
        True
    """
    return finc_spectrum(
        generated, reference, sigma, n_frequencies, rho, seed, significance, min_eigenvalue, groups=groups
    ).score


def ken_eigenvalues(k_xx: Tensor, k_xy: Tensor, k_yy: Tensor, rho: float = 1.0) -> Tensor:
    """Eigenvalues (descending) of the (n+m) x (n+m) matrix of the FINC appendix (KEN's formulation).

    ``[[K_xx/n, sqrt(rho/(nm)) K_xy], [-sqrt(rho/(nm)) K_xy^T, -(rho/m) K_yy]] = D K+`` with
    ``D = diag(1_n, -1_m)`` and ``K+`` the PSD block matrix with + signs; its spectrum is that of the
    symmetric ``sqrt(K+) D sqrt(K+)``, computed here with two symmetric eigendecompositions.
    """
    n, m = k_xy.shape
    off = math.sqrt(rho / (n * m)) * k_xy.double()
    k_plus = torch.cat(
        [torch.cat([k_xx.double() / n, off], 1), torch.cat([off.T, rho * k_yy.double() / m], 1)], 0
    )
    values, vectors = torch.linalg.eigh(symmetrize(k_plus))
    root = vectors @ torch.diag(values.clamp_min(0).sqrt()) @ vectors.T
    signs = torch.cat([torch.ones(n), -torch.ones(m)]).to(root)
    return torch.linalg.eigvalsh(symmetrize(root @ (signs[:, None] * root))).flip(0)


def finc_exact(generated: Tensor, reference: Tensor, sigma: float, rho: float = 1.0) -> Tensor:
    """Exact eigenvalues (descending) of ``C_gen - rho C_ref`` for the Gaussian kernel, through the n x n
    kernel matrices ([`ken_eigenvalues`][lightning_spectral.functional.ken_eigenvalues]). O((n+m)^3): the oracle for
    small n, m.

    Raises:
        ValueError: an empty side, widths that differ, NaN / Inf, ``rho`` or ``sigma`` not a number > 0.

    Examples:
        >>> import torch
        >>> x = torch.randn(20, 3)
        >>> values = finc_exact(x, x, sigma=1.0, rho=1.0)  # one sample against itself: all zero
        >>> bool(values.abs().max() < 1e-8)
        True
    """
    rho = check_positive(rho, "rho")
    generated = check_features(generated, "generated", owner="finc_exact")
    reference = check_features(reference, "reference", width=generated.shape[1], owner="finc_exact")
    for name, side in (("generated", generated), ("reference", reference)):
        if side.shape[0] == 0:
            raise ValueError(f"finc_exact: `{name}` is empty; each side needs at least one sample.")
    return ken_eigenvalues(
        gaussian_kernel(generated, sigma=sigma),
        gaussian_kernel(generated, reference, sigma=sigma),
        gaussian_kernel(reference, sigma=sigma),
        rho,
    )
