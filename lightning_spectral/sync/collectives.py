"""The collectives: the all-reduce of sum states, the one gather of rows, the largest value over ranks.

Every state in this library is a sum (feature sums, covariance sums, counts), so merging ranks is a
single all-reduce per state: ``O((2r)^2)`` bytes moved whatever the world size, where torchmetrics'
default all_gather would move ``world_size x (2r)^2`` and then sum. Rows (scores, candidates, images) cross
ranks through [`all_gather_rows`][lightning_spectral.sync.all_gather_rows], through a Lightning strategy when the
caller has one.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import Tensor


def distributed_available() -> bool:
    """True inside an initialised ``torch.distributed`` process group with more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def collective_device(group: Optional[Any] = None) -> torch.device:
    """The device collectives of ``group`` run on: CUDA for NCCL (it moves only CUDA tensors), else the CPU."""
    if dist.get_backend(group) == dist.Backend.NCCL:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(tensor: Tensor, group: Optional[Any] = None) -> list[Tensor]:
    """Sum ``tensor`` over all ranks with one all-reduce; a torchmetrics ``dist_sync_fn`` for sum states.

    Returns a one-element list, so torchmetrics' reduction of the synced value (stack, then
    ``dim_zero_sum``) leaves the all-reduced total unchanged. Outside a process group it returns
    ``[tensor]`` untouched.

    Examples:
        >>> import torch
        >>> all_reduce_sum(torch.ones(2))  # not distributed here: the tensor comes back
        [tensor([1., 1.])]
    """
    if not distributed_available():
        return [tensor]
    reduced = tensor.clone().contiguous()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM, group=group)
    return [reduced]


def all_gather_rows(
    x: Tensor, group: Optional[Any] = None, sync_grads: bool = False, *, strategy: Optional[Any] = None
) -> Tensor:
    """Rows (N_rank, ...) of every rank concatenated in rank order; ranks may hold different N (even 0).

    The one gather of this library (scores, top-sample candidates, votes, gallery images, SPECAlign's batch). Ranks
    first exchange their row counts, pad to the largest and trim after the all-gather. The collective runs
    through ``strategy`` (a Lightning strategy, ``trainer.strategy``: what every callback passes inside a Trainer),
    or, without one, through ``torch.distributed`` on ``group`` (code outside a Trainer: the command line under
    torchrun, a metric's own methods). With ``sync_grads`` the result is differentiable: each rank's slice sends
    its gradient back to it. In one process (a strategy of world size 1, or no process group) it returns ``x``.

    Examples:
        >>> import torch
        >>> all_gather_rows(torch.ones(2, 3)).shape  # not distributed here
        torch.Size([2, 3])
    """
    if strategy is not None and getattr(strategy, "world_size", 1) == 1:
        return x
    if strategy is not None and not distributed_available():  # a strategy without torch.distributed (e.g. XLA)
        device = strategy.root_device

        def gather(tensor: Tensor, grads: bool = False) -> Any:  # (world, *tensor.shape)
            return strategy.all_gather(tensor, group=group, sync_grads=grads)

    else:
        # Lightning's DDP / FSDP `strategy.all_gather` calls torch.distributed.nn.functional.all_gather, deprecated
        # (a FutureWarning at every call): the same collective on the strategy's process group, by torch.distributed.
        if strategy is None and not distributed_available():
            return x
        device = strategy.root_device if strategy is not None else collective_device(group)  # NCCL: device tensors

        def gather(tensor: Tensor, grads: bool = False) -> Any:  # world tensors shaped like ``tensor``
            if grads:
                return _DifferentiableGather.apply(tensor, group)
            parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, tensor, group=group)
            return parts

    counts = [int(count) for count in gather(torch.tensor([x.shape[0]], device=device))]
    largest = max(counts)
    local = x.to(device)
    if local.shape[0] < largest:
        local = torch.cat([local, local.new_zeros(largest - local.shape[0], *local.shape[1:])])
    parts = gather(local.contiguous(), sync_grads)
    return torch.cat([part[:count] for part, count in zip(parts, counts, strict=True)]).to(x.device)


def all_reduce_max(value: float, group: Optional[Any] = None) -> float:
    """The largest ``value`` over all ranks (the value itself outside a process group)."""
    if not distributed_available():
        return value
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=collective_device(group))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return float(tensor)


class _DifferentiableGather(torch.autograd.Function):
    """All-gather whose backward sends each rank the sum over ranks of the gradients of its slice: every rank's
    loss reads every slice, so ``d(sum_q loss_q) / d x_r = sum_q d loss_q / d slice_r`` (one all-reduce)."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Optional[Any]) -> tuple[Tensor, ...]:  # type: ignore[override]
        ctx.group = group
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, tensor.contiguous(), group=group)
        return tuple(parts)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[Optional[Tensor], None]:  # type: ignore[override]
        stacked = torch.stack([grad.contiguous() for grad in grads])
        dist.all_reduce(stacked, group=ctx.group)
        return stacked[dist.get_rank(ctx.group)], None
