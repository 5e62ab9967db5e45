"""The cosine kernel's explicit feature map: rows scaled to unit length.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from lightning_spectral._checks import (
    all_finite,
    check_positive,
)
from lightning_spectral.kernels.linear_map import LinearMap


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
    (docs/benchmarks/training-loop-cost.md, "Training-loop cost").
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
