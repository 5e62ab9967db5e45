"""What the image-caption datamodules share: splits built once, seeded loaders, class prompts, pictures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import lightning as L
from torch import Tensor
from torch.utils.data import DataLoader

from lightning_spectral._checks import (
    check_bool,
    check_nonnegative_int,
    check_normalisation,
    check_positive_int,
    check_seed,
)
from lightning_spectral.data.datasets import ImageTextDataset, Tokenizer, resolve_tokenizer
from lightning_spectral.data.resumable import ResumableDataLoader, ResumesMidEpoch
from lightning_spectral.data.sampling import EpochShuffle
from lightning_spectral.data.transforms import LoadImage, default_transform


class _ImageTextDataModule(ResumesMidEpoch, L.LightningDataModule):
    """Loaders, prompts and split bookkeeping shared by the datamodules; subclasses build the datasets."""

    def __init__(
        self,
        batch_size: int,
        num_workers: int,
        seed: int,
        tokenizer: Union[str, Tokenizer, None],
        context_length: Optional[int],
        ood_in_val: bool,
        template: str,
    ) -> None:
        super().__init__()
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.num_workers = check_nonnegative_int(num_workers, "num_workers")
        self.seed = check_seed(seed)
        self.tokenizer = resolve_tokenizer(tokenizer, context_length)
        self.ood_in_val = check_bool(ood_in_val, "ood_in_val")
        if not isinstance(template, str) or "{}" not in template:
            raise ValueError(f"`template` must be a string with one '{{}}' for the class name, got {template!r}.")
        self.template = template
        self.class_names: list[str] = []
        self._sources: Sequence[Any] = ()  # every sample of the source, by dataset index (set by _build)
        self.train_set: Optional[ImageTextDataset] = None
        self.train_eval_set: Optional[ImageTextDataset] = None
        self.val_set: Optional[ImageTextDataset] = None
        self.ood_set: Optional[ImageTextDataset] = None

    @property
    def prompts(self) -> list[str]:
        """One caption per class, ``template.format(class_name)``; position = label (zero-shot classifiers)."""
        return [self.template.format(name) for name in self.class_names]

    def _build(self) -> None:
        raise NotImplementedError

    def _display_image(self, source: Any) -> Tensor:
        raise NotImplementedError

    def image_of(self, index: int) -> Tensor:
        """The sample of dataset index ``index`` as a picture, (3, H, W) in [0, 1], for mode galleries
        (e.g. ``EmbeddingMetrics(images="image_of")``)."""
        self.setup()
        sources = self._sources
        if not 0 <= int(index) < len(sources):
            raise IndexError(f"{type(self).__name__}: dataset index {index} is outside 0..{len(sources) - 1}.")
        return self._display_image(sources[int(index)])

    def setup(self, stage: Optional[str] = None) -> None:
        """Build the splits once (idempotent: later calls keep them)."""
        if self.train_set is None:
            self._build()

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader:
        self.setup()
        dataset = getattr(self, f"{split}_set")
        if dataset is None:
            raise ValueError(f"{type(self).__name__}: the {split} split is empty; see its arguments.")
        common = dict(batch_size=self.batch_size, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)
        if shuffle:  # training: a run resumed from a mid-epoch checkpoint continues where it stopped
            sampler = EpochShuffle(len(dataset), self.seed)
            return ResumableDataLoader(dataset, sampler=sampler, position=self.train_position, **common)
        return DataLoader(dataset, **common)

    def train_dataloader(self) -> DataLoader:
        """The training split, reshuffled every epoch from ``seed + epoch``
        ([`EpochShuffle`][lightning_spectral.data.EpochShuffle]); a
        [`ResumableDataLoader`][lightning_spectral.data.ResumableDataLoader], so a run resumed from a mid-epoch
        checkpoint trains on the same batches."""
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> Union[DataLoader, list[DataLoader]]:
        """The validation split; ``[val, ood]`` when ``ood_in_val`` (OOD is validation dataloader 1)."""
        val = self._loader("val")
        return [val, self.ood_dataloader()] if self.ood_in_val else val

    def ood_dataloader(self) -> DataLoader:
        """The out-of-distribution (held-out) samples, in a fixed order."""
        return self._loader("ood")

    def train_dataloader_for_eval(self) -> DataLoader:
        """The training split in a fixed order with the evaluation transform (for fitting detectors, kNN)."""
        return self._loader("train_eval")

    def val_dataloader_for_eval(self) -> DataLoader:
        """The validation split alone (without the OOD loader ``val_dataloader`` may add)."""
        return self._loader("val")

    def _dataset(self, rows: Sequence[int], sources, captions, labels, load) -> Optional[ImageTextDataset]:
        if not rows:
            return None
        return ImageTextDataset(
            [sources[i] for i in rows],
            [captions[i] for i in rows],
            [labels[i] for i in rows],
            list(rows),
            load,
            self.tokenizer,
        )


class _FileImageText(_ImageTextDataModule):
    """Shared arguments of the file-based datamodules (transforms, normalisation)."""

    def __init__(
        self,
        image_size: int,
        transform: Optional[Callable[[Any], Tensor]],
        train_transform: Optional[Callable[[Any], Tensor]],
        mean: Optional[Sequence[float]],
        std: Optional[Sequence[float]],
        **shared: Any,
    ) -> None:
        super().__init__(**shared)
        self.image_size = check_positive_int(image_size, "image_size")
        check_normalisation(mean, std)
        self.transform = transform if transform is not None else default_transform(self.image_size, mean, std)
        self.train_transform = train_transform if train_transform is not None else self.transform

    def _loads(self) -> tuple[LoadImage, LoadImage]:
        return LoadImage(self.train_transform), LoadImage(self.transform)

    def _display_image(self, source: Any) -> Tensor:
        return LoadImage(default_transform(self.image_size, None, None))(source)
