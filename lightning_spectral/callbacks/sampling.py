"""Seeded, sharded sampling of a generative model: the same samples for any number of ranks, every epoch.

The ``n_samples`` are cut into chunks of ``chunk_size``; chunk ``c`` is drawn with a CPU generator seeded
``seed + c`` by rank ``c % world_size``, so the union of the samples is the same for any world size and the draws
are the same every epoch (epoch-to-epoch changes are the model's).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Callable, Optional

import torch
from torch import Tensor

SampleFn = Callable[[Any, int, torch.Generator], Tensor]


def sample_chunks(n_samples: int, chunk_size: int, rank: int = 0, world_size: int = 1) -> list[tuple[int, int, int]]:
    """The chunks ``(index c, first sample, size)`` rank ``rank`` draws: ``c = rank, rank + W, ...``.

    Examples:
        >>> sample_chunks(10, 4, rank=0, world_size=2), sample_chunks(10, 4, rank=1, world_size=2)
        ([(0, 0, 4), (2, 8, 2)], [(1, 4, 4)])
    """
    count = math.ceil(n_samples / chunk_size)
    return [(c, c * chunk_size, min(chunk_size, n_samples - c * chunk_size)) for c in range(rank, count, world_size)]


def draw_samples(
    sampler: SampleFn,
    pl_module: Any,
    n_samples: int,
    chunk_size: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    prompts_for: Optional[Callable[[Tensor], Any]] = None,
) -> Iterator[tuple[Tensor, Tensor]]:
    """``(global sample ids (n,), images (n, ...))`` of this rank's chunks, chunk ``c`` drawn from a CPU generator
    seeded ``seed + c``: the union over ranks is the same for any world size. With ``prompts_for`` (a conditional
    generator) the sampler is asked for ``prompts_for(ids)`` instead of a count ``n``.

    Raises:
        ValueError: the sampler does not return one tensor of ``n`` images for ``n`` asked.
    """
    for chunk, start, size in sample_chunks(n_samples, chunk_size, rank, world_size):
        ids = torch.arange(start, start + size)
        asked = size if prompts_for is None else prompts_for(ids)
        images = sampler(pl_module, asked, torch.Generator().manual_seed(seed + chunk))
        if not isinstance(images, Tensor) or images.ndim < 2 or images.shape[0] != size:
            shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(
                f"GeneratedSamples: `sample` must return a tensor of {size} images (N, C, H, W) when asked for "
                f"{size}, got {shape}."
            )
        yield ids, images
