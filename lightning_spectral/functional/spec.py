"""SPEC: spectral comparison of two embeddings of the same samples, and the differentiable SPEC-align loss.

Jalali, Dibaei Nia and Farnia, "Towards an Explainable Comparison and Alignment of Feature Embeddings"
(ICML 2025). With normalised kernel matrices ``K_a``, ``K_b`` of one set of n samples under two embeddings,

    Lambda = (K_a - K_b) / n                       (n x n, symmetric, trace 0, eigenvalues in [-1, 1])

A large positive eigenvalue marks a group of samples embedding ``a`` clusters and ``b`` does not (its
eigenvector's large entries are the members); a negative one the reverse. SPEC-diff = max |eigenvalue|
(a symmetric pseudo-distance). Two routes give the same non-zero spectrum:

- ``"exact"``: the n x n matrix with exact kernels (the oracle; cheaper when n is small);
- ``"covariance"``: the joint covariance ``C = (1/n) A^T A`` of ``A = [Phi_a, Phi_b]`` (random Fourier
  features for the Gaussian kernel, the normalised embeddings for the cosine kernel) and the non-symmetric
  ``Gamma = D C``, ``D = diag(I, -I)`` (Proposition 1), solved through its symmetric similar form
  ``L^T D L`` (one Cholesky ``C = L L^T``, :func:`~lightning_spectral.linalg.differential_theta`): one ``eigvalsh``
  for the spectrum and Lanczos for the few eigenvectors the clusters need. Cost O(n D^2 + D^3), linear in n.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from lightning_spectral._checks import (
    all_finite,
    check_features,
    check_int_range,
    check_memory,
    check_nonnegative_int,
    check_positive,
    check_positive_int,
    check_seed,
)
from lightning_spectral.features import (
    KERNELS,
    CosineMap,
    PairedFeatureMap,
    gaussian_kernel,
    median_bandwidth,
    unit_rows,
)
from lightning_spectral.linalg import (
    DEFAULT_CHUNK_SIZE,
    covariance,
    differential_eigh,
    differential_theta,
    eigen_dtype,
    extreme_eigenpairs,
    one_thread,
    symmetric_eigh,
)

METHODS = ("auto", "exact", "covariance")
#: Bounds of :class:`SpecAlignSolver`'s Krylov settings (the defaults are block 2, 4 steps, 4 cycles).
MAX_KRYLOV_BLOCK, MAX_KRYLOV_STEPS = 64, 100


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
    """Output of :func:`spec`.

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


def _exact_route(a: Tensor, b: Tensor, kernel: str, sigma_a, sigma_b) -> tuple[Tensor, Tensor]:
    n = a.shape[0]
    values, vectors = symmetric_eigh((kernel_matrix(a, kernel, sigma_a) - kernel_matrix(b, kernel, sigma_b)) / n)
    return values, vectors


def _covariance_route(
    a: Tensor, b: Tensor, feature_map: PairedFeatureMap, chunk_size: int, k: int, precision: str
) -> tuple[Tensor, Tensor, Tensor, float]:
    """Eigenvalues (descending), the column of each in the sample vectors (-1: not mapped), the unit sample
    vectors (n, m) of the ``k`` top clusters per side, and the relative round-off level of the eigenvalues.

    One Cholesky, one ``eigvalsh`` of ``Theta = L^T S L`` (:func:`~lightning_spectral.linalg.differential_theta`)
    and Lanczos for the few eigenvectors the clusters need; ``Theta``, its spectrum and the Lanczos products in
    float32 where ``precision`` says so (the Cholesky factor and the map back stay float64).
    """
    joint = torch.cat([a, b.to(a.dtype)], 1)
    cov = covariance(joint, feature_map.joint, chunk_size)
    dtype = eigen_dtype(precision, cov.shape[0])
    theta, factor, signs, floor = differential_theta(cov, feature_map.out_features[0], dtype)
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
            feature_map.joint(joint[i : i + chunk_size]).double() @ gamma_vectors
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
    r"""Compare two embeddings of the same n samples: spectrum of ``Lambda = (K_a - K_b)/n``, SPEC-diff, clusters.

    Args:
        emb_a: (n, d_a) first embedding.
        emb_b: (n, d_b) second embedding of the same samples (row i = sample i in both).
        kernel: ``"gaussian"`` or ``"cosine"``.
        sigma_a: Gaussian bandwidth of ``emb_a`` (required for ``"gaussian"``; see :func:`match_bandwidth`).
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
            D = :data:`~lightning_spectral.linalg.FLOAT32_MIN_SIZE`.

    Returns:
        :class:`SPECResult`.

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
        method = "exact" if a.shape[0] <= sum(feature_map.out_features) else "covariance"
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
            Gaussian kernel, or the input problems of :func:`spec`.
    """
    if kernel not in KERNELS:
        raise ValueError(f"`kernel` must be one of {KERNELS}, got {kernel!r}.")
    a, b = check_pair(emb_a, emb_b, "spec_diff_exact")
    if a.shape[0] == 0:
        raise ValueError("spec_diff_exact: no samples; pass at least one row in `emb_a` and `emb_b`.")
    sigmas = [None if s is None else check_positive(s, name) for s, name in ((sigma_a, "sigma_a"), (sigma_b, "sigma_b"))]
    values, _ = _exact_route(a, b, kernel, *sigmas)
    return values.abs().max()


def top_eigenvalue(x: Tensor, sigma: float) -> float:
    """Largest eigenvalue of the normalised Gaussian kernel matrix ``K / n`` (exact; increasing in ``sigma``)."""
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
    target = top_eigenvalue(reference, sigma_reference)
    start = low = high = median_bandwidth(embedding, max_samples=max_samples, seed=seed)
    while top_eigenvalue(embedding, low) > target and low > 1e-12 * start:
        low /= 2
    while top_eigenvalue(embedding, high) < target and high < 1e12 * start and math.isfinite(2 * high):
        high *= 2
    while high / low > 1 + rtol:
        middle = low * math.sqrt(high / low)
        if top_eigenvalue(embedding, middle) < target:
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
    r"""Differentiable SPEC-diff of a batch, ``max(lambda_+, -lambda_-)``, for SPEC-align (Proposition 2).

    The top positive and top negative eigenvectors are found on a detached copy and held fixed; each
    eigenvalue is then a differentiable function of the student features:

    - ``n <= D_s + D_r``: ``lambda = u^T Lambda u`` with ``Lambda = (K_s - K_r)/n`` and the unit eigenvector
      ``u`` of the n x n matrix;
    - otherwise ``lambda = ||A v||^2 / (n v^T D v)`` with ``v`` the eigenvector of ``Gamma = D C`` (the
      biorthonormal normalisation Proposition 2's formula omits, see the research digest section 5.13).

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
        feature_map: a prebuilt :class:`~lightning_spectral.features.PairedFeatureMap` (saves redrawing frequencies).

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
        width = feature_map.out_features[0]
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


class SpecAlignSolver:
    r"""SPEC-align penalty with a warm-started block Krylov solver: :func:`spec_align_loss` without a full eigh.

    Same value and gradient as :func:`spec_align_loss` (the exact route, to ``tol``), at ``O(n D b)`` per
    Krylov block instead of an ``n x n`` eigendecomposition per step. With ``A = [Phi_s, Phi_r]`` (n, D) and
    ``S = diag(I, -I)``, ``Lambda = A S A^T / n`` is applied as ``A (S (A^T U)) / n``, never formed:

    1. start block ``U = A V``: ``V`` (D, b) are the previous call's Ritz vectors, held in FEATURE space
       because consecutive batches hold different samples (``u = A v`` maps an eigenvector of
       ``Gamma = S C`` to one of ``Lambda``, ``v = S A^T u`` maps back; SPEC Proposition 1); the first
       call starts from a seeded random block;
    2. Rayleigh-Ritz on the block Krylov space of ``[U, Lambda U, ..., Lambda^steps U]`` (the powers only
       normalised, one Householder QR for the basis: few dispatches, which is what such small products cost),
       restarted from both ends' ``b / 2`` leading Ritz vectors (one each by default), until the winning end
       (``lambda_+`` or ``-lambda_-``, whichever is larger) has a Ritz pair ``(theta, y)`` with
       ``||Lambda y - theta y|| / gap <= tol`` (a bound on the eigenvector's error; ``gap`` to the next Ritz
       value) and beats the other end by more than both residuals;
    3. ``loss = +-(||Phi_s^T u||^2 - ||Phi_r^T u||^2) / n = +-u^T Lambda u`` with the unit ``u`` held fixed:
       the eigenvalue and its gradient (Proposition 2), differentiable through the student's features (for the
       cosine kernel the gradient is written in closed form, one product and two passes over the batch);
    4. not converged after ``max_cycles`` cycles (a near tie between ``lambda_+`` and ``-lambda_-``, a
       winner inside a tight cluster, identical embeddings): :func:`spec_align_loss` answers. It also answers
       batches of at most :attr:`krylov_size` rows (an epoch's last, smaller batch; one row gives 0), where its
       ``n x n`` eigendecomposition is the cheaper route.

    The forward pass runs on one thread, the Krylov iteration detached in float64 (small LAPACK calls and
    small products would wake the OpenMP pool, which costs more than they do); the student's feature map runs
    once, its graph kept for the penalty. The warm start changes only
    how fast the solver converges, not what it returns (to ``tol``); ``state_dict`` keeps it so a resumed
    run repeats the same iterates.

    Args:
        kernel: ``"cosine"`` or ``"gaussian"``, as :func:`spec_align_loss`.
        sigma_student: Gaussian bandwidth of the student.
        sigma_reference: Gaussian bandwidth of the reference.
        n_frequencies: random frequencies per embedding for the Gaussian kernel.
        seed: frequency seed, also the seed of the first call's start block.
        feature_map: a prebuilt :class:`~lightning_spectral.features.PairedFeatureMap` (else built on the first
            call from the embeddings' widths).
        tol: accepted bound on the winning eigenvector's error (the gradient's relative error is ~2 tol).
        block: Krylov block width ``b`` (Ritz vectors carried to the next cycle and call: both ends' ``b / 2``);
            2 converged in one cycle of 4 steps on the benchmark's random batches, as 4 did, at half the cost.
        steps: Krylov steps (powers of ``Lambda``) per Rayleigh-Ritz cycle.
        max_cycles: cycles before falling back to the exact route.

    Raises:
        ValueError: as :func:`spec_align_loss`; an unknown ``kernel``; ``tol`` not > 0; ``block`` outside
            [2, 64]; ``steps`` or ``max_cycles`` outside [1, 100]; ``seed`` not an integer; ``n_frequencies`` whose
            frequencies would not fit in memory.

    Examples:
        >>> import torch
        >>> solver = SpecAlignSolver(kernel="cosine")
        >>> student = torch.randn(64, 8, dtype=torch.float64, requires_grad=True)
        >>> reference = torch.randn(64, 5, dtype=torch.float64)
        >>> loss = solver(student, reference)
        >>> loss.backward()
        >>> bool(torch.isclose(loss, spec_align_loss(student, reference), rtol=1e-10))
        True
    """

    def __init__(
        self,
        kernel: str = "cosine",
        sigma_student: Optional[float] = None,
        sigma_reference: Optional[float] = None,
        n_frequencies: int = 512,
        seed: int = 0,
        feature_map: Optional[PairedFeatureMap] = None,
        tol: float = 1e-7,
        block: int = 2,
        steps: int = 4,
        max_cycles: int = 4,
    ) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"SpecAlignSolver: `kernel` must be one of {KERNELS}, got {kernel!r}.")
        self.kernel, self.sigmas = kernel, (sigma_student, sigma_reference)
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        if kernel == "gaussian" and feature_map is None:  # float64 frequencies of width-1 inputs, both sides
            check_memory("SpecAlignSolver", "n_frequencies", n_frequencies, 32 * n_frequencies, "random frequencies")
        self.seed = check_seed(seed)
        self.feature_map = feature_map
        self.tol = check_positive(tol, "tol")
        self.block = check_int_range(block, "block", 2, MAX_KRYLOV_BLOCK, "one Ritz vector per end at least")
        self.steps = check_int_range(steps, "steps", 1, MAX_KRYLOV_STEPS, "Krylov steps per Rayleigh-Ritz cycle")
        self.max_cycles = check_int_range(max_cycles, "max_cycles", 1, MAX_KRYLOV_STEPS, "cycles before the exact route")
        self.warm_start: Optional[Tensor] = None  # (D, block) float64, feature space
        self.last_cycles = 0  # Rayleigh-Ritz cycles the last call used
        self.fallbacks = 0  # calls the Krylov iteration did not settle, answered by the exact route
        self.small_batches = 0  # calls with at most `krylov_size` rows, answered by the exact route

    @property
    def krylov_size(self) -> int:
        """Dimension of one cycle's Krylov space, ``(steps + 1) * block``: batches of at most this many rows take
        the exact route (an ``n x n`` eigendecomposition, cheaper there, and a Krylov space cannot exceed n)."""
        return (self.steps + 1) * self.block

    def __call__(self, student: Tensor, reference: Tensor) -> Tensor:
        """Differentiable SPEC-diff of the batch: (n, d_s) student (with gradient), (n, d_r) reference."""
        reference = reference.detach()
        student_, reference = check_pair(student, reference, "SpecAlignSolver")
        n = student_.shape[0]
        if n < 1:
            raise ValueError("SpecAlignSolver: the batch is empty; pass at least one sample.")
        feature_map = self._feature_map(student_, reference)
        if n <= self.krylov_size:  # a small batch (an epoch's last, say): its n x n eigh is cheaper than Krylov
            self.small_batches += 1
            return spec_align_loss(student, reference, feature_map=feature_map)
        cosine = isinstance(feature_map.map_a, CosineMap)
        with torch.autocast(student.device.type, enabled=False), one_thread():
            if cosine:  # the inputs are checked: unit rows directly, the gradient in closed form below
                phi_s, inverse_norms = unit_rows(student_.detach(), feature_map.map_a.eps)
            else:  # the student's map runs once, its graph kept for the penalty
                leaf = student_.detach().requires_grad_(True)
                with torch.enable_grad():
                    phi_s = feature_map.map_a(leaf)
            with torch.no_grad():
                phi_r = feature_map.map_b(reference.to(student_.dtype)).to(phi_s.dtype)
                found = self._solve(phi_s.detach(), phi_r)
            if found is not None:
                u, sign = found
                u = u.to(phi_s.dtype)
                constant = float((phi_r.T @ u).square().sum())  # the reference's part carries no gradient
                if cosine:
                    return _CosinePenalty.apply(student_, phi_s, inverse_norms, u, sign, constant)
                with torch.enable_grad():
                    penalty = (sign * ((phi_s.T @ u).square().sum() - constant) / n).to(student_.dtype)
                return _OneThreadBackward.apply(student_, (leaf, penalty))
        self.fallbacks += 1
        return spec_align_loss(student, reference, feature_map=feature_map)

    def _feature_map(self, student: Tensor, reference: Tensor) -> PairedFeatureMap:
        widths = (student.shape[1], reference.shape[1])
        if self.feature_map is None or tuple(self.feature_map.in_features) != widths:
            if self.feature_map is not None:  # other embeddings: the warm start means nothing for them
                self.warm_start = None
            self.feature_map = PairedFeatureMap(self.kernel, widths, self.sigmas, self.n_frequencies, self.seed)
        return self.feature_map.to(student.device)

    def _solve(self, phi_s: Tensor, phi_r: Tensor) -> Optional[tuple[Tensor, float]]:
        """Restarted block Krylov on ``Lambda = A S A^T / n``: the winning unit eigenvector and its sign, or None.

        Blocks are held as rows, ``U^T`` (b, n): ``U^T A`` and ``(.) A^T`` are wide products, which BLAS runs
        3-10x faster than the tall-skinny ``A^T U`` and ``A (.)`` on one thread (measured, docs/benchmarks.md).
        """
        n, width = phi_s.shape
        features = width + phi_r.shape[1]
        a = torch.empty(n, features, dtype=torch.float64, device=phi_s.device)  # A in float64, written once
        a[:, :width], a[:, width:] = phi_s, phi_r
        weights = torch.full((1, features), 1.0 / n, dtype=a.dtype, device=a.device)
        weights[:, width:] = -1.0 / n  # S / n

        def apply(rows: Tensor) -> Tensor:
            return ((rows @ a) * weights) @ a.T

        start, result = self._start(a), None
        for cycle in range(1, self.max_cycles + 1):
            self.last_cycles = cycle
            basis, images, theta, vectors = _rayleigh_ritz(start, apply, self.steps)
            result = self._converged(basis, images, theta, vectors)
            if result is not None or basis.shape[0] >= n:
                break
            start = vectors[:, _ends(theta.shape[0], self.block)].T @ basis  # restart from both ends' Ritz vectors
        self._keep(a, weights, vectors[:, _ends(theta.shape[0], self.block)].T @ basis)
        return result

    def _start(self, a: Tensor) -> Tensor:
        n, features = a.shape
        if self.warm_start is not None and self.warm_start.shape[0] == features:
            return self.warm_start.to(a.device).T @ a.T
        generator = torch.Generator(device="cpu").manual_seed(self.seed)
        return torch.randn(n, min(self.block, n), generator=generator, dtype=a.dtype).to(a.device).T

    def _converged(
        self, basis: Tensor, images: Tensor, theta: Tensor, vectors: Tensor
    ) -> Optional[tuple[Tensor, float]]:
        """The winning end's unit Ritz vector and sign if its error bound is within ``tol``, else None."""
        if theta.shape[0] < 3:
            return None
        low, second, second_last, high = theta[[0, 1, -2, -1]].tolist()
        top_wins = high >= -low
        ends = [-1, 0] if top_wins else [0, -1]
        ritz = vectors[:, ends].T @ basis
        r_win, r_lose = (vectors[:, ends].T @ images - theta[ends, None] * ritz).norm(dim=1).tolist()
        gap = high - second_last if top_wins else second - low
        value, other = (high, -low) if top_wins else (-low, high)
        if not (r_win <= self.tol * gap and value - r_win > abs(other) + r_lose):
            return None
        return ritz[0], (1.0 if top_wins else -1.0)

    def _keep(self, a: Tensor, weights: Tensor, ritz: Tensor) -> None:
        """Carry both ends' leading Ritz vectors (rows) to the next call, in feature space: ``v = S A^T u``."""
        v = (ritz @ a) * weights
        self.warm_start = (v / v.norm(dim=1, keepdim=True).clamp_min(1e-300)).T  # (D, b)

    def state_dict(self) -> dict[str, Any]:
        """The warm-start block (feature space) and the counters; a resumed run then repeats the same iterates."""
        warm = None if self.warm_start is None else self.warm_start.detach().cpu().clone()
        return {"warm_start": warm, "fallbacks": self.fallbacks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        Raises:
            ValueError: a ``warm_start`` that is not ``None`` or a finite (D, block) float tensor.
        """
        warm = state.get("warm_start")
        if warm is not None and (
            not isinstance(warm, Tensor) or not warm.is_floating_point() or warm.ndim != 2 or not all_finite(warm)
        ):
            raise ValueError(
                "SpecAlignSolver.load_state_dict: `warm_start` must be None or a finite (D, block) float tensor; the "
                "checkpoint's solver state is damaged. Drop it (`state['solver'] = {}`) to restart the warm start."
            )
        self.warm_start = None if warm is None else warm.double()
        self.fallbacks = check_nonnegative_int(state.get("fallbacks", 0), "fallbacks")



class _CosinePenalty(torch.autograd.Function):
    r"""The penalty ``sign (||Y^T u||^2 - c) / n`` of the cosine map ``Y = x / ||x||`` (rows) with ``u`` held fixed.

    Its gradient in closed form, with ``p = Y^T u``: ``dL/dx_i = (2 sign / n) (u_i / ||x_i||) (p - (y_i . p) y_i)``,
    one matrix-vector product, one pass over (n, d) and one rank-one update, on one thread; autograd through
    the map took 3-4x longer (docs/benchmarks.md, issue 14). ``x`` only ties the result to the caller's graph.
    """

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, rows: Tensor, inverse_norms: Tensor, u: Tensor, sign: float, constant: float
    ) -> Tensor:
        projection = rows.T @ u
        ctx.save_for_backward(rows, inverse_norms, u, projection)
        ctx.sign = sign
        return sign * (projection.square().sum() - constant) / rows.shape[0]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], ...]:
        rows, inverse_norms, u, projection = ctx.saved_tensors
        with one_thread():
            weights = (2.0 * ctx.sign / rows.shape[0]) * grad * u * inverse_norms.squeeze(1)
            grad_x = rows * (-(weights * (rows @ projection)))[:, None]
            grad_x.addr_(weights, projection)
        return grad_x, None, None, None, None, None


class _OneThreadBackward(torch.autograd.Function):
    """``out``, computed with a graph from ``leaf`` (a detached copy of ``x``), grafted onto ``x``'s graph;
    its backward pass runs on one intra-op thread.

    The penalty's backward is a few dozen small elementwise ops on (n, d) tensors; with two or more threads
    each one wakes the OpenMP pool, which under ``OMP_WAIT_POLICY=PASSIVE`` costs more than the op
    (docs/benchmarks.md, issue 14). Autograd would run them with the process's thread count.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, graph: tuple[Tensor, Tensor]) -> Tensor:
        ctx.leaf, ctx.out = graph
        return ctx.out.detach()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        with one_thread():
            (grad_x,) = torch.autograd.grad(ctx.out, ctx.leaf, grad)
        ctx.leaf = ctx.out = None  # the sub-graph is freed once used
        return grad_x, None


def _ends(count: int, block: int) -> list[int]:
    """Indices of the ``block // 2`` lowest and highest of ``count`` ascending Ritz values (all if too few)."""
    half = block // 2
    return list(range(count)) if count <= block else list(range(half)) + list(range(count - half, count))


def _rayleigh_ritz(start: Tensor, apply, steps: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Rayleigh-Ritz on the block Krylov space of ``[U, M U, ..., M^steps U]`` (``apply`` = ``M``, symmetric).

    Blocks are rows: ``start`` is ``U^T`` (b, n) and ``apply`` maps ``X^T`` to ``(M X)^T``. The powers are only
    normalised (no orthogonalisation between steps: few dispatches), then one Householder QR ``K = Q R`` gives
    the basis, and ``M Q = (M K) R^{-1}`` comes from the powers already computed. Columns after the first
    (numerically) dependent one are dropped. Returns ``(Q^T, (M Q)^T, theta, W)``: Ritz values ascending,
    ``W^T Q^T`` the Ritz vectors as rows.
    """
    powers, images = [start], []
    for _ in range(steps):
        image = apply(powers[-1])
        images.append(image)
        powers.append(image / image.norm(dim=1, keepdim=True).clamp_min(1e-300))
    images.append(apply(powers[-1]))
    krylov, mapped = torch.cat(powers), torch.cat(images)  # K^T and (M K)^T, (k, n)
    basis, triangle = torch.linalg.qr(krylov.T)
    pivots = triangle.diagonal().abs()
    bad = pivots <= 1e-10 * float(pivots.max())
    if bool(bad.any()):
        keep = int(bad.int().argmax())
        basis, triangle, mapped = basis[:, :keep], triangle[:keep, :keep], mapped[:keep]
    images_q = torch.linalg.solve_triangular(triangle.T, mapped, upper=False)  # (M Q)^T = R^{-T} (M K)^T
    basis = basis.T.contiguous()
    theta, vectors = torch.linalg.eigh(basis @ images_q.T)
    return basis, images_q, theta, vectors
