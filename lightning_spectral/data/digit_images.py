"""Offline training data for small generative models: scikit-learn's 8x8 digits, with classes dropped mid-run.

Items are dicts ``{"image": float (1, 8, 8) in [0, 1], "label": int, "index": int}``; ``"index"`` is the
position in ``sklearn.datasets.load_digits()``, the same in every split.
[`DropClassesSampler`][lightning_spectral.data.DropClassesSampler] removes
(or starves) some classes from the training stream from a given epoch on, so that a model trained on it
forgets them: the mode collapse the spectral metrics have to catch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Optional

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from lightning_spectral._checks import check_fraction, check_nonnegative_int, check_positive_int, check_seed
from lightning_spectral.data.resumable import ResumableDataLoader, ResumesMidEpoch
from lightning_spectral.data.sampling import stratified_split

__all__ = ["DigitsImages", "DropClassesSampler", "ImageDataset", "load_digit_images"]


def load_digit_images() -> tuple[Tensor, Tensor]:
    """All 1,797 digits of scikit-learn (shipped inside the package: no download).

    Returns:
        ``(images, labels)``: float32 (1797, 1, 8, 8) in [0, 1] (pixel counts 0-16 divided by 16) and
        int64 (1797,) digits 0-9.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(np.asarray(digits.images, dtype=np.float32) / 16.0).unsqueeze(1)
    return images, torch.from_numpy(np.asarray(digits.target, dtype=np.int64))


class ImageDataset(Dataset):
    """Dict items ``{"image", "label", "index"}`` over rows of an image tensor.

    Args:
        images: (N, C, H, W) images of the whole source.
        labels: (N,) classes of the whole source.
        rows: the positions (dataset indices) this split holds.

    Examples:
        >>> import torch
        >>> data = ImageDataset(torch.zeros(5, 1, 8, 8), torch.arange(5), rows=[3, 1])
        >>> len(data), data[0]["index"], data[0]["label"], data[0]["image"].shape
        (2, 3, 3, torch.Size([1, 8, 8]))
    """

    def __init__(self, images: Tensor, labels: Tensor, rows: Sequence[int]) -> None:
        self.images, self.labels = images, labels
        self.rows = [int(r) for r in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        return {"image": self.images[row], "label": int(self.labels[row]), "index": row}


class DropClassesSampler(Sampler[int]):
    """An epoch-seeded shuffle that stops serving some classes from epoch ``drop_after_epoch`` on.

    Before that epoch: a permutation of all positions, drawn from ``seed + epoch`` (as
    [`EpochShuffle`][lightning_spectral.data.EpochShuffle]). From that epoch on, the positions of ``drop_classes``
    are left out, except a fixed, seeded ``keep_fraction`` of them (``0`` removes the classes, ``> 0``
    starves them); the epoch is filled up to its usual length with further permutations of what remains, so
    every epoch has the same number of batches (Lightning counts them once) and both runs of a comparison
    take the same number of optimiser steps. Lightning calls `set_epoch` every training epoch (also
    through its DDP wrapper), so a resumed run sees the same stream as an uninterrupted one.

    Args:
        labels: the class of every position of the dataset.
        seed: the shuffles and the kept subset.
        drop_classes: classes to remove from the stream (``()`` for none).
        drop_after_epoch: first epoch without them (0: never served).
        keep_fraction: share of the dropped classes' positions still served, in [0, 1).

    Examples:
        >>> sampler = DropClassesSampler([0, 0, 1, 1, 2, 2], seed=0, drop_classes=[1], drop_after_epoch=1)
        >>> sorted(sampler)
        [0, 1, 2, 3, 4, 5]
        >>> sampler.set_epoch(1)
        >>> len(list(sampler)), sorted(set(sampler))
        (6, [0, 1, 4, 5])
    """

    def __init__(
        self,
        labels: Sequence[int],
        seed: int = 0,
        drop_classes: Sequence[int] = (),
        drop_after_epoch: int = 0,
        keep_fraction: float = 0.0,
    ) -> None:
        self.labels = torch.as_tensor(list(labels), dtype=torch.long)
        self.seed, self.epoch = check_seed(seed), 0
        self.drop_classes = _check_classes(drop_classes, self.labels)
        self.drop_after_epoch = check_nonnegative_int(drop_after_epoch, "drop_after_epoch")
        self.keep_fraction = check_fraction(keep_fraction, "keep_fraction", low_open=False, high_closed=False)
        dropped = torch.isin(self.labels, torch.tensor(self.drop_classes, dtype=torch.long))
        kept = torch.nonzero(~dropped).flatten()
        candidates = torch.nonzero(dropped).flatten()
        starved = candidates[torch.randperm(len(candidates), generator=torch.Generator().manual_seed(self.seed))]
        self._remaining = torch.cat([kept, starved[: round(self.keep_fraction * len(candidates))]]).sort().values
        if self.drop_classes and len(self._remaining) == 0:
            raise ValueError("DropClassesSampler: `drop_classes` removes every sample; keep at least one class.")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        n = len(self.labels)
        if not self.drop_classes or self.epoch < self.drop_after_epoch:
            return iter(torch.randperm(n, generator=generator).tolist())
        pool = self._remaining
        rounds = -(-n // len(pool))  # enough permutations of the remaining positions to fill the epoch
        order = torch.cat([pool[torch.randperm(len(pool), generator=generator)] for _ in range(rounds)])
        return iter(order[:n].tolist())

    def __len__(self) -> int:
        return len(self.labels)


class DigitsImages(ResumesMidEpoch, L.LightningDataModule):
    """scikit-learn's 1,797 handwritten digits as (1, 8, 8) images in [0, 1], for training generative models.

    ``val_fraction`` of every class goes to a held-out split (stratified, seeded). The training stream
    (``train_dataloader``) is shuffled every epoch from ``seed + epoch`` and, with ``drop_classes``, loses those
    classes from epoch ``drop_after_epoch`` on
    ([`DropClassesSampler`][lightning_spectral.data.DropClassesSampler]): a model trained on it forgets
    them. ``reference_dataloader()`` is the whole training split in a fixed order, dropped classes included:
    the data distribution a model's samples are compared with.

    Args:
        val_fraction: share of each class held out, in [0, 1).
        batch_size: loader batch size.
        seed: the split, the shuffles and the starved subset.
        drop_classes: digits removed from the training stream (``()``: none).
        drop_after_epoch: the first epoch without them (0: never trained on).
        keep_fraction: share of the dropped digits' training samples still served (0 removes them; e.g. 0.1
            starves them).
        num_workers: DataLoader workers.

    Examples:
        >>> data = DigitsImages(batch_size=16, drop_classes=[3, 7], drop_after_epoch=2)
        >>> data.setup("fit")
        >>> batch = next(iter(data.train_dataloader()))
        >>> batch["image"].shape, float(batch["image"].min()) >= 0, float(batch["image"].max()) <= 1
        (torch.Size([16, 1, 8, 8]), True, True)
        >>> len(data.train_set) + len(data.val_set)
        1797
    """

    n_classes = 10

    def __init__(
        self,
        val_fraction: float = 0.2,
        batch_size: int = 64,
        seed: int = 0,
        drop_classes: Sequence[int] = (),
        drop_after_epoch: int = 0,
        keep_fraction: float = 0.0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.val_fraction = check_fraction(val_fraction, "val_fraction", low_open=False, high_closed=False)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.seed = check_seed(seed)
        self.drop_classes = _check_classes(drop_classes, torch.arange(self.n_classes))
        self.drop_after_epoch = check_nonnegative_int(drop_after_epoch, "drop_after_epoch")
        self.keep_fraction = check_fraction(keep_fraction, "keep_fraction", low_open=False, high_closed=False)
        self.num_workers = check_nonnegative_int(num_workers, "num_workers")
        self.train_set: Optional[ImageDataset] = None
        self.val_set: Optional[ImageDataset] = None

    def setup(self, stage: Optional[str] = None) -> None:
        """Load the digits and split them (idempotent)."""
        if self.train_set is not None:
            return
        images, labels = load_digit_images()
        train_rows, val_rows = stratified_split(labels.tolist(), self.val_fraction, self.seed)
        self.train_set = ImageDataset(images, labels, train_rows)
        self.val_set = ImageDataset(images, labels, val_rows)

    def _loader(self, dataset: Optional[ImageDataset], sampler: Optional[Sampler] = None) -> DataLoader:
        common = dict(batch_size=self.batch_size, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)
        if sampler is not None:  # training: a run resumed from a mid-epoch checkpoint continues where it stopped
            return ResumableDataLoader(dataset, sampler=sampler, position=self.train_position, **common)
        return DataLoader(dataset, **common)

    def train_dataloader(self) -> DataLoader:
        """The training stream: reshuffled every epoch, without ``drop_classes`` from ``drop_after_epoch`` on."""
        self.setup()
        labels = self.train_set.labels[self.train_set.rows].tolist()
        sampler = DropClassesSampler(labels, self.seed, self.drop_classes, self.drop_after_epoch, self.keep_fraction)
        return self._loader(self.train_set, sampler)

    def val_dataloader(self) -> DataLoader:
        """The held-out split, in a fixed order."""
        self.setup()
        return self._loader(self.val_set)

    def reference_dataloader(self) -> DataLoader:
        """The whole training split (every class, dropped ones included), in a fixed order."""
        self.setup()
        return self._loader(self.train_set)


def _check_classes(classes: Sequence[int], labels: Tensor) -> tuple[int, ...]:
    known = sorted(set(labels.tolist()))
    values = tuple(classes)
    valid = all(isinstance(k, int) and not isinstance(k, bool) and k in known for k in values)
    if not valid or len(set(values)) != len(values):
        raise ValueError(f"`drop_classes` must be distinct classes out of {known}, got {classes!r}.")
    return tuple(sorted(values))
