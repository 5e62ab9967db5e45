"""Symmetric eigen routes: dense ``eigh``, Lanczos for the extreme eigenvalues, float32 for large matrices, and
the eigenvalues of a PSD matrix with its round-off floor.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import all_finite, check_positive, check_positive_int
from lightning_spectral.algebra.gram import symmetrize

#: ``precision="auto"`` computes spectra of matrices at least this wide in float32 (``eigvalsh`` faster, Vendi /
#: RKE / FINC scores within 0.002 % of float64's at 2r = 4096-8192: docs/benchmarks/training-loop-cost.md,
#: "Eigendecomposition at 2r = 8192").
FLOAT32_MIN_SIZE = 4096


PRECISIONS = ("float64", "float32", "auto")


def symmetric_eigh(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (descending) and eigenvectors (columns) of a symmetric matrix, in float64.

    The input is re-symmetrised as ``(A + A^T) / 2`` first to remove round-off asymmetry.
    """
    values, vectors = torch.linalg.eigh(symmetrize(matrix.double()))
    return values.flip(0), vectors.flip(1)


#: [`top_eigh`][lightning_spectral.algebra.top_eigh] finds ``k`` eigen-pairs by Lanczos (instead of a dense ``eigh``)
#: from this many rows, when ``k`` is at most a sixteenth of them: at 2r = 4096 a dense ``eigh`` with vectors costs
#: several times the ``eigvalsh`` a score needs, a few Lanczos products much less (docs/benchmarks/epoch-cost.md).
PARTIAL_MIN_SIZE = 1024


def top_eigh(
    matrix: Tensor, k: int, partial: Optional[bool] = None, rtol: float = 1e-10, symmetric: bool = False
) -> tuple[Tensor, Tensor]:
    """The ``k`` largest eigenvalues (descending, float64) of a symmetric matrix and their eigenvectors (n, k).

    Dense (`symmetric_eigh`, truncated) for small matrices or many pairs; by Lanczos
    ([`extreme_eigenpairs`][lightning_spectral.algebra.extreme_eigenpairs], every pair held to the residual
    ``||A v - lambda v|| <= rtol ||A||``, the dense ``eigh`` if it does not converge) with ``partial`` or, by default,
    from `PARTIAL_MIN_SIZE` rows and ``k <= n / 16``. Signs are
    arbitrary (callers orient them).

    Args:
        matrix: (n, n) symmetric (used as ``(A + A^T) / 2``, in float64).
        k: pairs wanted (at most n are returned).
        partial: ``True`` Lanczos, ``False`` dense, ``None`` by size.
        rtol: the Lanczos residual tolerance, relative to ``||A||_2``.
        symmetric: the caller guarantees ``A = A^T`` to round-off: Lanczos skips the ``(A + A^T) / 2`` pass
            (`extreme_eigenvalues`).

    Examples:
        >>> import torch
        >>> values, vectors = top_eigh(torch.diag(torch.arange(10.0)), 2, partial=True)
        >>> values.round(decimals=10).tolist(), vectors.abs().argmax(0).tolist()
        ([9.0, 8.0], [9, 8])
    """
    size = matrix.shape[0]
    k = min(check_positive_int(k, "k"), size)
    if partial is None:
        partial = size >= PARTIAL_MIN_SIZE and 16 * k <= size
    if not partial:
        values, vectors = symmetric_eigh(matrix)
        return values[:k], vectors[:, :k]
    values, vectors = extreme_eigenpairs(matrix.double(), 0, k, rtol=rtol, symmetric=symmetric)
    return values.flip(0), vectors.flip(1)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the enclosed torch calls on one intra-op thread, then restore the previous count.

    For small LAPACK calls (an eigendecomposition of a few dozen rows): waking the OpenMP pool costs more
    than the call itself, ~10x more under ``OMP_WAIT_POLICY=PASSIVE`` (docs/benchmarks/training-loop-cost.md,
    "Is `OMP_WAIT_POLICY=PASSIVE` still needed?").
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def default_lanczos_steps(size: int) -> int:
    """Krylov steps [`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues] tries before it gives up:
    ``max(64, size // 16)``, at most ``size``.

    A step costs one matrix-vector product; at ``size`` 4096 a dense ``eigvalsh`` costs a few hundred of them
    (measured, docs/benchmarks/training-loop-cost.md), so a failed attempt wastes less than the fallback it precedes.
    """
    return min(size, max(64, size // 16))


def extreme_eigenvalues(
    matrix: Tensor,
    rtol: float = 1e-10,
    max_steps: Optional[int] = None,
    seed: int = 0,
    which: str = "both",
    symmetric: bool = False,
    near: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    r"""Smallest and largest eigenvalue of a symmetric (indefinite) matrix by Lanczos, without a full ``eigvalsh``.

    Lanczos builds an orthonormal basis ``Q_k`` of the Krylov space ``span(q, A q, ..., A^{k-1} q)`` from a fixed
    pseudo-random start ``q`` (a CPU generator seeded with ``seed``: identical input gives identical output),
    reorthogonalised in full against every earlier vector, twice (classical Gram-Schmidt), so ``Q_k`` stays
    orthonormal to round-off. The extreme eigenvalues ``theta`` of ``T_k = Q_k^T A Q_k`` (tridiagonal, k x k)
    approach those of ``A`` from inside. A Ritz pair ``(theta, y = Q_k s)`` is accepted when its residual
    ``||A y - theta y||`` (``beta_k |s_k|`` during the run, recomputed explicitly at the end) is at most
    ``rtol * ||A||_2``: an eigenvalue of ``A`` then lies within that distance of ``theta``, and since ``theta``
    is the extreme Ritz value it is the extreme eigenvalue unless the start vector is (nearly) orthogonal to
    its eigenvector, which a pseudo-random start makes vanishingly unlikely. Not converged after
    ``max_steps`` steps (a top eigenvalue in a cluster that is tight compared with the whole spectrum): the
    dense ``eigvalsh`` answers instead.

    Cost: ``k`` matrix-vector products and ``O(n k^2)`` for the reorthogonalisation; the difference of two
    RFF covariances of one distribution (the FINC noise floor at ``rho = 1``, 2r = 4096) needs k ~ 25 where
    ``eigvalsh`` costs several hundred products.

    Args:
        matrix: (n, n) symmetric; used as ``(A + A^T) / 2``, in float64.
        rtol: accepted residual, relative to ``||A||_2`` (estimated by the largest ``|theta|``).
        max_steps: Krylov steps before falling back; default
            [`default_lanczos_steps`][lightning_spectral.algebra.default_lanczos_steps].
        seed: seed of the start vector.
        which: ``"both"``, ``"largest"`` or ``"smallest"``: the ends that must converge (the other is
            returned as found, a bound from inside).
        symmetric: the caller guarantees ``A = A^T`` to round-off (an accumulated covariance, or a weighted sum
            of them): the ``(A + A^T) / 2`` pass, which costs as much as ~30 products at 4096 x 4096, is skipped.
        near: (n,) a vector close to the wanted extreme eigenvector (the top eigenvector of a nearby matrix): the
            start becomes ``near / ||near|| + q / ||q||``, which converges in fewer steps than ``q`` alone; its random
            part keeps it, as ``q``, from being (nearly) orthogonal to an eigenvector but by chance. The answer is
            the same to ``rtol``.

    Returns:
        ``(smallest, largest)``, float64 scalars.

    Raises:
        ValueError: a non-square matrix, NaN / Inf entries, ``rtol`` not > 0, unknown ``which``.

    Examples:
        >>> import torch
        >>> q, _ = torch.linalg.qr(torch.randn(300, 300, dtype=torch.float64))
        >>> a = q @ torch.diag(torch.linspace(-2.0, 1.0, 300, dtype=torch.float64)) @ q.T
        >>> low, high = extreme_eigenvalues(a)
        >>> round(float(low), 10), round(float(high), 10)
        (-2.0, 1.0)
    """
    if which not in ("both", "largest", "smallest"):
        raise ValueError(f"`which` must be 'both', 'largest' or 'smallest', got {which!r}.")
    matrix, steps = _lanczos_input(matrix, rtol, max_steps, "extreme_eigenvalues", symmetric)
    ends = {"both": (0, -1), "largest": (-1,), "smallest": (0,)}[which]
    found = _lanczos(matrix, steps, rtol, seed, ends, vectors=False, near=near)
    if found is None:
        values = torch.linalg.eigvalsh(matrix)
        return values[0], values[-1]
    return found[0][0], found[0][-1]


def top_eigenvalue(
    matrix: Tensor, rtol: float = 1e-10, max_steps: Optional[int] = None, seed: int = 0, symmetric: bool = False
) -> Tensor:
    """Largest eigenvalue of a symmetric (indefinite) matrix:
    [`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues] with ``which="largest"``.

    Examples:
        >>> import torch
        >>> round(float(top_eigenvalue(torch.diag(torch.tensor([-3.0, 0.5, 2.0])))), 12)
        2.0
    """
    return extreme_eigenvalues(matrix, rtol, max_steps, seed, which="largest", symmetric=symmetric)[1]


def extreme_eigenpairs(
    matrix: Tensor,
    n_smallest: int,
    n_largest: int,
    rtol: float = 1e-10,
    max_steps: Optional[int] = None,
    seed: int = 0,
    symmetric: bool = False,
) -> tuple[Tensor, Tensor]:
    """The ``n_smallest`` lowest and ``n_largest`` highest eigen-pairs of a symmetric matrix, by Lanczos.

    As [`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues], with every wanted Ritz pair held to the
    residual test; the vectors are the
    unit Ritz vectors ``Q_k s``. Not converged: the dense ``eigh`` answers. A float32 matrix is iterated in
    float32 (half the memory traffic per product; residuals down to ~1e-6 ``||A||``, so ``rtol`` >= 1e-5).

    Args:
        matrix: (n, n) symmetric; used as ``(A + A^T) / 2``, in float64 (float32 kept).
        n_smallest: pairs wanted at the bottom of the spectrum (may be 0).
        n_largest: pairs wanted at the top (may be 0).
        rtol: accepted residual, relative to ``||A||_2``.
        max_steps: Krylov steps before falling back; default
            [`default_lanczos_steps`][lightning_spectral.algebra.default_lanczos_steps].
        seed: seed of the start vector.
        symmetric: as in [`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues].

    Returns:
        ``(values (m,), vectors (n, m))``, float64, ascending as ``torch.linalg.eigh``: the ``n_smallest``
        lowest, then the ``n_largest`` highest (``m = n_smallest + n_largest``, at most ``n``).

    Raises:
        ValueError: as [`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues]; negative counts.

    Examples:
        >>> import torch
        >>> values, vectors = extreme_eigenpairs(torch.diag(torch.arange(10.0)), 1, 2)
        >>> values.round(decimals=10).tolist(), vectors.abs().argmax(0).tolist()
        ([0.0, 8.0, 9.0], [0, 8, 9])
    """
    if min(n_smallest, n_largest) < 0:
        raise ValueError(f"`n_smallest` and `n_largest` must be >= 0, got {n_smallest} and {n_largest}.")
    matrix, steps = _lanczos_input(matrix, rtol, max_steps, "extreme_eigenpairs", symmetric)
    size = matrix.shape[0]
    n_smallest, n_largest = min(n_smallest, size), min(n_largest, size - min(n_smallest, size))
    ends = tuple(range(n_smallest)) + tuple(range(-n_largest, 0))
    if not ends:
        return matrix.new_zeros(0), matrix.new_zeros(size, 0)
    found = _lanczos(matrix, max(steps, min(size, 2 * len(ends) + 5)), rtol, seed, ends, vectors=True)
    if found is None:
        values, vectors = torch.linalg.eigh(matrix)
        keep = torch.tensor([end % size for end in ends], dtype=torch.long, device=matrix.device)
        return values[keep], vectors[:, keep]
    theta, vectors = found
    keep = torch.tensor([end % theta.shape[0] for end in ends], dtype=torch.long, device=matrix.device)
    return theta[keep], vectors


def eigenvalues_above(
    matrix: Tensor, threshold: float, rtol: float = 1e-5, max_steps: Optional[int] = None, seed: int = 0
) -> Tensor:
    r"""Every eigenvalue of a symmetric matrix above ``threshold`` (and at least the largest), descending, float64:
    by Lanczos with an inertia certificate instead of a full ``eigvalsh``, which answers when the certificate fails.

    Lanczos (as [`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues]) runs until every Ritz pair
    ``(theta_i, y_i)`` with ``theta_i > threshold``, and the largest, has residual ``<= rtol ||A||_2``. Ritz values
    come from inside, so an eigenvalue may still be missing (not yet emerged, or a second copy of a repeated one,
    which a single start vector cannot find). The certificate: with ``Y`` the found vectors (n, m) and
    ``g = max(||A||, |threshold|)``,
    ``A' = A - Y diag(theta - threshold + g) Y^T`` moves the found eigenvalues to ``threshold - g`` and leaves the
    others (to the residuals); a Cholesky factorisation of ``threshold I - A'`` exists iff every eigenvalue of ``A'``
    is below ``threshold`` (Sylvester's law of inertia), i.e. iff no eigenvalue above ``threshold`` was missed. One
    Cholesky is ``n^3 / 3`` flops of BLAS-3, a fraction of the tridiagonal reduction of ``eigvalsh``
    (docs/benchmarks/training-loop-cost.md, "FINC's noise floor without a full eigendecomposition"). Not converged
    within ``max_steps``, more than ``n / 16`` pairs above ``threshold``, or no factorisation: the dense ``eigvalsh``
    (all n values).

    Args:
        matrix: (n, n) symmetric to round-off (used as given; float32 is iterated and factorised in float32).
        threshold: the level; eigenvalues at or below it are not looked for.
        rtol: accepted residual, relative to ``||A||_2`` (>= 1e-5 in float32).
        max_steps: Krylov steps before the dense fallback; default
            [`default_lanczos_steps`][lightning_spectral.algebra.default_lanczos_steps].
        seed: seed of the start vector.

    Returns:
        (m,) float64, descending: the eigenvalues above ``threshold`` and at least the largest one (or all n).

    Examples:
        >>> import torch
        >>> q, _ = torch.linalg.qr(torch.randn(400, 400, dtype=torch.float64))
        >>> a = q @ torch.diag(torch.cat([torch.tensor([0.9, 0.5]), torch.linspace(-1.0, 0.1, 398)]).double()) @ q.T
        >>> [round(v, 6) for v in eigenvalues_above(a, 0.2).tolist()]
        [0.9, 0.5]
    """
    matrix, steps = _lanczos_input(matrix, rtol, max_steps, "eigenvalues_above", symmetric=True)
    size = matrix.shape[0]
    found = _lanczos_above(matrix, steps, rtol, seed, float(threshold), max(1, size // 16))
    if found is not None and _no_eigenvalue_missed(matrix, float(threshold), *found):
        return found[0].double().flip(0)
    return torch.linalg.eigvalsh(matrix).double().flip(0)


def _lanczos_above(
    matrix: Tensor, steps: int, rtol: float, seed: int, threshold: float, most: int
) -> Optional[tuple[Tensor, Tensor, float]]:
    """Lanczos until the Ritz pairs above ``threshold`` (and the top one) converge: ``(values ascending, vectors,
    ||A|| estimate)``, or None (budget spent, or more than ``most`` pairs)."""

    def check(done: Tensor, alphas: list, betas: list) -> Any:
        alpha, off = torch.stack(alphas), torch.stack(betas)
        tridiagonal = torch.diag(alpha) + torch.diag(off[:-1], 1) + torch.diag(off[:-1], -1)
        with one_thread():
            theta, s = torch.linalg.eigh(tridiagonal.double())
        chosen = [i for i in range(theta.shape[0]) if float(theta[i]) > threshold] or [theta.shape[0] - 1]
        if len(chosen) > most:
            return _GIVE_UP
        norm = float(theta.abs().max())
        tolerance = rtol * norm
        if float((off[-1].double() * s[-1, chosen]).abs().max()) > tolerance:
            return None
        ritz = done @ s[:, chosen].to(matrix.dtype)
        residual = (matrix @ ritz - ritz * theta[chosen].to(matrix.dtype)).norm(dim=0).max()
        return (theta[chosen], ritz, norm) if float(residual) <= tolerance else None

    return _lanczos_run(matrix, steps, seed, 5, check)


def _no_eigenvalue_missed(matrix: Tensor, threshold: float, values: Tensor, vectors: Tensor, norm: float) -> bool:
    """True iff ``threshold I - A + Y diag(theta - threshold + ||A||) Y^T`` has a Cholesky factor (`eigenvalues_above`:
    no eigenvalue of ``A`` above ``threshold`` besides the found ones)."""
    shift = (values - threshold + max(norm, abs(threshold), 1e-30)).to(matrix.dtype)  # found ones: below the level
    deflated = torch.addmm(-matrix, vectors * shift, vectors.T)
    deflated.diagonal().add_(threshold)
    return int(torch.linalg.cholesky_ex(deflated)[1]) == 0


def _lanczos_input(
    matrix: Tensor, rtol: float, max_steps: Optional[int], owner: str, symmetric: bool = False
) -> tuple[Tensor, int]:
    if not rtol > 0:
        raise ValueError(f"`rtol` must be > 0, got {rtol}.")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"{owner}: expected a square matrix, got shape {tuple(matrix.shape)}.")
    if not all_finite(matrix):
        raise ValueError(f"{owner}: the matrix has NaN or Inf entries.")
    matrix = matrix if matrix.dtype == torch.float32 else matrix.double()
    size = matrix.shape[0]
    steps = default_lanczos_steps(size) if max_steps is None else check_positive_int(max_steps, "max_steps")
    return (matrix if symmetric else symmetrize(matrix)), min(steps, size)


def _lanczos(
    matrix: Tensor, steps: int, rtol: float, seed: int, ends: tuple[int, ...], vectors: bool,
    near: Optional[Tensor] = None,
) -> Optional[tuple[Tensor, Optional[Tensor]]]:
    """Lanczos: all Ritz values (ascending) and the unit Ritz vectors at ``ends``, or None if not converged."""

    def check(done: Tensor, alphas: list, betas: list) -> Any:
        return _ritz_check(matrix, done, alphas, betas, rtol, ends, vectors)

    return _lanczos_run(matrix, steps, seed, max(5, len(ends) + 1), check, near)


#: What a `_lanczos_run` check returns to end the run without a result.
_GIVE_UP = object()


def _lanczos_run(
    matrix: Tensor, steps: int, seed: int, first_check: int, check: Callable[..., Any], near: Optional[Tensor] = None
) -> Any:
    """Lanczos with full reorthogonalisation (twice) from a seeded random start (plus ``near``, unit, if given).
    From step ``first_check`` on, every ``max(5, step // 8)`` steps and at the last one, ``check(basis, alphas,
    betas)`` reads the Krylov basis so far and the tridiagonal's entries: its result ends the run (``None``: go on;
    `_GIVE_UP`: end with None). None when the steps run out first."""
    size = matrix.shape[0]
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    start = torch.randn(size, generator=generator, dtype=torch.float64).to(matrix.device)
    if near is not None:
        if near.shape != (size,) or not bool(torch.isfinite(near).all()) or float(near.norm()) == 0.0:
            raise ValueError(f"`near` must be a finite, non-zero ({size},) vector, got shape {tuple(near.shape)}.")
        start = start / start.norm() + near.to(start) / near.to(start).norm()
    basis = matrix.new_zeros(size, steps + 1)
    basis[:, 0] = start / start.norm()
    alphas, betas = [], []
    next_check = first_check
    for step in range(1, steps + 1):
        done = basis[:, :step]
        w = matrix @ basis[:, step - 1]
        alphas.append(basis[:, step - 1] @ w)
        for _ in range(2):  # full reorthogonalisation, twice
            w -= done @ (done.T @ w)
        beta = w.norm()
        betas.append(beta)
        exhausted = step == steps or float(beta) <= 1e-300
        if step >= next_check or exhausted:
            next_check = step + max(5, step // 8)
            result = check(done, alphas, betas)
            if result is _GIVE_UP:
                return None
            if result is not None or exhausted:
                return result
        basis[:, step] = w / beta
    return None


def _ritz_check(
    matrix: Tensor, basis: Tensor, alphas: list, betas: list, rtol: float, ends: tuple[int, ...], vectors: bool
) -> Optional[tuple[Tensor, Optional[Tensor]]]:
    """Ritz values of ``T_k`` (and vectors) if the wanted ones have residual <= ``rtol * ||A||`` (checked twice)."""
    alpha, beta = torch.stack(alphas), torch.stack(betas)
    tridiagonal = torch.diag(alpha) + torch.diag(beta[:-1], 1) + torch.diag(beta[:-1], -1)
    with one_thread():
        theta, s = torch.linalg.eigh(tridiagonal)
    if len(ends) > theta.shape[0]:
        return None
    tolerance = rtol * float(theta.abs().max())
    chosen = list(ends)
    if float((beta[-1] * s[-1, chosen]).abs().max()) > tolerance:
        return None
    ritz = basis @ s[:, chosen]  # the recurrence's residual estimate, checked against the true one
    if float((matrix @ ritz - ritz * theta[chosen]).norm(dim=0).max()) > tolerance:
        return None
    return theta, (ritz if vectors else None)


def eigen_dtype(precision: str, size: int) -> torch.dtype:
    """The dtype of a symmetric eigenvalue problem: ``"float64"``, ``"float32"``, or ``"auto"`` (float32 from
    [`FLOAT32_MIN_SIZE`][lightning_spectral.algebra.FLOAT32_MIN_SIZE] rows).

    Raises:
        ValueError: an unknown ``precision``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}.")
    if precision == "auto":
        return torch.float32 if size >= FLOAT32_MIN_SIZE else torch.float64
    return torch.float32 if precision == "float32" else torch.float64


def psd_eigenvalues(
    matrix: Tensor, rtol: float = 1e-5, precision: str = "float64", drop_round_off: bool = True
) -> Tensor:
    """Eigenvalues (descending, float64) of a positive semi-definite matrix, round-off negatives set to 0.

    Tolerance: eigenvalues in ``[-rtol * lambda_max, 0)`` are round-off and are set to 0 (a covariance
    summed from float32 chunk products at 2r = 4096 shows negatives down to ~1e-6 * lambda_max; float64
    ones ~1e-15). A more negative eigenvalue means the matrix is not PSD (a bug or corrupted state) and
    raises rather than being hidden.

    Round-off positives: the round-off of a symmetric matrix moves its zero eigenvalues up and down alike (the
    largest positive one measured within 0.87x to 1.17x of the most negative one, float32 and float64 RFF
    covariances), so with ``drop_round_off`` eigenvalues at most twice the magnitude of the most negative one are
    set to 0 too (the largest is always kept). Renyi entropies of order < 1 weigh them up (``p^alpha``: Vendi-0.5
    of 10,000 identical float32 vectors was 1.5 with them, and Vendi-1 1.0006); a matrix without negative
    eigenvalues loses nothing.

    Precision: ``"float32"`` rounds the matrix to float32 and runs ``eigvalsh`` there: faster at 2r = 4096-8192
    (its tridiagonalisation is memory-bound), eigenvalues within ~1e-7 of ``lambda_max``, the
    Vendi-1 / RKE / FINC scores of RFF covariances within 0.002 % of float64's (measured on a mixture and on
    scikit-learn's digits: docs/benchmarks/training-loop-cost.md, "Eigendecomposition at 2r = 8192"); its round-off
    negatives were ~1e-7 * lambda_max at 2r = 4096, so ``rtol`` is at least 1e-4 there. ``"auto"``: float32 from
    [`FLOAT32_MIN_SIZE`][lightning_spectral.algebra.FLOAT32_MIN_SIZE] rows,
    float64 below.

    Raises:
        ValueError: non-finite entries, an eigenvalue below ``-rtol * lambda_max``, an unknown ``precision``.

    Examples:
        >>> import torch
        >>> c = torch.diag(torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64))
        >>> bool(torch.allclose(psd_eigenvalues(c, precision="float32"), psd_eigenvalues(c), rtol=0, atol=1e-7))
        True
        >>> psd_eigenvalues(torch.diag(torch.tensor([1.0, 2e-9, 0.5, -1e-9], dtype=torch.float64))).tolist()
        [1.0, 0.5, 0.0, 0.0]
    """
    if not all_finite(matrix):
        raise ValueError("psd_eigenvalues: the matrix has NaN or Inf entries.")
    dtype = eigen_dtype(precision, matrix.shape[0])
    values = torch.linalg.eigvalsh(symmetrize(matrix.double()).to(dtype)).double().flip(0)
    return _psd_cleaned(values, rtol, dtype, drop_round_off, "psd_eigenvalues")


#: Extra columns of the range finder of `psd_eigh` with ``rank`` beyond the rank bound (the round-off tail of a
#: covariance summed from float32 products is not exactly zero: a few more columns keep it out of the top pairs).
RANGE_OVERSAMPLE = 16

#: `psd_eigh` with ``rank`` takes the range finder only when its ``k = rank + RANGE_OVERSAMPLE`` columns are at most
#: this share of the D rows (measured at D = 4,096, float32: 7.0x / 6.2x / 2.4x / 1.2x faster than the dense ``eigh``
#: at rank 500 / 1,000 / 2,000 / 3,000; docs/benchmarks/epoch-cost.md, "One validation epoch against torchmetrics'
#: KID + FID").
RANGE_MAX_SHARE = 0.75


def use_range_finder(size: int, rank: Optional[int]) -> bool:
    """Whether `psd_eigh` with ``rank`` takes the range finder for a (size, size) matrix: ``rank`` given, size at
    least `PARTIAL_MIN_SIZE`, and ``rank + RANGE_OVERSAMPLE <= RANGE_MAX_SHARE * size``."""
    return rank is not None and size >= PARTIAL_MIN_SIZE and rank + RANGE_OVERSAMPLE <= RANGE_MAX_SHARE * size


def psd_eigh(
    matrix: Tensor,
    rtol: float = 1e-5,
    precision: str = "float64",
    drop_round_off: bool = True,
    rank: Optional[int] = None,
) -> tuple[Tensor, Tensor]:
    r"""[`psd_eigenvalues`][lightning_spectral.algebra.psd_eigenvalues] with the eigenvectors: one ``eigh`` at
    ``precision``, its eigenvalues cleaned by the same rules.

    With ``rank`` (a bound on the rank of ``A``: a second moment of n samples has rank <= n) and
    `use_range_finder`, a range finder instead of the dense ``eigh`` (Halko, Martinsson and Tropp, "Finding
    structure with randomness", SIAM Review 53(2), 2011: Algorithms 4.1 and 5.3, no power steps): ``Y = A Omega``
    for a seeded Gaussian ``Omega`` (D, k), ``k = rank + p`` (`RANGE_OVERSAMPLE`), ``V = qr(Y)``,
    ``B = V^T A V = W diag(theta) W^T``, pairs ``(theta, V W)``. With
    ``rank(A) <= rank < k``, ``range(Y) = range(A)`` in exact arithmetic, so these are the non-zero eigen-pairs
    exactly, up to round-off: the eigenvalues past ``rank`` are set to 0, the other ``D - k`` are 0. Cost
    ``O(D^2 k)`` in GEMMs and a QR, against ``O(D^3)`` for the dense ``eigh``.

    Returns:
        ``(values (D,) descending float64, vectors (D, D))``, column ``i`` the eigenvector of ``values[i]``, in the
        eigendecomposition's dtype (float32 under ``"float32"``, or ``"auto"`` from 4,096 rows); with the range
        finder only the leading ``k`` columns (D, k), the eigenvalues past them being 0.

    Examples:
        >>> import torch
        >>> values, vectors = psd_eigh(torch.diag(torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)))
        >>> values.tolist(), vectors.abs().argmax(0).tolist()
        ([0.5, 0.3, 0.2], [1, 2, 0])
    """
    if not all_finite(matrix):
        raise ValueError("psd_eigh: the matrix has NaN or Inf entries.")
    size = matrix.shape[0]
    dtype = eigen_dtype(precision, size)
    if rank is not None:
        rank = max(check_positive_int(rank, "rank"), 1) if rank else 1
    symmetric = symmetrize(matrix.double()).to(dtype)
    if not use_range_finder(size, rank):
        values, vectors = torch.linalg.eigh(symmetric)
        return _psd_cleaned(values.double().flip(0), rtol, dtype, drop_round_off, "psd_eigh"), vectors.flip(1)
    columns = rank + RANGE_OVERSAMPLE  # type: ignore[operator]
    generator = torch.Generator(device="cpu").manual_seed(0)
    omega = torch.randn(size, columns, generator=generator, dtype=torch.float64).to(symmetric)
    basis = torch.linalg.qr(symmetric @ omega)[0]  # (D, k), orthonormal
    theta, rotation = torch.linalg.eigh(symmetrize(basis.T @ (symmetric @ basis)))
    values = torch.cat([theta.double().flip(0), theta.new_zeros(size - columns, dtype=torch.float64)])
    values = _psd_cleaned(values, rtol, dtype, drop_round_off, "psd_eigh")
    values[rank:] = 0.0  # rank(A) <= rank: the rest is round-off
    return values, (basis @ rotation).flip(1)


def _psd_cleaned(values: Tensor, rtol: float, dtype: torch.dtype, drop_round_off: bool, owner: str) -> Tensor:
    """Descending eigenvalues of a PSD matrix (float64) with round-off negatives (and, with ``drop_round_off``,
    round-off positives) set to 0 (`psd_eigenvalues`' rules); raises below ``-rtol * lambda_max``."""
    if dtype == torch.float32:
        rtol = max(rtol, 1e-4)
    scale = max(float(values[0]), 0.0) if values.numel() else 0.0
    lowest = float(values[-1]) if values.numel() else 0.0
    if lowest < -rtol * scale - 1e-300:
        raise ValueError(
            f"{owner}: eigenvalue {lowest:.3e} is below the round-off tolerance "
            f"-{rtol:g} * lambda_max = {-rtol * scale:.3e}: the matrix is not positive semi-definite."
        )
    values = values.clamp_min(0.0)
    if drop_round_off and lowest < 0:
        values[1:] = torch.where(values[1:] > -2 * lowest, values[1:], 0.0)
    return values


def jittered_cholesky(matrix: Tensor, jitter: Optional[float] = None, tries: int = 6) -> tuple[Tensor, float]:
    r"""Lower Cholesky factor of a PSD matrix after the smallest diagonal shift that works:
    $M + \epsilon I = L L^\top$.

    ``eps = jitter * trace(M) * 100^t`` for the first ``t = 0, 1, ...`` at which the factorisation succeeds. A PSD
    matrix whose numerical rank is below its size (fewer samples than features, duplicated features) cannot be
    factorised without a shift. The default ``jitter = D * 2.2e-16`` (float64's unit round-off times the size,
    the scale of Cholesky's backward error) covers round-off. The shift moves every eigenvalue of ``M`` up by
    exactly ``eps``.

    Args:
        matrix: (D, D) symmetric PSD; used as ``(M + M^T) / 2``, in float64.
        jitter: the first shift, relative to ``trace(M)``; default ``D * 2.2e-16``.
        tries: shifts tried (each 100 times the last) before giving up.

    Returns:
        ``(L (D, D) lower triangular, eps)``.

    Raises:
        ValueError: NaN / Inf entries, a trace <= 0, or no shift up to ``jitter * trace * 100^(tries-1)`` works
            (the matrix is not PSD).

    Examples:
        >>> import torch
        >>> m = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # rank 1
        >>> factor, eps = jittered_cholesky(m)
        >>> bool(torch.allclose(factor @ factor.T, m + eps * torch.eye(2), atol=0)), eps > 0
        (True, True)
    """
    if not all_finite(matrix):
        raise ValueError("jittered_cholesky: the matrix has NaN or Inf entries.")
    matrix = matrix.double()
    matrix = symmetrize(matrix)
    trace = float(matrix.trace())
    if not trace > 0:
        raise ValueError(f"jittered_cholesky: trace {trace:g} <= 0; expected a non-zero PSD matrix (no samples?).")
    identity = torch.eye(matrix.shape[0], dtype=matrix.dtype, device=matrix.device)
    jitter = matrix.shape[0] * 2.2e-16 if jitter is None else check_positive(jitter, "jitter")
    for attempt in range(tries):
        eps = jitter * trace * 100.0**attempt
        factor, info = torch.linalg.cholesky_ex(matrix + eps * identity)
        if int(info) == 0:
            return factor, eps
    raise ValueError(
        f"jittered_cholesky: no factorisation with a diagonal shift up to {eps:.1e}: the matrix is not positive "
        "semi-definite (a bug or a corrupted covariance)."
    )
