"""A folder of class subfolders (``root/<class>/<image>``) as captioned images, some classes held out."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

from torch import Tensor
from torchvision.datasets.folder import find_classes, make_dataset

from lightning_spectral._checks import check_fraction
from lightning_spectral.data.datamodule import _FileImageText
from lightning_spectral.data.datasets import Tokenizer
from lightning_spectral.data.sampling import stratified_split
from lightning_spectral.data.transforms import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class ImageFolderText(_FileImageText):
    """A folder of class subfolders (``root/<class>/<image>``) as captioned images.

    Classes are the subfolder names in sorted order (label = position); the caption of an image of class ``c``
    is ``template.format(c)`` with underscores as spaces ("a photo of a golden retriever"). Classes in
    ``held_out`` form the out-of-distribution split; the others are split into train / val per class.
    ``index`` is the position in the list of all image files as ``torchvision.datasets.folder.make_dataset``
    walks them: classes sorted; within a class, folder by folder in sorted path order, files sorted by name.

    Args:
        root: the folder.
        template: caption of a class.
        held_out: class folder names held out as out-of-distribution.
        val_fraction: share of each in-distribution class used for validation.
        image_size: without a ``transform``: resize the shorter side and centre crop to this size.
        transform: ``PIL image -> tensor`` (as in [`CsvImageText`][lightning_spectral.data.CsvImageText]).
        train_transform: the same for the training split (default ``transform``).
        mean: without a ``transform``: per-channel mean of the normalisation.
        std: without a ``transform``: per-channel standard deviation of the normalisation.
        batch_size: loader batch size.
        seed: the split and the training shuffle.
        tokenizer: an open_clip model name, a callable ``tokenizer(list[str])`` or ``None``.
        context_length: with a model-name tokenizer, its context length.
        num_workers: DataLoader workers.
        ood_in_val: ``val_dataloader`` returns ``[val, ood]``.

    Raises:
        FileNotFoundError: ``root`` missing or without images in class subfolders.
        ValueError: unknown ``held_out`` classes, bad arguments.

    Examples:
        >>> import pathlib, tempfile
        >>> from PIL import Image
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> for name in ("cat", "golden_retriever", "zebra"):
        ...     (root / name).mkdir()
        ...     for i in range(3):
        ...         Image.new("RGB", (12, 10)).save(root / name / f"{i}.png")
        >>> data = ImageFolderText(root, held_out=["zebra"], val_fraction=0.34, image_size=8)
        >>> data.setup()
        >>> len(data.train_set), len(data.val_set), len(data.ood_set), data.prompts[1]
        (4, 2, 3, 'a photo of a golden retriever')
        >>> data.train_set[0]["image"].shape
        torch.Size([3, 8, 8])
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
        try:  # torchvision counts hidden folders (.ipynb_checkpoints) as classes: they are dropped here
            self.folders = [name for name in find_classes(self.root)[0] if not name.startswith(".")]
        except FileNotFoundError:
            self.folders = []
        if not self.folders:
            raise FileNotFoundError(f"`root`: {str(self.root)!r} has no class subfolders (root/<class>/<image>).")
        self.held_out = tuple(held_out) if not isinstance(held_out, str) else (held_out,)
        unknown = [name for name in self.held_out if name not in self.folders]
        if unknown:
            raise ValueError(f"`held_out` names {unknown} are not class folders of {str(self.root)!r}: {self.folders}.")
        if len(set(self.held_out)) == len(self.folders):
            raise ValueError("`held_out` cannot hold every class: at least one must stay in-distribution.")
        self.val_fraction = check_fraction(val_fraction, "val_fraction", low_open=False, high_closed=False)
        self.class_names = [name.replace("_", " ") for name in self.folders]

    def _build(self) -> None:
        classes = {name: label for label, name in enumerate(self.folders)}
        samples = make_dataset(self.root, classes, extensions=IMAGE_EXTENSIONS, allow_empty=True)
        paths, labels = [path for path, _ in samples], [label for _, label in samples]
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
