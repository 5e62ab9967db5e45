"""Rank-consistency votes: a short fingerprint of a tensor, and the ranks whose fingerprint differs from rank 0's.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral.sync.collectives import all_gather_rows, distributed_available

_FINGERPRINT_SIZE = 7


def fingerprint(tensor: Tensor) -> Tensor:
    """A small float64 summary (7,) of a tensor that differs when its values or shape differ.

    Shape, sum, sum of squares and an index-weighted sum: two frequency draws with another seed, sigma
    or width disagree in every entry.
    """
    flat = tensor.detach().double().flatten()
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64) / max(flat.numel(), 1)
    shape = (list(tensor.shape) + [0] * 4)[:4]
    return torch.cat(
        [
            torch.tensor(shape, dtype=torch.float64, device=flat.device),
            torch.stack([flat.sum(), flat.square().sum(), (flat * weights).sum()]),
        ]
    ).cpu()


def disagreeing_ranks(tensor: Optional[Tensor], group: Optional[Any] = None, rtol: float = 1e-9) -> list[int]:
    """The ranks whose ``tensor`` differs from the first voting rank's (compared by
    [`fingerprint`][lightning_spectral.sync.fingerprint]), that rank
    first: ``[first, bad...]``, or ``[]`` when all agree (and outside a process group). Every rank gets the same list,
    so all take the same branch. A rank passing ``None`` (for instance a lazily built feature map on a rank that saw
    no samples) takes part without a vote."""
    if not distributed_available():
        return []
    local = fingerprint(tensor) if tensor is not None else torch.full((_FINGERPRINT_SIZE,), float("nan"))
    votes = all_gather_rows(local.double()[None], group)
    voters = [(rank, row) for rank, row in enumerate(votes) if not bool(torch.isnan(row).any())]
    if not voters:
        return []
    first, reference = voters[0]
    scale = reference.abs().clamp_min(1.0)
    bad = [rank for rank, other in voters if bool(((other - reference).abs() > rtol * scale).any())]
    return [first, *bad] if bad else []
