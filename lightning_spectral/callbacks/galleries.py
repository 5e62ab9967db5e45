"""The images behind a gallery's sample ids: where a callback's second pass finds its samples and their pictures.

A metric's ``galleries`` name the top samples of its modes by id; a `GalleryImages` gives the batches of that
second pass (per stream: the measured ``"samples"`` and, for FINC's missing modes, the ``"reference"``) and turns
ids into images:

- `IndexedImages` (``EmbeddingMetrics``): the ids are dataset indices, the images come from a lookup
  (``fn(index)``, a dataset, a datamodule's ``image_of``) that every rank can call;
- `KeptImages` (``GeneratedSamples``): the callback keeps the images it drew with global ids, each rank its own,
  and searches each reference whole (streamed again); the rows a gallery needs are gathered from the ranks that
  hold them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable, NamedTuple, Optional, Union

import lightning as L
import torch
from torch import Tensor

from lightning_spectral.sync.collectives import all_gather_rows

#: Kept rows of a stream: (features (n, d), global ids (n,), images (n, C, H, W), labels (n,) or None).
Row = tuple[Tensor, Tensor, Tensor, Optional[Tensor]]


class ModeImages(NamedTuple):
    """One gallery as images: per row (mode) its label, its images (n, C, H, W) best first, and their classes
    (reference images with a label; ``None`` where there is none)."""

    labels: list[str]
    images: list[Tensor]
    classes: list[Optional[Tensor]]


def as_image(item: Any) -> Tensor:
    """A (C, H, W) float image of a dataset item (its first element if it is a tuple), a (H, W) image given one
    channel."""
    image = item[0] if isinstance(item, (tuple, list)) else item
    image = torch.as_tensor(image).detach().cpu().float()
    return image[None] if image.ndim == 2 else image


def item_class(item: Any) -> Optional[int]:
    """The class of a dataset item ``(image, label, ...)`` when its second element is one integer, else ``None``.

    Examples:
        >>> item_class((torch.zeros(1, 8, 8), torch.tensor(3))), item_class(torch.zeros(8, 8))
        (3, None)
    """
    if not isinstance(item, (tuple, list)) or len(item) < 2:
        return None
    label = item[1]
    if isinstance(label, bool):
        return None
    if isinstance(label, int):
        return label
    if isinstance(label, Tensor) and label.numel() == 1 and not label.is_floating_point() and label.dtype != torch.bool:
        return int(label)
    return None


class GalleryImages:
    """Where a callback's galleries find their samples and images (see the module doc).

    Args:
        modes: modes per gallery.
        per_mode: images per mode.
    """

    def __init__(self, modes: int, per_mode: int) -> None:
        self.modes, self.per_mode = modes, per_mode

    def batches(self, stream: str) -> Optional[Iterable[tuple[Any, Tensor]]]:
        """``(features, ids)`` batches of this rank's share of ``stream`` (``"samples"`` / ``"reference"``)."""
        raise NotImplementedError

    def images(self, trainer: L.Trainer, stream: str, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        """The images (R, C, H, W) of ``ids`` (R,) of ``stream`` and their classes (R,) (``None`` without labels). A
        collective under DDP: every rank calls it with the same ids."""
        raise NotImplementedError


def index_priority(ids: Tensor, seed: int = 0) -> Tensor:
    """A pseudo-random priority in [0, 1) (N,) float64 per dataset index (N,), the same on any rank and in any order:
    a 32-bit integer hash (multiply-xorshift) of ``index + seed``. The samples of the ``k`` smallest priorities are
    a uniform sample of ``k`` of them (bottom-k sampling), whatever order or sharding they come in.

    Examples:
        >>> p = index_priority(torch.arange(100_000))
        >>> bool(abs(float(p.mean()) - 0.5) < 0.01), bool(torch.equal(p[[7, 3]], index_priority(torch.tensor([7, 3]))))
        (True, True)
    """
    mask = 0xFFFFFFFF
    h = (ids.long() + int(seed)) & mask
    h = (h * 0x9E3779B1) & mask  # below 2^32 * 2^32: no int64 overflow
    for _ in range(2):
        h = h ^ (h >> 16)
        h = (h * 0x45D9F3B) & mask
    h = h ^ (h >> 16)
    return h.double() / 2.0**32


class IndexedImages(GalleryImages):
    """Galleries of the samples a callback kept (embeddings and dataset indices), with images looked up by index.

    With ``limit``, a uniform sample of at most ``limit`` of the samples over all ranks is kept: those of the
    smallest `index_priority` (each rank keeps its ``limit`` smallest as they come; `settle` keeps the ``limit``
    smallest of all ranks), the same set for any order, batch size and sharding.

    Args:
        lookup: ``fn(dataset_index) -> image (C, H, W)`` or an indexable dataset (items ``(image, ...)`` allowed).
        modes: modes per gallery.
        per_mode: images per mode.
        paired: batches are ``((embedding, reference embedding), ids)``, for paired metrics (SPEC).
        limit: the most samples kept over all ranks (``None``: every one).
    """

    def __init__(
        self, lookup: Union[Callable[[int], Any], Any], modes: int, per_mode: int, paired: bool = False,
        limit: Optional[int] = None,
    ) -> None:
        super().__init__(modes, per_mode)
        self.lookup, self.paired, self.limit = lookup, paired, limit
        self.kept: list[tuple[Tensor, Optional[Tensor], Tensor]] = []

    def keep(self, features: Tensor, reference: Optional[Tensor], ids: Tensor) -> None:
        """Keep a batch's embeddings (N, d), its reference embeddings (N, d_ref) or ``None``, and dataset indices
        (within ``limit``: those of the smallest priorities, pruned once twice ``limit`` are held)."""
        self.kept.append((features.cpu(), None if reference is None else reference.cpu(), ids.cpu()))
        if self.limit is not None and self.rows > 2 * self.limit:
            self._prune(float(index_priority(self._ids()).kthvalue(self.limit).values))

    def settle(self, trainer: L.Trainer) -> None:
        """Keep the ``limit`` samples of the smallest priorities over all ranks (a collective under DDP)."""
        if self.limit is None:
            return
        ids = self._ids()
        mine = index_priority(ids).sort().values[: self.limit]
        every = all_gather_rows(mine[:, None], strategy=trainer.strategy).flatten()
        if every.numel() >= self.limit:  # else every rank holds all of its samples, fewer than the limit in all
            self._prune(float(every.kthvalue(self.limit).values))

    def _ids(self) -> Tensor:
        return torch.cat([ids for _, _, ids in self.kept]) if self.kept else torch.zeros(0, dtype=torch.long)

    def _prune(self, highest: float) -> None:
        """Keep the samples of priority <= ``highest``."""
        pruned = []
        for z, ref, ids in self.kept:
            keep = index_priority(ids) <= highest
            if bool(keep.any()):
                pruned.append((z[keep], None if ref is None else ref[keep], ids[keep]))
        self.kept = pruned

    @property
    def rows(self) -> int:
        """Samples kept on this rank."""
        return sum(len(ids) for _, _, ids in self.kept)

    def view(self, paired: bool) -> "IndexedImages":
        """The same kept samples, batched for a paired metric or not."""
        other = IndexedImages(self.lookup, self.modes, self.per_mode, paired, self.limit)
        other.kept = self.kept
        return other

    def batches(self, stream: str) -> Optional[list[tuple[Any, Tensor]]]:
        if stream != "samples":
            return None
        return [(((z, ref) if self.paired else z), ids) for z, ref, ids in self.kept]

    def images(self, trainer: L.Trainer, stream: str, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        lookup = self.lookup
        items = [lookup(int(i)) if callable(lookup) else lookup[int(i)] for i in ids]
        images = torch.stack([as_image(item) for item in items]) if items else torch.zeros(0, 1, 1, 1)
        classes = [item_class(item) for item in items]
        known = bool(items) and all(c is not None for c in classes)
        return images, (torch.tensor(classes, dtype=torch.long) if known else None)


class KeptImages(GalleryImages):
    """Images a callback keeps per stream, each rank its share, under global ids (unique across ranks), and streams
    searched whole.

    The measured stream is ``"samples"`` (kept rows). A reference stream is named by its loader and searched whole
    (`search_whole`): each gallery streams every one of its samples again (``batches()``), and the rows a gallery
    shows are picked by id in one more pass without features (``rows_of(ids)``), so no sample of it is left out
    of the search. `view` picks the reference stream a metric's ``"reference"`` galleries read.

    Args:
        modes: modes per gallery.
        per_mode: images per mode.
    """

    def __init__(self, modes: int, per_mode: int) -> None:
        super().__init__(modes, per_mode)
        self.kept: dict[str, list[Row]] = {}
        self.whole: dict[str, tuple[Callable[[], Iterable[tuple[Tensor, Tensor]]], Callable[[Tensor], list[Row]]]] = {}
        self.reference: Optional[str] = None

    def keep(self, stream: str, features: Tensor, ids: Tensor, images: Tensor, labels: Optional[Tensor] = None) -> None:
        """Keep rows of ``stream``: features (n, d), global ids (n,), images (n, C, H, W), labels (n,) or ``None``."""
        self.kept.setdefault(stream, []).append(
            (features.cpu(), ids.cpu(), images.detach().cpu(), None if labels is None else labels.cpu())
        )

    def open(self, stream: str) -> None:
        """Start ``stream`` empty (a rank may keep none of its rows and still take part in the gallery's pass)."""
        self.kept.setdefault(stream, [])

    def search_whole(
        self, stream: str, batches: Callable[[], Iterable[tuple[Tensor, Tensor]]], rows_of: Callable[[Tensor], list[Row]]
    ) -> None:
        """Search ``stream`` whole: ``batches()`` yields ``(features, global ids)`` of this rank's share of all its
        samples, on every call; ``rows_of(ids)`` returns this rank's rows ``(features, ids, images, labels)`` among
        ``ids``."""
        self.whole[stream] = (batches, rows_of)

    def clear(self, stream: str) -> None:
        """Forget ``stream``'s rows."""
        self.kept.pop(stream, None)

    def view(self, reference: Optional[str]) -> "KeptImages":
        """The same kept images, with ``reference`` as the stream of ``"reference"`` galleries."""
        other = KeptImages(self.modes, self.per_mode)
        other.kept, other.whole, other.reference = self.kept, self.whole, reference
        return other

    def _stream(self, stream: str) -> Optional[str]:
        return self.reference if stream == "reference" else stream

    def batches(self, stream: str) -> Optional[Iterable[tuple[Tensor, Tensor]]]:
        name = self._stream(stream)
        if name in self.whole:
            return _Lazy(self.whole[name][0])
        if name is None or name not in self.kept:
            return None
        return _Lazy(lambda: [(features, ids) for features, ids, _, _ in self.kept[name]])

    def images(self, trainer: L.Trainer, stream: str, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        """Each rank contributes the rows it holds, gathered through the strategy (few rows: a gallery's)."""
        name = self._stream(stream)
        if name in self.whole:
            rows = self.whole[name][1](ids)
        else:
            rows = self.kept.get(name, []) if name is not None else []
        shape = next((tuple(images.shape[1:]) for _, _, images, _ in rows), None)
        shapes = all_gather_rows(torch.tensor([shape or (0, 0, 0)], dtype=torch.float64), strategy=trainer.strategy)
        known = shapes[shapes[:, 0] > 0]
        shape = tuple(int(v) for v in known[0].tolist()) if len(known) else (1, 1, 1)
        mine = torch.cat([kept_ids for _, kept_ids, _, _ in rows]) if rows else torch.zeros(0, dtype=torch.long)
        wanted = torch.isin(mine, ids)
        images = torch.cat([kept for _, _, kept, _ in rows])[wanted] if rows else torch.zeros(0, *shape)
        labelled = bool(rows) and all(labels is not None for _, _, _, labels in rows)
        if labelled:
            labels = torch.cat([kept_labels for _, _, _, kept_labels in rows])[wanted].double()  # type: ignore[misc]
        else:
            labels = torch.full((len(images),), -1.0)
        table = torch.cat([mine[wanted].double()[:, None], labels[:, None], images.flatten(1).double()], 1)
        table = all_gather_rows(table, strategy=trainer.strategy)  # the wanted rows of every rank: (R, 2 + C H W)
        position = {int(i): row for row, i in enumerate(table[:, 0].long().tolist())}
        found = table[torch.tensor([position[int(i)] for i in ids], dtype=torch.long)]
        classes = found[:, 1].long()
        return found[:, 2:].float().reshape(len(ids), *shape), (classes if bool((classes >= 0).all()) else None)


class _Lazy:
    """A re-iterable view of ``fn()``'s items: nothing runs until it is iterated."""

    def __init__(self, fn: Callable[[], Iterable[Any]]) -> None:
        self.fn = fn

    def __iter__(self) -> Any:
        return iter(self.fn())
