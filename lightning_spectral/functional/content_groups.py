"""Content groups: each sample's group from a hash of its own values, the same under any order, batching or sharding.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_spectral._checks import check_dense

_HASH_PRIME = 2_147_483_647  # 2^31 - 1: every product below stays under 2^62, so int64 never overflows


_hash_weights: dict[tuple[int, str], Tensor] = {}


def content_groups(x: Tensor, groups: int) -> Tensor:
    """(N,) int64: the group in ``[0, groups)`` each row of ``x`` (N, d) joins, from its values alone.

    ``h(x) = sum_j w_j b_j(x) mod p`` over the 32-bit words ``b_j`` of the row's float32 rounding (``p = 2^31 - 1``,
    fixed random weights ``w``), and the row joins group ``h mod groups``. Integer sums modulo ``p`` do not depend
    on the order of anything, so any order, batching or sharding of the same rows gives the same groups. The words
    are those of the float32 rounding whatever the dtype, so a float32 and a float64 copy of the same samples
    split alike (float64 values beyond float32's range fold their two words into one). Equal rows join the same
    group; ``-0.0`` counts as ``0.0``.

    Examples:
        >>> import torch
        >>> x = torch.randn(1000, 4)
        >>> index = content_groups(x, 4)
        >>> torch.equal(index.flip(0), content_groups(x.flip(0), 4))    # order-free
        True
        >>> torch.equal(index, content_groups(x.double(), 4))           # dtype-free
        True
        >>> [200 < int((index == j).sum()) < 300 for j in range(4)]
        [True, True, True, True]
    """
    check_dense(x, "x", "content_groups")
    return content_hash(x) % groups


def content_hash(x: Tensor) -> Tensor:
    """(N,) int64 in ``[0, 2^31 - 1)``: the hash ``h(x)`` of each row of ``x`` (N, d) behind
    [`content_groups`][lightning_spectral.functional.content_groups], from its values alone (any order, batching,
    sharding or float dtype of the same rows gives the same hashes)."""
    check_dense(x, "x", "content_hash")
    rounded = x.float().contiguous() + 0.0  # + 0.0 turns -0.0 into 0.0
    words = rounded.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    beyond = torch.isinf(rounded) & torch.isfinite(x)
    if bool(beyond.any()):  # float64 values outside float32's range: fold both words of the float64 value
        bits = (x.double().contiguous() + 0.0).view(torch.int64)
        words = torch.where(beyond, (bits ^ (bits >> 32)) & 0xFFFFFFFF, words)
    key = (words.shape[1], str(words.device))
    if key not in _hash_weights:
        generator = torch.Generator().manual_seed(20_240_917)
        _hash_weights[key] = torch.randint(1, _HASH_PRIME, (words.shape[1],), generator=generator).to(words.device)
    return ((words % _HASH_PRIME) * _hash_weights[key] % _HASH_PRIME).sum(1) % _HASH_PRIME


def reference_halves(x: Tensor) -> Tensor:
    """(N,) bool: ``content_groups(x, 2) == 0``, the two-group split (kept for callers of the previous rule)."""
    check_dense(x, "x", "reference_halves")
    return content_groups(x, 2) == 0
