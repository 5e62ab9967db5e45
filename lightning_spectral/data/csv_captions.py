"""Image-caption pairs listed in a CSV / TSV file, in open_clip's training format."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from lightning_spectral._checks import check_fraction
from lightning_spectral.data.datamodule import _FileImageText
from lightning_spectral.data.datasets import Tokenizer
from lightning_spectral.data.transforms import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD


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
        img_key: column name of the image path.
        caption_key: column name of the caption.
        sep: field separator (open_clip's default is a tab; ``","`` for comma-separated files).
        val_csv: optional validation file with the same columns.
        ood_csv: optional out-of-distribution file with the same columns.
        val_fraction: without ``val_csv``, share of the rows used for validation.
        label_key: optional integer class column.
        image_root: folder relative paths are read against.
        image_size: without a ``transform``: resize the shorter side and centre crop to this size.
        transform: ``PIL image -> tensor``; pass open_clip's ``preprocess_val`` to match a model exactly.
        train_transform: the same for the training split (default ``transform``), e.g. ``preprocess_train``.
        mean: without a ``transform``: per-channel mean of the normalisation (open_clip's OPENAI statistics).
        std: without a ``transform``: per-channel standard deviation of the normalisation.
        batch_size: loader batch size.
        seed: the split and the training shuffle.
        tokenizer: an open_clip model name, a callable ``tokenizer(list[str])`` or ``None`` (as in
            [`DigitsImageText`][lightning_spectral.data.DigitsImageText]).
        context_length: with a model-name tokenizer, its context length.
        num_workers: DataLoader workers.
        ood_in_val: ``val_dataloader`` returns ``[val, ood]``.
        class_names: optional class names (position = label) for ``prompts``.
        template: caption of a class in ``prompts``.

    Raises:
        FileNotFoundError: a missing CSV or image.
        ValueError: missing columns (naming the columns found), non-integer labels, bad arguments.

    Examples:
        >>> import pathlib, tempfile
        >>> from PIL import Image
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> for i in range(10):
        ...     Image.new("RGB", (12, 10)).save(root / f"{i}.png")
        >>> rows = "".join(f"{i}.png\\tpicture {i}\\n" for i in range(10))
        >>> _ = (root / "train.csv").write_text("filepath\\ttitle\\n" + rows)
        >>> data = CsvImageText(root / "train.csv", val_fraction=0.2, image_size=8, batch_size=4)
        >>> data.setup()
        >>> len(data.train_set), len(data.val_set), next(iter(data.train_dataloader()))["image"].shape
        (8, 2, torch.Size([4, 3, 8, 8]))
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
        self.val_fraction = check_fraction(val_fraction, "val_fraction", low_open=False, high_closed=False)
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
