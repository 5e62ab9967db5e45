"""SpecAlignSolver: the SPEC-align penalty of one training batch by a warm-started block Krylov method.

The value and gradient of [`spec_align_loss`][lightning_spectral.functional.spec_align_loss] (SPEC, Jalali et al., ICML
2025,
Proposition 2) without a full eigendecomposition per step; [`SPECAlign`][lightning_spectral.callbacks.SPECAlign] holds
one and keeps its warm start in the callback's state.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from lightning_spectral._checks import (
    all_finite,
    check_int_range,
    check_memory,
    check_nonnegative_int,
    check_positive,
    check_positive_int,
    check_seed,
)
from lightning_spectral.algebra.eigen import one_thread
from lightning_spectral.functional.spec import check_pair, spec_align_loss
from lightning_spectral.kernels.by_name import KERNELS
from lightning_spectral.kernels.cosine_map import CosineMap, unit_rows
from lightning_spectral.kernels.paired_feature_map import PairedFeatureMap

#: Bounds of `SpecAlignSolver`'s Krylov settings (the defaults are block 2, 4 steps, 4 cycles).
MAX_KRYLOV_BLOCK, MAX_KRYLOV_STEPS = 64, 100


class SpecAlignSolver:
    r"""SPEC-align penalty with a warm-started block Krylov solver:
    [`spec_align_loss`][lightning_spectral.functional.spec_align_loss] without a full eigh.

    Same value and gradient as [`spec_align_loss`][lightning_spectral.functional.spec_align_loss] (the exact route, to
    ``tol``), at ``O(n D b)`` per
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
       winner inside a tight cluster, identical embeddings):
       [`spec_align_loss`][lightning_spectral.functional.spec_align_loss] answers. It also answers
       batches of at most [`krylov_size`][lightning_spectral.callbacks.SpecAlignSolver.krylov_size] rows (an epoch's
       last, smaller batch; one row gives 0), where its
       ``n x n`` eigendecomposition is the cheaper route.

    The forward pass runs on one thread, the Krylov iteration detached in float64 (small LAPACK calls and
    small products would wake the OpenMP pool, which costs more than they do); the student's feature map runs
    once, its graph kept for the penalty. The warm start changes only
    how fast the solver converges, not what it returns (to ``tol``); ``state_dict`` keeps it so a resumed
    run repeats the same iterates.

    Args:
        kernel: ``"cosine"`` or ``"gaussian"``, as [`spec_align_loss`][lightning_spectral.functional.spec_align_loss].
        sigma_student: Gaussian bandwidth of the student.
        sigma_reference: Gaussian bandwidth of the reference.
        n_frequencies: random frequencies per embedding for the Gaussian kernel.
        seed: frequency seed, also the seed of the first call's start block.
        feature_map: a prebuilt [`PairedFeatureMap`][lightning_spectral.kernels.PairedFeatureMap] (else built on the
            first
            call from the embeddings' widths).
        tol: accepted bound on the winning eigenvector's error (the gradient's relative error is ~2 tol).
        block: Krylov block width ``b`` (Ritz vectors carried to the next cycle and call: both ends' ``b / 2``);
            2 converged in one cycle of 4 steps on the benchmark's random batches, as 4 did, at half the cost.
        steps: Krylov steps (powers of ``Lambda``) per Rayleigh-Ritz cycle.
        max_cycles: cycles before falling back to the exact route.

    Raises:
        ValueError: as [`spec_align_loss`][lightning_spectral.functional.spec_align_loss]; an unknown ``kernel``;
            ``tol`` not > 0; ``block`` outside
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
        self.max_cycles = check_int_range(max_cycles, "max_cycles", 1, MAX_KRYLOV_STEPS, "cycles before exact")
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
        3-10x faster than the tall-skinny ``A^T U`` and ``A (.)`` on one thread (measured,
        docs/benchmarks/training-loop-cost.md, "SPEC-align penalty").
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
        """Restore [`state_dict`][lightning_spectral.callbacks.SpecAlignSolver.state_dict]'s output.

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
    the map took 3-4x longer (docs/benchmarks/training-loop-cost.md, "SPEC-align penalty"). ``x`` only ties the
    result to the caller's graph.
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
    (docs/benchmarks/training-loop-cost.md, "SPEC-align penalty"). Autograd would run them with the process's thread
    count.
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
