"""The one sync path: all-reduce of sum states, and a check that every rank uses the same frequencies.

Every state in this library is a sum (feature sums, covariance sums, counts), so merging ranks is a
single all-reduce per state: ``O((2r)^2)`` bytes moved whatever the world size, where torchmetrics'
default all_gather would move ``world_size x (2r)^2`` and then sum.
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


def all_gather_rows(x: Tensor, group: Optional[Any] = None, sync_grads: bool = False) -> Tensor:
    """Rows (N_rank, ...) of every rank concatenated in rank order; ranks may hold different N (even 0).

    The one gather of this library (scores, top-sample candidates, votes, SPECAlign's batch). Ranks first
    exchange their row counts, pad to the largest and trim after the all_gather. With ``sync_grads`` the result
    is differentiable (``torch.distributed.nn.all_gather``): each rank's slice sends its gradient back to it.
    Outside a process group it returns ``x``.

    Examples:
        >>> import torch
        >>> all_gather_rows(torch.ones(2, 3)).shape  # not distributed here
        torch.Size([2, 3])
    """
    if not distributed_available():
        return x
    device = collective_device(group)
    world = dist.get_world_size(group)
    size = torch.tensor([x.shape[0]], device=device)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    counts = [int(s) for s in sizes]
    largest = max(counts)
    local = x.to(device)
    if local.shape[0] < largest:
        local = torch.cat([local, local.new_zeros(largest - local.shape[0], *local.shape[1:])])
    if sync_grads:
        from torch.distributed.nn.functional import all_gather as differentiable_all_gather

        parts = differentiable_all_gather(local.contiguous(), group=group or dist.group.WORLD)
    else:
        parts = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(parts, local.contiguous(), group=group)
    return torch.cat([part[:count] for part, count in zip(parts, counts)]).to(x.device)


def all_reduce_max(value: float, group: Optional[Any] = None) -> float:
    """The largest ``value`` over all ranks (the value itself outside a process group)."""
    if not distributed_available():
        return value
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=collective_device(group))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return float(tensor)
