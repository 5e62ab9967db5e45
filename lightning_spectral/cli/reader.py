"""Row shards for the command line; embedding files are read by :class:`~lightning_spectral.files.EmbeddingFile`."""

from __future__ import annotations

from lightning_spectral.files import EmbeddingFile

__all__ = ["EmbeddingFile", "shard_rows"]


def shard_rows(n: int, rank: int, world_size: int, align: int = 2) -> range:
    """The contiguous rows ``rank`` of ``world_size`` streams; inner boundaries are multiples of ``align``.

    Even boundaries keep FINC's alternate-row split of the reference identical to the one-process run.

    Example:
        >>> [shard_rows(11, rank, 3) for rank in range(3)]
        [range(0, 2), range(2, 6), range(6, 11)]
    """

    def boundary(part: int) -> int:
        if part >= world_size:
            return n
        cut = n * part // world_size
        return cut - cut % align

    return range(boundary(rank), boundary(rank + 1))
