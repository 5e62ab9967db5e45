"""Image-caption datamodules: offline handwritten digits, open_clip-style CSV files, and image folders.

Every item is a dict ``{"image": float (3, H, W), "caption": str, "index": int, "label": int}`` plus
``"text"``: the caption's token ids (context_length,) when a tokenizer is given. ``"index"`` is the sample's
position in the whole source (all digits / all CSV rows / all image files), the same in every split, so
precomputed reference features (:class:`~lightning_spectral.encoders.PrecomputedFeatures`) of the whole
source are looked up by it; ``"label"`` is the class (-1 when unknown).

Datamodules share: ``train_dataloader`` (shuffled from ``seed + epoch``), ``val_dataloader`` (also the
out-of-distribution loader when ``ood_in_val=True``, as ``KPCAOODMonitor(ood_val_dataloader_idx=1)`` expects),
``ood_dataloader()``, ``train_dataloader_for_eval()`` (train split, fixed order, evaluation transform) and
``val_dataloader_for_eval()``; ``class_names`` and ``prompts`` (one caption per class, position = label) for
zero-shot classification.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

# open_clip.constants.OPENAI_DATASET_MEAN / _STD, copied so that importing this module does not import open_clip
OPENAI_DATASET_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_DATASET_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

Tokenizer = Callable[..., Tensor]

__all__ = [
    "CsvImageText",
    "DigitsImageText",
    "ImageFolderText",
    "ImageTextDataset",
    "OPENAI_DATASET_MEAN",
    "OPENAI_DATASET_STD",
]


# ----------------------------------------------------------------------------------------------------------------
# items
# ----------------------------------------------------------------------------------------------------------------


class ImageTextDataset(Dataset):
    """Image-caption pairs as dict items; images are produced by ``load(source)``.

    Args:
        sources: one entry per item, handed to ``load`` (a file path, a pixel tensor, ...).
        captions: one caption per item.
        labels: one class per item (-1 = unknown).
        indices: the items' dataset indices (positions in the whole source).
        load: ``source -> float tensor (3, H, W)``; picklable for ``num_workers > 0``.
        tokenizer: ``tokenizer([caption]) -> (1, context_length)`` token ids; ``None`` = no ``"text"``.

    Example:
        >>> import torch
        >>> data = ImageTextDataset([torch.zeros(3, 4, 4)], ["a photo"], [2], [17], load=lambda x: x)
        >>> item = data[0]
        >>> item["image"].shape, item["caption"], item["label"], item["index"]
        (torch.Size([3, 4, 4]), 'a photo', 2, 17)
    """

    def __init__(
        self,
        sources: Sequence[Any],
        captions: Sequence[str],
        labels: Sequence[int],
        indices: Sequence[int],
        load: Callable[[Any], Tensor],
        tokenizer: Optional[Tokenizer] = None,
    ) -> None:
        if not len(sources) == len(captions) == len(labels) == len(indices):
            raise ValueError(
                f"ImageTextDataset: sources, captions, labels and indices must have one entry per item, got "
                f"{len(sources)}, {len(captions)}, {len(labels)} and {len(indices)}."
            )
        self.sources, self.captions = sources, list(captions)
        self.labels, self.indices = [int(v) for v in labels], [int(v) for v in indices]
        self.load, self.tokenizer = load, tokenizer
        self._tokens: dict[str, Tensor] = {}

    def __len__(self) -> int:
        return len(self.captions)

    def tokens(self, caption: str) -> Tensor:
        """Token ids (context_length,) of ``caption``, cached (captions repeat in class-template datasets)."""
        if caption not in self._tokens:
            tokens = torch.as_tensor(self.tokenizer([caption]))  # type: ignore[misc]
            if tokens.ndim != 2 or tokens.shape[0] != 1:
                raise ValueError(
                    f"`tokenizer` must map a list of n captions to (n, context_length) token ids, got shape "
                    f"{tuple(tokens.shape)} for one caption; use `open_clip.get_tokenizer(model_name)`."
                )
            if len(self._tokens) < 4096:
                self._tokens[caption] = tokens[0]
            return tokens[0]
        return self._tokens[caption]

    def __getitem__(self, i: int) -> dict[str, Any]:
        item: dict[str, Any] = {
            "image": self.load(self.sources[i]),
            "caption": self.captions[i],
            "index": self.indices[i],
            "label": self.labels[i],
        }
        if self.tokenizer is not None:
            item["text"] = self.tokens(self.captions[i])
        return item


class RenderDigit:
    """An 8x8 grey digit (values 0-16) as a (3, size, size) float image: bilinear upsampling to ``size``,
    values scaled to [0, 1], replicated to RGB; then ``(x - mean) / std`` if both are given, or
    ``transform(PIL image)`` if a transform is given (e.g. an open_clip preprocess, with its augmentations).

    Example:
        >>> import torch
        >>> render = RenderDigit(16)
        >>> image = render(torch.full((8, 8), 16.0))
        >>> image.shape, float(image.min()), float(image.max())
        (torch.Size([3, 16, 16]), 1.0, 1.0)
    """

    def __init__(
        self,
        size: int,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        transform: Optional[Callable[[Any], Tensor]] = None,
    ) -> None:
        self.size = size
        self.transform = transform
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = None if std is None else torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, pixels: Tensor) -> Tensor:
        grey = torch.as_tensor(pixels, dtype=torch.float32).reshape(1, 1, 8, 8) / 16.0
        grey = F.interpolate(grey, size=(self.size, self.size), mode="bilinear", align_corners=False)
        image = grey[0].clamp(0.0, 1.0).expand(3, -1, -1)
        if self.transform is not None:
            from torchvision.transforms.functional import to_pil_image

            return self.transform(to_pil_image(image))
        if self.mean is not None and self.std is not None:
            return (image - self.mean) / self.std
        return image.contiguous()


class LoadImage:
    """A local image file as the tensor ``transform(PIL RGB image)`` returns."""

    def __init__(self, transform: Callable[[Any], Tensor]) -> None:
        self.transform = transform

    def __call__(self, path: Union[str, Path]) -> Tensor:
        from PIL import Image

        with Image.open(path) as image:
            return self.transform(image.convert("RGB"))


def default_transform(
    image_size: int, mean: Optional[Sequence[float]], std: Optional[Sequence[float]]
) -> Callable[[Any], Tensor]:
    """Resize the shorter side to ``image_size``, centre crop, to a [0, 1] tensor, normalise by ``mean`` / ``std``."""
    from torchvision import transforms

    steps: list[Any] = [
        transforms.Resize(image_size, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(image_size),
        transforms.ToTensor(),
    ]
    if mean is not None and std is not None:
        steps.append(transforms.Normalize(mean, std))
    return transforms.Compose(steps)


class EpochShuffle(Sampler[int]):
    """A random permutation of ``range(n)`` drawn from ``seed + epoch``: Lightning calls :meth:`set_epoch` at
    every training epoch, so a run resumed from a checkpoint sees the same batches as an uninterrupted one.

    Example:
        >>> sampler = EpochShuffle(5, seed=0)
        >>> first = list(sampler); sampler.set_epoch(1); second = list(sampler); sampler.set_epoch(0)
        >>> sorted(first) == list(range(5)), first == list(sampler), first != second
        (True, True, True)
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=generator).tolist())

    def __len__(self) -> int:
        return self.n


# ----------------------------------------------------------------------------------------------------------------
# shared datamodule machinery
# ----------------------------------------------------------------------------------------------------------------


def _check_fraction(value: float, name: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.") from None
    if not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1), got {value}.")
    return value


def _check_int(value: int, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")
    return value


def _check_norm(mean: Optional[Sequence[float]], std: Optional[Sequence[float]]) -> None:
    if (mean is None) != (std is None):
        raise ValueError("Pass both `mean` and `std` (per-channel normalisation), or neither for [0, 1] images.")
    if mean is not None and std is not None:
        if len(mean) != 3 or len(std) != 3 or any(float(s) <= 0 for s in std):
            raise ValueError(f"`mean` and `std` must be 3 numbers each (RGB), std > 0; got {mean!r} and {std!r}.")


def stratified_split(labels: Sequence[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Positions of a seeded split: ``round(fraction * n_c)`` of every class ``c`` go to the second part.

    Deterministic for a given ``seed`` (a CPU ``torch.Generator``), independent of the global RNG.

    Example:
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


def resolve_tokenizer(tokenizer: Union[str, Tokenizer, None], context_length: Optional[int]) -> Optional[Tokenizer]:
    """A tokenizer: a callable as is, a model name through ``open_clip.get_tokenizer``, or ``None``."""
    if tokenizer is None or callable(tokenizer):
        if context_length is not None and tokenizer is not None:
            raise ValueError("`context_length` only applies when `tokenizer` is an open_clip model name.")
        return tokenizer
    if isinstance(tokenizer, str):
        import open_clip

        return open_clip.get_tokenizer(tokenizer, context_length=context_length)
    raise ValueError(
        f"`tokenizer` must be an open_clip model name, a callable `tokenizer(list[str]) -> (n, context_length)` "
        f"or None, got {type(tokenizer).__name__}."
    )


class _ImageTextDataModule(L.LightningDataModule):
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
        self.batch_size = _check_int(batch_size, "batch_size", 1)
        self.num_workers = _check_int(num_workers, "num_workers", 0)
        self.seed = _check_int(seed, "seed", 0)
        self.tokenizer = resolve_tokenizer(tokenizer, context_length)
        self.ood_in_val = bool(ood_in_val)
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
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=EpochShuffle(len(dataset), self.seed) if shuffle else None,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        """The training split, reshuffled every epoch from ``seed + epoch`` (:class:`EpochShuffle`)."""
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


# ----------------------------------------------------------------------------------------------------------------
# digits (offline)
# ----------------------------------------------------------------------------------------------------------------


class DigitsImageText(_ImageTextDataModule):
    """scikit-learn's 1,797 handwritten digits (8x8 grey, shipped with scikit-learn: no download) as captioned
    RGB images, with some classes held out as out-of-distribution.

    Each digit is upsampled bilinearly to ``image_size``, scaled to [0, 1], replicated to RGB and normalised
    with ``mean`` / ``std`` (open_clip's OPENAI statistics by default) on tensors; a ``transform`` instead
    receives the PIL image (e.g. open_clip's ``preprocess_val``; slower, and it may augment). Captions are
    ``template.format(k)``, "a photo of the digit k"; ``label`` is the digit ``k`` and ``index`` its position
    in ``sklearn.datasets.load_digits()``. Digits of ``held_out`` form the OOD split; every other class is split
    into train / val, ``val_fraction`` of each class to val (seeded).

    Args:
        image_size: side of the rendered images: the model's input size (224 for ViT-B-32).
        held_out: digits held out as out-of-distribution (``()`` for none).
        val_fraction: share of each in-distribution class used for validation.
        batch_size: loader batch size.
        seed: the split and the training shuffle.
        tokenizer: an open_clip model name (``"ViT-B-32"``), a callable ``tokenizer(list[str])`` returning
            (n, context_length) ids, or ``None`` (items then have no ``"text"``).
        context_length: with a model-name tokenizer, its context length (e.g. a tiny model's).
        transform: ``PIL image -> tensor`` (replaces the tensor normalisation); ``train_transform`` for the
            training split only (default ``transform``).
        mean, std: tensor normalisation; ``None`` keeps [0, 1].
        num_workers: DataLoader workers.
        ood_in_val: ``val_dataloader`` returns ``[val, ood]``.
        template: caption of class ``k``.
        caption_noise: the fraction of training captions replaced (seeded) by the caption of a random
            in-distribution digit, like weakly-matched web captions; labels and validation captions stay true.

    Example:
        >>> data = DigitsImageText(image_size=16, batch_size=8)
        >>> data.setup("fit")
        >>> batch = next(iter(data.train_dataloader()))
        >>> batch["image"].shape, batch["label"].dtype, batch["index"].dtype
        (torch.Size([8, 3, 16, 16]), torch.int64, torch.int64)
        >>> data.prompts[3], sorted(set(data.ood_set.labels))
        ('a photo of the digit 3', [8, 9])
    """

    n_classes = 10

    def __init__(
        self,
        image_size: int = 224,
        held_out: Sequence[int] = (8, 9),
        val_fraction: float = 0.2,
        batch_size: int = 64,
        seed: int = 0,
        tokenizer: Union[str, Tokenizer, None] = None,
        context_length: Optional[int] = None,
        transform: Optional[Callable[[Any], Tensor]] = None,
        train_transform: Optional[Callable[[Any], Tensor]] = None,
        mean: Optional[Sequence[float]] = OPENAI_DATASET_MEAN,
        std: Optional[Sequence[float]] = OPENAI_DATASET_STD,
        num_workers: int = 0,
        ood_in_val: bool = False,
        template: str = "a photo of the digit {}",
        caption_noise: float = 0.0,
    ) -> None:
        super().__init__(batch_size, num_workers, seed, tokenizer, context_length, ood_in_val, template)
        self.caption_noise = _check_fraction(caption_noise, "caption_noise")
        self.image_size = _check_int(image_size, "image_size", 1)
        held = tuple(held_out)
        digits_ok = all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= 9 for k in held)
        if not digits_ok or len(set(held)) != len(held):
            raise ValueError(f"`held_out` must be distinct digits 0-9, got {held_out!r}.")
        if len(held) >= self.n_classes:
            raise ValueError("`held_out` cannot hold every digit: at least one class must stay in-distribution.")
        self.held_out = tuple(sorted(held))
        self.in_distribution = tuple(k for k in range(self.n_classes) if k not in held)
        self.val_fraction = _check_fraction(val_fraction, "val_fraction")
        _check_norm(mean, std)
        self.mean, self.std = mean, std
        self.transform, self.train_transform = transform, train_transform
        self.class_names = [str(k) for k in range(self.n_classes)]

    def _build(self) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        pixels = torch.from_numpy(np.asarray(digits.images, dtype=np.float32))  # (1797, 8, 8), values 0-16
        labels = [int(k) for k in digits.target]
        captions = [self.template.format(k) for k in labels]
        inside = [i for i, k in enumerate(labels) if k not in self.held_out]
        train_pos, val_pos = stratified_split([labels[i] for i in inside], self.val_fraction, self.seed)
        train_rows, val_rows = [inside[p] for p in train_pos], [inside[p] for p in val_pos]
        ood_rows = [i for i, k in enumerate(labels) if k in self.held_out]
        self._sources = pixels
        render = RenderDigit(self.image_size, self.mean, self.std, self.transform)
        train_render = (
            render
            if self.train_transform is None
            else RenderDigit(self.image_size, self.mean, self.std, self.train_transform)
        )
        train_captions = self._noisy_captions(captions, train_rows)
        self.train_set = self._dataset(train_rows, pixels, train_captions, labels, train_render)
        self.train_eval_set = self._dataset(train_rows, pixels, captions, labels, render)
        self.val_set = self._dataset(val_rows, pixels, captions, labels, render)
        self.ood_set = self._dataset(ood_rows, pixels, captions, labels, render)


    def _noisy_captions(self, captions: list[str], rows: Sequence[int]) -> list[str]:
        """``captions`` with a seeded ``caption_noise`` fraction of ``rows`` naming a random in-distribution digit."""
        if not self.caption_noise:
            return captions
        generator = torch.Generator().manual_seed(self.seed + 1)
        noisy = list(captions)
        flips = torch.rand(len(rows), generator=generator) < self.caption_noise
        picks = torch.randint(len(self.in_distribution), (len(rows),), generator=generator)
        for row, flip, pick in zip(rows, flips.tolist(), picks.tolist()):
            if flip:
                noisy[row] = self.template.format(self.in_distribution[pick])
        return noisy

    def _display_image(self, source: Any) -> Tensor:
        return RenderDigit(self.image_size)(source)


# ----------------------------------------------------------------------------------------------------------------
# files: CSV (open_clip format) and image folders
# ----------------------------------------------------------------------------------------------------------------


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
        self.image_size = _check_int(image_size, "image_size", 1)
        _check_norm(mean, std)
        self.transform = transform if transform is not None else default_transform(self.image_size, mean, std)
        self.train_transform = train_transform if train_transform is not None else self.transform

    def _loads(self) -> tuple[LoadImage, LoadImage]:
        return LoadImage(self.train_transform), LoadImage(self.transform)

    def _display_image(self, source: Any) -> Tensor:
        return LoadImage(default_transform(self.image_size, None, None))(source)


def _read_csv(path: Path, sep: str, img_key: str, caption_key: str, label_key: Optional[str], root: Path):
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle, delimiter=sep)
        columns = list(reader.fieldnames or [])
        wanted = [img_key, caption_key] + ([label_key] if label_key else [])
        absent = [key for key in wanted if key not in columns]
        if absent:
            hint = " (one column only: is `sep` right? open_clip's default is a tab)" if len(columns) == 1 else ""
            raise ValueError(
                f"{str(path)!r} has no column(s) {absent}; its columns are {columns}{hint}. Set `img_key` / "
                "`caption_key` / `label_key` to the column names."
            )
        rows = list(reader)
    if not rows:
        raise ValueError(f"{str(path)!r} has a header but no rows.")
    paths, captions, labels = [], [], []
    for line, row in enumerate(rows, start=2):
        image = Path(row[img_key])
        paths.append(str(image if image.is_absolute() else root / image))
        captions.append(str(row[caption_key]))
        if label_key:
            try:
                labels.append(int(row[label_key]))
            except (TypeError, ValueError):
                raise ValueError(
                    f"{str(path)!r} line {line}: `{label_key}` must be an integer class, got {row[label_key]!r}."
                ) from None
        else:
            labels.append(-1)
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} of the {len(paths)} images listed in {str(path)!r} do not exist, e.g. {missing[0]!r}; "
            "relative paths are read against `image_root` (default: the CSV's folder)."
        )
    return paths, captions, labels


class CsvImageText(_FileImageText):
    """Image-caption pairs listed in a CSV / TSV file, in open_clip's training format.

    open_clip's ``--train-data x.csv --csv-img-key filepath --csv-caption-key title --csv-separator "\\t"`` reads
    the same file. Relative image paths are read against ``image_root`` (default: the CSV's folder). Without
    ``val_csv``, ``val_fraction`` of the rows (seeded) form the validation split; ``ood_csv`` gives an
    out-of-distribution split. ``index`` is the row number in its file (train / val rows of one file share the
    numbering); ``label`` comes from ``label_key`` or is -1.

    Args:
        csv_path: the training CSV.
        img_key, caption_key: column names of the image path and the caption.
        sep: field separator (open_clip's default is a tab; ``","`` for comma-separated files).
        val_csv, ood_csv: optional separate files with the same columns.
        val_fraction: without ``val_csv``, share of the rows used for validation.
        label_key: optional integer class column.
        image_root: folder relative paths are read against.
        image_size, transform, train_transform, mean, std: without a ``transform``: resize the shorter side,
            centre crop to ``image_size``, normalise by ``mean`` / ``std`` (open_clip's OPENAI statistics).
            Pass open_clip's ``preprocess_val`` / ``preprocess_train`` to match a model exactly.
        batch_size, seed, tokenizer, context_length, num_workers, ood_in_val: as in :class:`DigitsImageText`.
        class_names, template: optional class names (position = label) for ``prompts``.

    Raises:
        FileNotFoundError: a missing CSV or image.
        ValueError: missing columns (naming the columns found), non-integer labels, bad arguments.
    """

    def __init__(
        self,
        csv_path: Union[str, Path],
        img_key: str = "filepath",
        caption_key: str = "title",
        sep: str = "\t",
        val_csv: Union[str, Path, None] = None,
        ood_csv: Union[str, Path, None] = None,
        val_fraction: float = 0.1,
        label_key: Optional[str] = None,
        image_root: Union[str, Path, None] = None,
        image_size: int = 224,
        transform: Optional[Callable[[Any], Tensor]] = None,
        train_transform: Optional[Callable[[Any], Tensor]] = None,
        mean: Optional[Sequence[float]] = OPENAI_DATASET_MEAN,
        std: Optional[Sequence[float]] = OPENAI_DATASET_STD,
        batch_size: int = 64,
        seed: int = 0,
        tokenizer: Union[str, Tokenizer, None] = None,
        context_length: Optional[int] = None,
        num_workers: int = 0,
        ood_in_val: bool = False,
        class_names: Optional[Sequence[str]] = None,
        template: str = "a photo of a {}",
    ) -> None:
        super().__init__(
            image_size,
            transform,
            train_transform,
            mean,
            std,
            batch_size=batch_size,
            num_workers=num_workers,
            seed=seed,
            tokenizer=tokenizer,
            context_length=context_length,
            ood_in_val=ood_in_val,
            template=template,
        )
        self.csv_path = self._file(csv_path, "csv_path")
        self.val_csv = None if val_csv is None else self._file(val_csv, "val_csv")
        self.ood_csv = None if ood_csv is None else self._file(ood_csv, "ood_csv")
        if not isinstance(sep, str) or len(sep) != 1:
            raise ValueError(f"`sep` must be one character ('\\t' or ','), got {sep!r}.")
        self.img_key, self.caption_key, self.sep, self.label_key = img_key, caption_key, sep, label_key
        self.val_fraction = _check_fraction(val_fraction, "val_fraction")
        self.image_root = None if image_root is None else Path(image_root)
        self.class_names = list(class_names or [])

    @staticmethod
    def _file(path: Union[str, Path], name: str) -> Path:
        path = Path(path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"`{name}`: no file at {str(path)!r}.")
        return path

    def _read(self, path: Path) -> tuple[list[str], list[str], list[int]]:
        root = self.image_root if self.image_root is not None else path.parent
        return _read_csv(path, self.sep, self.img_key, self.caption_key, self.label_key, root)

    def _build(self) -> None:
        train_load, eval_load = self._loads()
        paths, captions, labels = self._read(self.csv_path)
        self._sources = paths
        if self.val_csv is None:
            generator = torch.Generator().manual_seed(self.seed)
            order = torch.randperm(len(paths), generator=generator).tolist()
            n_val = int(round(self.val_fraction * len(paths)))
            val_rows, train_rows = sorted(order[:n_val]), sorted(order[n_val:])
            self.val_set = self._dataset(val_rows, paths, captions, labels, eval_load)
        else:
            train_rows = list(range(len(paths)))
            v_paths, v_captions, v_labels = self._read(self.val_csv)
            self.val_set = self._dataset(range(len(v_paths)), v_paths, v_captions, v_labels, eval_load)
        self.train_set = self._dataset(train_rows, paths, captions, labels, train_load)
        self.train_eval_set = self._dataset(train_rows, paths, captions, labels, eval_load)
        if self.ood_csv is not None:
            o_paths, o_captions, o_labels = self._read(self.ood_csv)
            self.ood_set = self._dataset(range(len(o_paths)), o_paths, o_captions, o_labels, eval_load)
        if self.train_set is None:
            raise ValueError(f"{str(self.csv_path)!r}: no training rows left; lower `val_fraction`.")


class ImageFolderText(_FileImageText):
    """A folder of class subfolders (``root/<class>/<image>``) as captioned images.

    Classes are the subfolder names in sorted order (label = position); the caption of an image of class ``c``
    is ``template.format(c)`` with underscores as spaces ("a photo of a golden retriever"). Classes in
    ``held_out`` form the out-of-distribution split; the others are split into train / val per class.
    ``index`` is the position in the sorted list of all image files.

    Args:
        root: the folder.
        template: caption of a class.
        held_out: class folder names held out as out-of-distribution.
        val_fraction: share of each in-distribution class used for validation.
        image_size, transform, train_transform, mean, std: as in :class:`CsvImageText`.
        batch_size, seed, tokenizer, context_length, num_workers, ood_in_val: as in :class:`DigitsImageText`.

    Raises:
        FileNotFoundError: ``root`` missing or without images in class subfolders.
        ValueError: unknown ``held_out`` classes, bad arguments.
    """

    def __init__(
        self,
        root: Union[str, Path],
        template: str = "a photo of a {}",
        held_out: Sequence[str] = (),
        val_fraction: float = 0.2,
        image_size: int = 224,
        transform: Optional[Callable[[Any], Tensor]] = None,
        train_transform: Optional[Callable[[Any], Tensor]] = None,
        mean: Optional[Sequence[float]] = OPENAI_DATASET_MEAN,
        std: Optional[Sequence[float]] = OPENAI_DATASET_STD,
        batch_size: int = 64,
        seed: int = 0,
        tokenizer: Union[str, Tokenizer, None] = None,
        context_length: Optional[int] = None,
        num_workers: int = 0,
        ood_in_val: bool = False,
    ) -> None:
        super().__init__(
            image_size,
            transform,
            train_transform,
            mean,
            std,
            batch_size=batch_size,
            num_workers=num_workers,
            seed=seed,
            tokenizer=tokenizer,
            context_length=context_length,
            ood_in_val=ood_in_val,
            template=template,
        )
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise FileNotFoundError(f"`root`: no folder at {str(self.root)!r}.")
        self.folders = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not self.folders:
            raise FileNotFoundError(f"`root`: {str(self.root)!r} has no class subfolders (root/<class>/<image>).")
        self.held_out = tuple(held_out) if not isinstance(held_out, str) else (held_out,)
        unknown = [name for name in self.held_out if name not in self.folders]
        if unknown:
            raise ValueError(f"`held_out` names {unknown} are not class folders of {str(self.root)!r}: {self.folders}.")
        if len(set(self.held_out)) == len(self.folders):
            raise ValueError("`held_out` cannot hold every class: at least one must stay in-distribution.")
        self.val_fraction = _check_fraction(val_fraction, "val_fraction")
        self.class_names = [name.replace("_", " ") for name in self.folders]

    def _build(self) -> None:
        paths, labels = [], []
        for label, folder in enumerate(self.folders):
            files = sorted(
                p for p in (self.root / folder).rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
            )
            paths.extend(str(p) for p in files)
            labels.extend([label] * len(files))
        if not paths:
            raise FileNotFoundError(f"`root`: no images ({', '.join(IMAGE_EXTENSIONS)}) under {str(self.root)!r}.")
        captions = [self.template.format(self.class_names[k]) for k in labels]
        held = {self.folders.index(name) for name in self.held_out}
        inside = [i for i, k in enumerate(labels) if k not in held]
        train_pos, val_pos = stratified_split([labels[i] for i in inside], self.val_fraction, self.seed)
        train_rows, val_rows = [inside[p] for p in train_pos], [inside[p] for p in val_pos]
        ood_rows = [i for i, k in enumerate(labels) if k in held]
        train_load, eval_load = self._loads()
        self._sources = paths
        self.train_set = self._dataset(train_rows, paths, captions, labels, train_load)
        self.train_eval_set = self._dataset(train_rows, paths, captions, labels, eval_load)
        self.val_set = self._dataset(val_rows, paths, captions, labels, eval_load)
        self.ood_set = self._dataset(ood_rows, paths, captions, labels, eval_load)
        if self.train_set is None:
            raise ValueError(f"{str(self.root)!r}: no training images left; lower `val_fraction`.")
