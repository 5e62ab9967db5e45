r"""SPEC: spectral comparison of two embeddings of the same samples, and the differentiable SPEC-align loss.

Jalali, Dibaei Nia and Farnia, "Towards an Explainable Comparison and Alignment of Feature Embeddings"
(ICML 2025). With normalised kernel matrices $K_a$, $K_b$ of one set of n samples under two embeddings,

$$\Lambda = \frac{1}{n}\,(K_a - K_b) \qquad \text{(n x n, symmetric, trace 0, eigenvalues in } [-1, 1]).$$

A large positive eigenvalue marks a group of samples embedding ``a`` clusters and ``b`` does not (its
eigenvector's large entries are the members); a negative one the reverse. SPEC-diff $= \max_i |\lambda_i|$
(a symmetric pseudo-distance). Two routes give the same non-zero spectrum:

- ``"exact"``: the n x n matrix with exact kernels (the oracle; cheaper when n is small);
- ``"covariance"``: the joint covariance $C = \frac{1}{n} A^\top A$ of $A = [\Phi_a, \Phi_b]$ (random Fourier
  features for the Gaussian kernel, the normalised embeddings for the cosine kernel) and the non-symmetric
  $\Gamma = D C$, $D = \operatorname{diag}(I, -I)$ (Proposition 1), solved through its symmetric similar form
  $L^\top D L$ (one Cholesky $C = L L^\top$,
  [`differential_theta`][lightning_spectral.functional.spec.differential_theta]): one ``eigvalsh``
  for the spectrum and Lanczos for the few eigenvectors the clusters need. Cost O(n D^2 + D^3), linear in n.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_features, check_positive, check_positive_int, check_seed
from lightning_spectral.algebra.eigen import eigen_dtype, extreme_eigenpairs, jittered_cholesky, symmetric_eigh
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, add_gram_, covariance, symmetrize
from lightning_spectral.functional.sampling_noise import standard_error
from lightning_spectral.kernels.bandwidth import median_bandwidth
from lightning_spectral.kernels.by_name import KERNELS
from lightning_spectral.kernels.cosine_map import CosineMap
from lightning_spectral.kernels.exact import gaussian_kernel
from lightning_spectral.kernels.paired_feature_map import PairedFeatureMap

METHODS = ("auto", "exact", "covariance")


class SPECClusters(NamedTuple):
    """The top clusters on one side of the SPEC spectrum.

    Attributes:
        eigenvalues: (k,) float64; positive (``a``-only clusters, largest first) or negative (``b``-only, most
            negative first).
        vectors: (n, k) float64 unit eigenvectors of ``Lambda`` over the samples, each oriented so that its
            entries sum to >= 0 (the reference code's rule).
        members: (k, per_cluster) long: indices of the samples with the largest entries, best first.
    """

    eigenvalues: Tensor
    vectors: Tensor
    members: Tensor


class SPECResult(NamedTuple):
    """Output of [`spec`][lightning_spectral.functional.spec].

    Attributes:
        eigenvalues: non-zero spectrum of ``Lambda`` (descending, both signs), float64.
        spec_diff: scalar, ``max |eigenvalue|``.
        clusters_a: clusters embedding ``a`` groups and ``b`` does not (positive eigenvalues).
        clusters_b: clusters embedding ``b`` groups and ``a`` does not (negative eigenvalues).
    """

    eigenvalues: Tensor
    spec_diff: Tensor
    clusters_a: SPECClusters
    clusters_b: SPECClusters


def check_pair(emb_a: Tensor, emb_b: Tensor, owner: str) -> tuple[Tensor, Tensor]:
    """Validate two embeddings of the same samples: (N, d_a) and (N, d_b), finite, same N.

    Raises:
        ValueError: different numbers of rows (the rows must be the same samples), or the usual shape / NaN errors.
    """
    emb_a = check_features(emb_a, "emb_a", owner=owner)
    emb_b = check_features(emb_b, "emb_b", owner=owner)
    if emb_a.shape[0] != emb_b.shape[0]:
        raise ValueError(
            f"{owner}: `emb_a` has {emb_a.shape[0]} rows and `emb_b` {emb_b.shape[0]}; SPEC compares two embeddings "
            "of the SAME samples, row i of both must be sample i."
        )
    return emb_a, emb_b


def kernel_matrix(x: Tensor, kernel: str, sigma: Optional[float]) -> Tensor:
    """Exact normalised kernel matrix (N, N), float64: Gaussian ``exp(-||x_i - x_j||^2 / (2 sigma^2))`` or cosine."""
    if kernel == "cosine":
        phi = CosineMap()(x.double())
        return phi @ phi.T
    if sigma is None:
        raise ValueError("The Gaussian kernel needs a bandwidth `sigma` (see `match_bandwidth`, `median_bandwidth`).")
    return gaussian_kernel(x, sigma=sigma)


def nonzero(values: Tensor, rtol: float = 1e-10, atol: float = 1e-9) -> Tensor:
    """Mask of the eigenvalues that are not round-off: ``|lambda| > max(rtol * max |lambda|, atol)``.

    The absolute floor matters when every eigenvalue is round-off (identical embeddings): SPEC eigenvalues lie
    in [-1, 1] (normalised kernels), so nothing below ``atol`` is a cluster.
    """
    if values.numel() == 0:
        return torch.zeros_like(values, dtype=torch.bool)
    return values.abs() > max(rtol * float(values.abs().max()), atol)


def _orient_columns(vectors: Tensor) -> Tensor:
    signs = torch.where(vectors.sum(0) < 0, -1.0, 1.0).to(vectors.dtype)
    return vectors * signs


def _side(eigenvalues: Tensor, k: int, positive: bool) -> Tensor:
    """Positions (in the descending ``eigenvalues``) of one side's top ``k``, largest ``|eigenvalue|`` first."""
    order = torch.arange(eigenvalues.shape[0], device=eigenvalues.device)
    if not positive:
        order = order.flip(0)
    return order[(eigenvalues[order] > 0) if positive else (eigenvalues[order] < 0)][:k]


def _clusters(
    eigenvalues: Tensor, vectors: Tensor, columns: Tensor, k: int, per_cluster: int, positive: bool
) -> SPECClusters:
    """Top-k clusters on one side from eigenvalues (descending) and unit sample-space eigenvectors (n, m).

    ``columns[i]`` is the column of ``vectors`` that belongs to ``eigenvalues[i]`` (the covariance route maps only
    the eigenvectors the clusters need).
    """
    order = _side(eigenvalues, k, positive)
    chosen = _orient_columns(vectors[:, columns[order]])
    members = chosen.topk(min(per_cluster, chosen.shape[0]), dim=0).indices.T
    return SPECClusters(eigenvalues[order], chosen, members)


def differential_theta(
    joint_covariance: Tensor, width_a: int, dtype: torch.dtype = torch.float64
) -> tuple[Tensor, Tensor, Tensor, float]:
    r"""The symmetric form $\Theta = L^\top S L$ of SPEC's $\Gamma = S C$, with $C + \epsilon I = L L^\top$ (one
    Cholesky).

    $C = \frac{1}{n} A^\top A$ is the joint covariance of $A = [\Phi_a, \Phi_b]$ (``width_a`` columns of the first
    embedding, then the second's) and $S = \operatorname{diag}(I, -I)$. $\Gamma = S C$ is not symmetric (SPEC,
    Proposition 1), but with $C = L L^\top$, $L^\top (S L L^\top) L^{-\top} = L^\top S L$: $\Theta w = \lambda w$
    gives $\Gamma v = \lambda v$ with $v = S L w$. One Cholesky replaces the eigendecomposition of $C$ that an
    exact square root needs.

    The shift ``eps`` ([`jittered_cholesky`][lightning_spectral.algebra.jittered_cholesky], ``~D 2.2e-16 trace(C)``) lets
    a singular ``C`` (fewer samples
    than features, near-dependent random features) factorise; ``Theta``'s eigenvalues are those of
    ``S (C + eps I)``, within ``~2 eps`` of ``Gamma``'s (measured) except where ``Gamma`` has Jordan blocks:
    identical or rotated embeddings give ``S C`` blocks ``[[p, p], [-p, -p]]`` whose zero eigenvalues move to
    ``+-sqrt(2 p eps)``. So eigenvalues below the returned ``floor = 4 sqrt(eps trace(C))`` (~8e-6 at
    D = 4096, trace 2) are round-off of the shift: set them to 0.

    Cost: ``L``'s first ``width_a`` rows vanish right of column ``width_a``, so
    ``Theta = [[L_11^T L_11, 0], [0, 0]] - L_b^T L_b`` (``L_b``: the other rows) costs about 5/8 of one
    ``D^3`` product ([`add_gram_`][lightning_spectral.algebra.add_gram_]).

    Returns:
        ``(Theta (D, D) in dtype, L (D, D) float64, s (D,) float64, floor)``, ``s`` the diagonal of ``S``; the
        Cholesky factorisation is float64, ``Theta``'s products run in ``dtype`` (float32 halves their cost).
    """
    factor, eps = jittered_cholesky(joint_covariance)
    size = factor.shape[0]
    rows = factor.to(dtype)
    theta = -add_gram_(torch.zeros(size, size, dtype=dtype, device=factor.device), rows[width_a:])
    top = rows[:width_a, :width_a]
    theta[:width_a, :width_a] += top.T @ top
    signs = torch.ones(size, dtype=factor.dtype, device=factor.device)
    signs[width_a:] = -1.0
    floor = 4.0 * math.sqrt(eps * float(joint_covariance.double().trace()))
    return symmetrize(theta), factor, signs, floor


def spec_diff_standard_error(eigenvalues: Tensor, vectors: Tensor, signs: Tensor, draws: list[Tensor]) -> Tensor:
    r"""The standard error of SPEC-diff $= \max_i |\lambda_i|$ from draws $E_a$ of the joint covariance's sampling
    noise ([`sampling_noise`][lightning_spectral.functional.sampling_noise]), to first order.

    $\Gamma = S C$ has the right eigenvector $v$ and the left eigenvector $S v$ ($C S (S v) = C v = \lambda S v$), so
    a move $E$ of $C$ moves $\lambda$ by $v^\top S \cdot S E v / (v^\top S v) = v^\top E v / (v^\top S v)$ (the
    first-order perturbation of a simple eigenvalue of a non-symmetric matrix); for the top $|\lambda|$, the replicate
    is $d_a = \operatorname{sign}(\lambda)\, v^\top E_a v / (v^\top S v)$ and the standard error
    $\sqrt{\tfrac{1}{A} \sum_a d_a^2}$. 0 when SPEC-diff is 0 (identical embeddings stay identical under every draw).

    Args:
        eigenvalues: (D,) from [`differential_eigh`][lightning_spectral.functional.spec.differential_eigh].
        vectors: (D, D) its columns ``v``.
        signs: (D,) the diagonal of ``S`` (+1 for the first embedding's features, -1 for the second's).
        draws: the ``E_a``, each (D, D).

    Returns:
        A float64 scalar.
    """
    top = int(eigenvalues.abs().argmax())
    value = float(eigenvalues[top])
    if value == 0.0 or not draws:
        return torch.zeros((), dtype=torch.float64)
    v = vectors[:, top].double()
    scale = float((v * signs.to(v) * v).sum())
    moves = torch.stack([(v @ draw.double() @ v) / scale for draw in draws]) * math.copysign(1.0, value)
    return standard_error(moves)


def differential_eigh(joint_covariance: Tensor, width_a: int) -> tuple[Tensor, Tensor]:
    r"""Eigen-pairs of the SPEC differential covariance ``Gamma = S C`` through its symmetric form.

    One Cholesky and one symmetric ``eigh``
    ([`differential_theta`][lightning_spectral.functional.spec.differential_theta]): ``Theta w = lambda w`` and
    ``v = S L w``.

    Args:
        joint_covariance: ``C`` (D_a + D_b, D_a + D_b), symmetric PSD.
        width_a: ``D_a``, the number of leading columns that belong to the first embedding.

    Returns:
        ``(eigenvalues (D,), vectors (D, D))``, float64, eigenvalues descending (both signs; those below the
        Cholesky shift's noise floor, ~8e-6 at D = 4096, are 0: null directions where ``C`` has rank below D);
        the columns ``v`` are eigenvectors of ``Gamma`` scaled so that ``v^T S v = lambda`` and
        ``v^T C v = lambda^2`` (so ``u = A v``, the eigenvector of the n x n ``Lambda = A S A^T / n``, has
        ``||u||^2 = n lambda^2``), both up to the shift.

    Examples:
        >>> import torch
        >>> phi_a = torch.nn.functional.normalize(torch.randn(50, 3, dtype=torch.float64), dim=1)
        >>> joint = torch.cat([phi_a, phi_a], 1)
        >>> values, _ = differential_eigh(joint.T @ joint / 50, width_a=3)
        >>> bool(values.abs().max() < 1e-10)   # identical embeddings: no difference
        True
    """
    theta, factor, signs, floor = differential_theta(joint_covariance, width_a)
    eigenvalues, w = symmetric_eigh(theta)
    eigenvalues = torch.where(eigenvalues.abs() > floor, eigenvalues, 0.0)
    return eigenvalues, signs[:, None] * (factor @ w)


def _exact_route(a: Tensor, b: Tensor, kernel: str, sigma_a, sigma_b) -> tuple[Tensor, Tensor]:
    n = a.shape[0]
    values, vectors = symmetric_eigh((kernel_matrix(a, kernel, sigma_a) - kernel_matrix(b, kernel, sigma_b)) / n)
    return values, vectors


def _covariance_route(
    a: Tensor, b: Tensor, feature_map: PairedFeatureMap, chunk_size: int, k: int, precision: str
) -> tuple[Tensor, Tensor, Tensor, float]:
    """Eigenvalues (descending), the column of each in the sample vectors (-1: not mapped), the unit sample
    vectors (n, m) of the ``k`` top clusters per side, and the relative round-off level of the eigenvalues.

    One Cholesky, one ``eigvalsh`` of ``Theta = L^T S L``
    ([`differential_theta`][lightning_spectral.functional.spec.differential_theta])
    and Lanczos for the few eigenvectors the clusters need; ``Theta``, its spectrum and the Lanczos products in
    float32 where ``precision`` says so (the Cholesky factor and the map back stay float64).
    """
    joint = torch.cat([a, b.to(a.dtype)], 1)
    cov = covariance(joint, feature_map, chunk_size)
    dtype = eigen_dtype(precision, cov.shape[0])
    theta, factor, signs, floor = differential_theta(cov, feature_map.widths[0], dtype)
    values = torch.linalg.eigvalsh(theta).double().flip(0)
    values = torch.where(values.abs() > floor, values, 0.0)  # the Cholesky shift's round-off
    rtol = 1e-10 if dtype == torch.float64 else 1e-5  # below it, |eigenvalue| / max |eigenvalue| is round-off
    shown = torch.where(nonzero(values, rtol), values, 0.0)
    top, bottom = _side(shown, k, True), _side(shown, k, False)
    positions = torch.cat([bottom, top.flip(0)])  # ascending, as extreme_eigenpairs returns them
    ritz, w = extreme_eigenpairs(theta, len(bottom), len(top), rtol=rtol)
    if not torch.allclose(ritz.double(), values[positions], rtol=0, atol=100 * rtol * float(values.abs().max())):
        w = torch.linalg.eigh(theta)[1][:, values.shape[0] - 1 - positions]  # Lanczos missed one: the dense answer
    columns = torch.full((values.shape[0],), -1, dtype=torch.long, device=values.device)
    columns[positions] = torch.arange(positions.shape[0], device=values.device)
    gamma_vectors = signs[:, None] * (factor @ w.double())
    # u = A v maps an eigenvector of Gamma to one of Lambda (||u|| = sqrt(n) |lambda|); built chunk by chunk.
    sample_vectors = torch.cat(
        [
            feature_map(joint[i : i + chunk_size]).double() @ gamma_vectors
            for i in range(0, joint.shape[0], chunk_size)
        ]
    )
    return values, columns, sample_vectors / sample_vectors.norm(dim=0).clamp_min(1e-300), rtol


def spec(
    emb_a: Tensor,
    emb_b: Tensor,
    kernel: str = "gaussian",
    sigma_a: Optional[float] = None,
    sigma_b: Optional[float] = None,
    n_frequencies: int = 2000,
    seed: int = 0,
    method: str = "auto",
    k: int = 3,
    per_cluster: int = 20,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    precision: str = "auto",
) -> SPECResult:
    r"""Compare two embeddings of the same n samples: spectrum of $\Lambda = (K_a - K_b)/n$, SPEC-diff, clusters.

    Args:
        emb_a: (n, d_a) first embedding.
        emb_b: (n, d_b) second embedding of the same samples (row i = sample i in both).
        kernel: ``"gaussian"`` or ``"cosine"``.
        sigma_a: Gaussian bandwidth of ``emb_a`` (required for ``"gaussian"``; see
            [`match_bandwidth`][lightning_spectral.functional.match_bandwidth]).
        sigma_b: Gaussian bandwidth of ``emb_b``.
        n_frequencies: random frequencies ``r`` per embedding on the Gaussian covariance route (features 2r each).
        seed: frequency seed (shared by both maps, so ``spec(x, x)`` is exactly 0 on every route).
        method: ``"exact"`` (n x n matrix, exact kernels), ``"covariance"`` (Proposition 1: random features for
            the Gaussian kernel, exact for cosine) or ``"auto"``: ``"exact"`` when n <= D_a + D_b (the n x n
            problem is then the smaller one), else ``"covariance"``.
        k: clusters returned per side.
        per_cluster: members returned per cluster.
        chunk_size: rows per chunk on the covariance route.
        precision: the covariance route's spectrum: ``"float64"``, ``"float32"`` (``eigvalsh`` of ``Theta`` rounded
            to float32: faster at D = 4096, eigenvalues within ~1e-7 max ``|eigenvalue|``, those below 1e-5 max
            ``|eigenvalue|`` count as zero; cluster eigenvectors to ~1e-5) or ``"auto"``: float32 from
            D = [`FLOAT32_MIN_SIZE`][lightning_spectral.algebra.FLOAT32_MIN_SIZE].

    Returns:
        [`SPECResult`][lightning_spectral.functional.SPECResult].

    Raises:
        ValueError: different n, NaN, zero-norm rows under the cosine kernel, ``sigma <= 0`` or missing, unknown
            ``kernel`` / ``method`` / ``precision``.

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.randn(60, 4, generator=g, dtype=torch.float64)
        >>> rotation = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))[0]
        >>> float(spec(x, x @ rotation, "cosine").spec_diff) < 1e-10   # the cosine kernel ignores rotations
        True
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}.")
    check_positive_int(k, "k")
    check_positive_int(per_cluster, "per_cluster")
    check_positive_int(n_frequencies, "n_frequencies")
    a, b = check_pair(emb_a, emb_b, "spec")
    if a.shape[0] == 0:
        raise ValueError("spec: no samples.")
    sigmas = tuple(
        None if s is None else check_positive(s, name) for s, name in ((sigma_a, "sigma_a"), (sigma_b, "sigma_b"))
    )
    feature_map = PairedFeatureMap(kernel, (a.shape[1], b.shape[1]), sigmas, n_frequencies, seed).to(a.device)
    if method == "auto":
        method = "exact" if a.shape[0] <= feature_map.out_features else "covariance"
    eigen_dtype(precision, 0)  # validates `precision` on every route
    if method == "exact":
        values, vectors = _exact_route(a, b, kernel, *sigmas)
        columns, rtol = torch.arange(values.shape[0], device=values.device), 1e-10
    else:
        values, columns, vectors, rtol = _covariance_route(a, b, feature_map, chunk_size, k, precision)
    kept = nonzero(values, rtol)
    values = torch.where(kept, values, 0.0)  # round-off eigenvalues are neither side's clusters
    return SPECResult(
        values[kept],
        values.abs().max(),
        _clusters(values, vectors, columns, k, per_cluster, positive=True),
        _clusters(values, vectors, columns, k, per_cluster, positive=False),
    )


def spec_diff_exact(
    emb_a: Tensor, emb_b: Tensor, kernel: str = "gaussian", sigma_a: Optional[float] = None,
    sigma_b: Optional[float] = None,
) -> Tensor:
    """SPEC-diff from the exact n x n matrix: the oracle for small n (float64 scalar).

    Raises:
        ValueError: an unknown ``kernel``, no samples, ``sigma_a`` / ``sigma_b`` missing or not > 0 for the
            Gaussian kernel, or the input problems of [`spec`][lightning_spectral.functional.spec].
    """
    if kernel not in KERNELS:
        raise ValueError(f"`kernel` must be one of {KERNELS}, got {kernel!r}.")
    a, b = check_pair(emb_a, emb_b, "spec_diff_exact")
    if a.shape[0] == 0:
        raise ValueError("spec_diff_exact: no samples; pass at least one row in `emb_a` and `emb_b`.")
    sigmas = [None if s is None else check_positive(s, name) for s, name in ((sigma_a, "sigma_a"), (sigma_b, "sigma_b"))]
    values, _ = _exact_route(a, b, kernel, *sigmas)
    return values.abs().max()


def kernel_top_eigenvalue(x: Tensor, sigma: float) -> float:
    """Largest eigenvalue of the normalised Gaussian kernel matrix ``K / n`` of samples ``x`` (N, d) at bandwidth
    ``sigma`` (exact; increasing in ``sigma``; for the top eigenvalue of a given symmetric matrix see
    ``lightning_spectral.algebra.top_eigenvalue``)."""
    return float(torch.linalg.eigvalsh(gaussian_kernel(x, sigma=sigma) / x.shape[0])[-1])


def match_bandwidth(
    reference: Tensor,
    embedding: Tensor,
    sigma_reference: float,
    max_samples: int = 1000,
    seed: int = 0,
    rtol: float = 1e-3,
) -> float:
    """The Gaussian bandwidth for ``embedding`` whose top eigenvalue of ``K/n`` equals the reference's.

    The paper sets the bandwidths so that the top eigenvalues of the two normalised kernel matrices differ by
    less than 0.01 (section 6). This helper fixes the reference's ``sigma_reference`` and bisects on
    ``log sigma`` (the top eigenvalue is increasing in ``sigma``, from 1/n to 1) with exact kernels on a common
    random subsample of at most ``max_samples`` rows, until the bracket is within ``rtol`` relative.

    Raises:
        ValueError: different n, NaN, ``sigma_reference <= 0``.

    Examples:
        >>> import torch
        >>> x = torch.randn(200, 3, generator=torch.Generator().manual_seed(0))
        >>> round(match_bandwidth(x, 10 * x, sigma_reference=1.0), 2)   # scaling x by 10 scales sigma by 10
        10.0
    """
    sigma_reference = check_positive(sigma_reference, "sigma_reference")
    max_samples = check_positive_int(max_samples, "max_samples")
    seed = check_seed(seed)
    rtol = check_positive(rtol, "rtol")
    if rtol < 1e-12:  # 1 + rtol must differ from 1 in float64, or the bisection never ends
        raise ValueError(f"`rtol` must be at least 1e-12 (float64 cannot bisect finer), got {rtol:g}.")
    reference, embedding = check_pair(reference, embedding, "match_bandwidth")
    if reference.shape[0] < 2:
        raise ValueError("match_bandwidth needs at least 2 samples.")
    if reference.shape[0] > max_samples:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        keep = torch.randperm(reference.shape[0], generator=generator)[:max_samples].to(reference.device)
        reference, embedding = reference[keep], embedding[keep]
    target = kernel_top_eigenvalue(reference, sigma_reference)
    start = low = high = median_bandwidth(embedding, max_samples=max_samples, seed=seed)
    while kernel_top_eigenvalue(embedding, low) > target and low > 1e-12 * start:
        low /= 2
    while kernel_top_eigenvalue(embedding, high) < target and high < 1e12 * start and math.isfinite(2 * high):
        high *= 2
    while high / low > 1 + rtol:
        middle = low * math.sqrt(high / low)
        if kernel_top_eigenvalue(embedding, middle) < target:
            low = middle
        else:
            high = middle
    return low * math.sqrt(high / low)


def spec_align_loss(
    student: Tensor,
    reference: Tensor,
    kernel: str = "cosine",
    sigma_student: Optional[float] = None,
    sigma_reference: Optional[float] = None,
    n_frequencies: int = 512,
    seed: int = 0,
    feature_map: Optional[PairedFeatureMap] = None,
) -> Tensor:
    r"""Differentiable SPEC-diff of a batch, $\max(\lambda_+, -\lambda_-)$, for SPEC-align (Proposition 2).

    The top positive and top negative eigenvectors are found on a detached copy and held fixed; each
    eigenvalue is then a differentiable function of the student features:

    - $n \le D_s + D_r$: $\lambda = u^\top \Lambda u$ with $\Lambda = (K_s - K_r)/n$ and the unit eigenvector
      $u$ of the n x n matrix;
    - otherwise $\lambda = \|A v\|^2 / (n\, v^\top D v)$ with $v$ the eigenvector of $\Gamma = D C$ (the
      biorthonormal normalisation $u_{left}^\top u_{right} = 1$ that Proposition 2 of Jalali et al. (ICML 2025) leaves
      implicit; with unit-norm eigenvectors the ratio divides by it).

    Both give the gradient of the eigenvalue (first-order perturbation with the eigenvector fixed). Taking
    the larger of ``lambda_+`` and ``-lambda_-`` from a dense eigendecomposition (no power iteration) keeps
    the loss continuous and the gradient well defined (a valid subgradient) when the two are nearly tied.
    Runs with autocast disabled, in float32 (float64 for float64 input), so it behaves the same under
    ``bf16-mixed``.

    Args:
        student: (n, d_s) trainable embedding (gradients flow into it).
        reference: (n, d_r) reference embedding of the same samples (detached).
        kernel: ``"cosine"`` (the reference code's choice) or ``"gaussian"``.
        sigma_student: Gaussian bandwidth of the student.
        sigma_reference: Gaussian bandwidth of the reference.
        n_frequencies: random frequencies per embedding for the Gaussian kernel.
        seed: frequency seed.
        feature_map: a prebuilt [`PairedFeatureMap`][lightning_spectral.kernels.PairedFeatureMap] (saves redrawing
            frequencies).

    Returns:
        Scalar tensor in the student's dtype (float32 for half-precision input).

    Examples:
        >>> import torch
        >>> student = torch.randn(32, 8, requires_grad=True)
        >>> loss = spec_align_loss(student, torch.randn(32, 5))
        >>> loss.backward()
        >>> bool(loss > 0) and student.grad.shape == (32, 8)
        True
    """
    reference = reference.detach()
    student_, reference = check_pair(student, reference, "spec_align_loss")
    n = student_.shape[0]
    if n < 1:
        raise ValueError("spec_align_loss: the batch is empty; pass at least one sample.")
    if feature_map is None:
        feature_map = PairedFeatureMap(
            kernel, (student_.shape[1], reference.shape[1]), (sigma_student, sigma_reference), n_frequencies, seed
        ).to(student.device)
    dtype = student_.dtype  # float64 stays float64; half precision was upcast to float32 by check_pair
    with torch.autocast(student.device.type, enabled=False):
        phi = feature_map(student_, reference.to(dtype))
        width = feature_map.widths[0]
        if n <= phi.shape[1]:
            phi_s, phi_r = phi[:, :width], phi[:, width:]
            difference = (phi_s @ phi_s.T - phi_r @ phi_r.T) / n
            detached = difference.detach()
            _, vectors = torch.linalg.eigh((detached + detached.T) / 2)  # ascending, in the compute dtype
            top, bottom = vectors[:, -1], vectors[:, 0]
            positive, negative = top @ difference @ top, bottom @ difference @ bottom
        else:
            values, vectors = differential_eigh((phi.T @ phi).detach() / n, width)
            vectors = vectors.to(dtype)
            positive = _eigenvalue_at(phi, vectors[:, 0], values[0], n, width)
            negative = _eigenvalue_at(phi, vectors[:, -1], values[-1], n, width)
        loss = torch.maximum(positive, -negative)
    return loss.to(student_.dtype)


def _eigenvalue_at(phi: Tensor, v: Tensor, value: Tensor, n: int, width: int) -> Tensor:
    """``||A v||^2 / (n v^T D v)`` with ``v`` fixed; 0 (with a graph) for a null eigenvalue."""
    d_norm = v[:width].square().sum() - v[width:].square().sum()
    if abs(float(value)) <= 1e-12:
        return (phi @ v).sum() * 0.0
    return (phi @ v).square().sum() / (n * d_norm)
