"""Embedding files (``.npy``, ``.pt``, ``.safetensors``) read without unpickling, memory-mapped, row by row.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch import Tensor

from lightning_spectral._checks import check_dense, check_positive_int
from lightning_spectral.io.paths import existing_file
from lightning_spectral.io.safe_load import torch_load_safe

FEATURE_SUFFIXES = (".npy", ".pt", ".safetensors")


def native_byte_order(array: np.ndarray) -> np.ndarray:
    """``array`` in the machine's byte order: itself if it is already, else a converted copy (torch reads native
    byte order only, and ``numpy.save`` keeps a big-endian array big-endian)."""
    return array.astype(array.dtype.newbyteorder("="), copy=False)


def index_path(path: Path) -> Path:
    return path.with_name(path.stem + ".index.npy")


def check_table(features: Any, name: str, header_only: bool = False) -> None:
    """A 2-D (N, d >= 1) floating table, dense; ``header_only``: a meta tensor standing for a file's header."""
    if isinstance(features, Tensor) and not (header_only and features.device.type == "meta"):
        check_dense(features, name)
    if len(features.shape) != 2:
        raise ValueError(
            f"`{name}` must be a 2-D (N, d) table of features, got shape {tuple(features.shape)}; "
            "flatten per-sample dimensions first."
        )
    if features.shape[1] == 0:
        raise ValueError(f"`{name}` has no columns (shape {tuple(features.shape)}); each row needs d >= 1 features.")
    floating = (
        features.is_floating_point() if isinstance(features, Tensor) else np.issubdtype(features.dtype, np.floating)
    )
    if not floating:
        raise ValueError(f"`{name}` must hold floating-point features, got dtype {features.dtype}.")


def check_index(index: Any, rows: int, name: str) -> Tensor:
    """``index`` (a tensor, an array or a list) as ``rows`` distinct integer dataset indices >= 0, a long tensor.

    Raises:
        ValueError: not integers (floats, strings, objects), not one per row, negative or repeated entries.
    """
    if not isinstance(index, Tensor):
        try:
            array = np.asarray(index)
        except ValueError:  # ragged
            array = np.asarray([], dtype=object)
        if array.dtype.kind not in "iu":
            raise ValueError(f"`{name}` must hold integer dataset indices, got {_describe_values(array)}.")
        index = torch.from_numpy(np.ascontiguousarray(native_byte_order(array)).astype(np.int64))
    index = check_dense(index, name).detach().cpu()
    if index.is_floating_point() or index.dtype == torch.bool or index.is_complex():
        raise ValueError(f"`{name}` must hold integer dataset indices, got dtype {index.dtype}.")
    index = index.long().flatten()
    if index.numel() != rows:
        raise ValueError(f"`{name}` has {index.numel()} entries but the features have {rows} rows; one per row.")
    if rows and int(index.min()) < 0:
        raise ValueError(f"`{name}` must hold dataset indices >= 0, got {int(index.min())}.")
    if torch.unique(index).numel() != rows:
        raise ValueError(f"`{name}` holds repeated dataset indices; each sample must appear once.")
    return index


def _describe_values(array: np.ndarray) -> str:
    if array.dtype.kind in "US":
        return f"strings such as {array.flatten()[:3].tolist()}"
    return "objects or ragged rows" if array.dtype == object else f"dtype {array.dtype}"


_SAFETENSORS_FLOATS = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}


class EmbeddingFile:
    """A (N, d) floating table in a ``.npy`` / ``.pt`` / ``.safetensors`` file, read chunk by chunk.

    Opening checks the suffix, the shape (2-D, N >= 1) and the dtype (floating) without reading the rows;
    [`chunks`][lightning_spectral.io.EmbeddingFile.chunks] reads row ranges and refuses NaN / Inf naming the file and
    the rows.

    Args:
        path: the file.
        name: how the file is named in error messages (the command-line argument, e.g. ``"FILE"``).

    Attributes:
        n: number of rows.
        d: width.
        dtype: the stored dtype (``numpy`` or ``torch``).
        index: the dataset index of the rows (``None``: row ``i`` is sample ``i``).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: unsupported suffix, pickled objects, not a floating (N, d) table, no rows, a bad index.

    Examples:
        >>> import tempfile, numpy as np
        >>> path = tempfile.mkdtemp() + "/emb.npy"
        >>> np.save(path, np.arange(10.0).reshape(5, 2))
        >>> table = EmbeddingFile(path)
        >>> table.n, table.d
        (5, 2)
        >>> [(tuple(x.shape), ids.tolist()) for x, ids in table.chunks(batch_size=2)]
        [((2, 2), [0, 1]), ((2, 2), [2, 3]), ((1, 2), [4])]
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], name: str = "FILE") -> None:
        self.name = name
        self.path: Path = existing_file(path, name, FEATURE_SUFFIXES)
        self._handle: Any = None  # keeps the safetensors memory map open
        self.index: Optional[Tensor] = None
        suffix = self.path.suffix.lower()
        opener = {".npy": self._open_npy, ".pt": self._open_pt, ".safetensors": self._open_safetensors}[suffix]
        probe, index, self._read = opener()
        self.memmap: Optional[np.memmap] = probe if isinstance(probe, np.memmap) else None  # .npy: the mapped table
        try:
            check_table(probe, "features", header_only=suffix == ".safetensors")
            if index is not None:
                self.index = check_index(index, int(probe.shape[0]), "index")
        except (ValueError, TypeError) as error:  # a sparse table, bad indices: named with the file
            raise ValueError(f"`{name}` ({self.where}): {error}") from None
        self.n, self.d = int(probe.shape[0]), int(probe.shape[1])
        self.dtype = probe.dtype
        if self.n == 0:
            raise ValueError(f"`{name}`: {self.where} holds no rows (shape {tuple(probe.shape)}).")

    @property
    def where(self) -> str:
        return repr(str(self.path))

    # ---- openers: (shape/dtype probe, optional index, row reader) -------------------------------------------
    def _open_npy(self) -> tuple[Any, Any, Callable[[int, int], Tensor]]:
        try:
            data = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise ValueError(f"`{self.name}`: {self.where} is not a plain numeric .npy array ({error}).") from None
        if not isinstance(data, np.ndarray):  # numpy opens any zip archive as an .npz: a torch.save file, say
            raise ValueError(
                f"`{self.name}`: {self.where} is a zip archive (a `torch.save` file or an .npz), not a .npy array; "
                "rename a torch file to .pt, or write the array with `numpy.save`."
            )
        index_file = index_path(self.path)
        index = None
        if index_file.is_file():
            try:
                index = native_byte_order(np.load(index_file, allow_pickle=False))
            except (ValueError, OSError, EOFError, AttributeError) as error:
                raise ValueError(
                    f"`{self.name}`: the dataset index {str(index_file)!r} beside {self.where} is not a readable .npy "
                    f"array of integers ({error}); write it again (`save_features(..., index=...)`) or delete it."
                ) from None

        def read(start: int, stop: int) -> Tensor:
            rows = data[start:stop]
            return torch.from_numpy(np.array(rows, dtype=rows.dtype.newbyteorder("=")))

        return data, index, read

    def _open_pt(self) -> tuple[Any, Any, Callable[[int, int], Tensor]]:
        content = torch_load_safe(self.path, self.name, mmap=True)
        if isinstance(content, dict) and isinstance(content.get("features"), Tensor):
            table, index = content["features"], content.get("index")
        elif isinstance(content, Tensor):
            table, index = content, None
        else:
            found = sorted(map(str, content)) if isinstance(content, dict) else type(content).__name__
            raise ValueError(
                f"`{self.name}`: {self.where} must hold a tensor or a dict with a 'features' tensor, found {found}; "
                "write it with `lightning_spectral.encoders.save_features`."
            )
        return table, index, lambda start, stop: table[start:stop].clone()

    def _open_safetensors(self) -> tuple[Any, Any, Callable[[int, int], Tensor]]:
        from safetensors import SafetensorError, safe_open

        try:
            self._handle = safe_open(str(self.path), framework="pt", device="cpu")
            keys = list(self._handle.keys())
        except (SafetensorError, OSError) as error:
            raise ValueError(f"`{self.name}`: {self.where} is not a readable safetensors file ({error}).") from None
        key = "features" if "features" in keys else (keys[0] if len(keys) == 1 else None)
        if key is None:
            raise ValueError(
                f"`{self.name}`: {self.where} has keys {sorted(keys)} but no 'features' key; name the (N, d) table "
                "'features' (as `lightning_spectral.encoders.save_features` does)."
            )
        table = self._handle.get_slice(key)
        dtype = table.get_dtype()
        if dtype not in _SAFETENSORS_FLOATS:
            raise ValueError(
                f"`{self.name}` ({self.where}) must hold floating-point features, got dtype {dtype} for key {key!r}."
            )
        probe = torch.empty(table.get_shape(), dtype=_SAFETENSORS_FLOATS[dtype], device="meta")
        index = self._handle.get_tensor("index") if key == "features" and "index" in keys else None
        return probe, index, lambda start, stop: table[start:stop]

    # ---- reading -----------------------------------------------------------------------------------------------
    def ids(self, start: int, stop: int) -> Tensor:
        """Sample ids of rows ``start:stop``: the row numbers, or the stored dataset index."""
        rows = torch.arange(start, stop)
        return rows if self.index is None else self.index[start:stop]

    def read(self, start: int, stop: int, check_finite: bool = True) -> Tensor:
        """Rows ``start:stop`` as a CPU tensor in the stored dtype.

        Raises:
            ValueError: with ``check_finite``, NaN or Inf in those rows (the message names the file and rows).
        """
        chunk = self._read(start, stop)
        if not check_finite:
            return chunk
        finite = torch.isfinite(chunk).all(dim=1)
        if not bool(finite.all()):
            bad = (torch.nonzero(~finite).flatten() + start).tolist()
            shown = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            raise ValueError(
                f"`{self.name}` ({self.where}) holds NaN or Inf in rows {shown} (chunk of rows {start}-{stop - 1}); "
                "clean or drop them."
            )
        return chunk

    def chunks(
        self,
        batch_size: int = 4096,
        rows: Optional[range] = None,
        progress: bool = False,
        desc: Optional[str] = None,
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Yield ``(features (b, d), ids (b,))`` over ``rows`` (default all), ``batch_size`` rows at a time.

        Args:
            batch_size: rows per chunk (memory is one chunk).
            rows: a contiguous range of rows, e.g. this rank's [`shard_rows`][lightning_spectral.cli.reader.shard_rows].
            progress: show a tqdm bar on stderr.
            desc: the bar's label.
        """
        rows = range(self.n) if rows is None else rows
        batch_size = check_positive_int(batch_size, "--batch-size")
        starts = range(rows.start, rows.stop, batch_size)
        if progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc=desc or f"{self.name} {self.path.name}", unit="chunk", leave=False)
        for start in starts:
            stop = min(start + batch_size, rows.stop)
            yield self.read(start, stop), self.ids(start, stop)

    def describe(self) -> dict[str, Any]:
        """``{"path", "n", "d", "dtype", "indexed"}`` for the JSON output."""
        dtype = str(self.dtype).replace("torch.", "")
        return {"path": str(self.path), "n": self.n, "d": self.d, "dtype": dtype, "indexed": self.index is not None}

    def __repr__(self) -> str:
        return f"EmbeddingFile({str(self.path)!r}, n={self.n}, d={self.d}, dtype={self.describe()['dtype']})"
