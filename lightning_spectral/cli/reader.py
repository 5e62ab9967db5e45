"""Row shards for the command line; embedding files are read by
[`EmbeddingFile`][lightning_spectral.io.EmbeddingFile]."""

from __future__ import annotations

from lightning_spectral.io.embedding_file import EmbeddingFile

__all__ = ["EmbeddingFile", "shard_rows"]


def shard_rows(n: int, rank: int, world_size: int) -> range:
    """The contiguous rows ``rank`` of ``world_size`` streams (each rank reads its part of the file in order).

    Every metric gives the same result for any sharding of the same rows, so only reading speed decides.

    Examples:
        >>> [shard_rows(11, rank, 3) for rank in range(3)]
        [range(0, 3), range(3, 7), range(7, 11)]
    """
    return range(n * rank // world_size, n * (rank + 1) // world_size)
