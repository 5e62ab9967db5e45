"""Seeded orders of samples: the per-class split and the per-epoch shuffle, independent of the global RNG."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class EpochShuffle(Sampler[int]):
    """A random permutation of ``range(n)`` drawn from ``seed + epoch``: Lightning calls `set_epoch` at
    every training epoch, so a run resumed from a checkpoint sees the same batches as an uninterrupted one.

    Examples:
        >>> sampler = EpochShuffle(5, seed=0)
        >>> first = list(sampler); sampler.set_epoch(1); second = list(sampler); sampler.set_epoch(0)
        >>> sorted(first) == list(range(5)), first == list(sampler), first != second
        (True, True, True)
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=generator).tolist())

    def __len__(self) -> int:
        return self.n


def stratified_split(labels: Sequence[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Positions of a seeded split: ``round(fraction * n_c)`` of every class ``c`` go to the second part.

    Deterministic for a given ``seed`` (a CPU ``torch.Generator``), independent of the global RNG.

    Examples:
        >>> first, second = stratified_split([0, 0, 0, 0, 1, 1, 1, 1], 0.25, seed=0)
        >>> len(first), len(second), sorted(second) == sorted(stratified_split([0] * 4 + [1] * 4, 0.25, 0)[1])
        (6, 2, True)
    """
    generator = torch.Generator().manual_seed(seed)
    labels_t = torch.as_tensor(list(labels), dtype=torch.long)
    first: list[int] = []
    second: list[int] = []
    for label in torch.unique(labels_t).tolist():
        members = torch.nonzero(labels_t == label).flatten()
        members = members[torch.randperm(members.numel(), generator=generator)]
        n_second = int(round(fraction * members.numel()))
        second.extend(members[:n_second].tolist())
        first.extend(members[n_second:].tolist())
    return sorted(first), sorted(second)
