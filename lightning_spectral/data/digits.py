"""scikit-learn's handwritten digits (shipped with it: no download) as captioned images, some classes held out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_spectral._checks import check_fraction, check_normalisation, check_positive_int
from lightning_spectral.data.datamodule import _ImageTextDataModule
from lightning_spectral.data.datasets import Tokenizer
from lightning_spectral.data.sampling import stratified_split
from lightning_spectral.data.transforms import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD


class RenderDigit:
    """An 8x8 grey digit (values 0-16) as a (3, size, size) float image: bilinear upsampling to ``size``,
    values scaled to [0, 1], replicated to RGB; then ``(x - mean) / std`` if both are given, or
    ``transform(PIL image)`` if a transform is given (e.g. an open_clip preprocess, with its augmentations).

    Examples:
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
        mean: per-channel mean of the tensor normalisation; ``None`` (with ``std``) keeps [0, 1].
        std: per-channel standard deviation of the tensor normalisation.
        num_workers: DataLoader workers.
        ood_in_val: ``val_dataloader`` returns ``[val, ood]``.
        template: caption of class ``k``.
        caption_noise: the fraction of training captions replaced (seeded) by the caption of a random
            in-distribution digit, like weakly-matched web captions; labels and validation captions stay true.

    Raises:
        ValueError: ``held_out`` not distinct digits 0-9 or holding every digit, ``val_fraction`` /
            ``caption_noise`` outside [0, 1), and the other bad arguments, each named.
        TypeError: ``ood_in_val`` not a bool.

    Examples:
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
        self.caption_noise = check_fraction(caption_noise, "caption_noise", low_open=False, high_closed=False)
        self.image_size = check_positive_int(image_size, "image_size")
        held = tuple(held_out)
        digits_ok = all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= 9 for k in held)
        if not digits_ok or len(set(held)) != len(held):
            raise ValueError(f"`held_out` must be distinct digits 0-9, got {held_out!r}.")
        if len(held) >= self.n_classes:
            raise ValueError("`held_out` cannot hold every digit: at least one class must stay in-distribution.")
        self.held_out = tuple(sorted(held))
        self.in_distribution = tuple(k for k in range(self.n_classes) if k not in held)
        self.val_fraction = check_fraction(val_fraction, "val_fraction", low_open=False, high_closed=False)
        check_normalisation(mean, std)
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
