"""Reference features precomputed once: a (N, d) table keyed by dataset index, written and looked up."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from lightning_spectral._checks import all_finite, as_tensor, check_dense
from lightning_spectral.io.embedding_file import (
    FEATURE_SUFFIXES,
    EmbeddingFile,
    check_index,
    check_table,
    index_path,
    native_byte_order,
)
from lightning_spectral.io.paths import PathLike, as_path
from lightning_spectral.io.writing import written


def _lookup_ids(ids: Any) -> Tensor:
    """Dataset indices to look up (an int, a sequence, an array or a tensor of integers) as a 1-D long tensor.

    Raises:
        ValueError: anything but integers (floats, bools, strings).
    """
    if isinstance(ids, Tensor):
        check_dense(ids, "ids", "PrecomputedFeatures")
        kind = "i" if not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool) else "f"
        shown = f"dtype {ids.dtype}"
    else:
        try:
            array = np.asarray(ids)
        except ValueError:  # ragged
            array = np.asarray([], dtype=object)
        kind, shown = array.dtype.kind, f"{ids!r}"[:80]
        ids = None if kind not in "iu" else torch.from_numpy(np.ascontiguousarray(native_byte_order(array)))
    if kind not in "iu":
        raise ValueError(f"PrecomputedFeatures: dataset indices (`ids`) must be integers, got {shown}.")
    return ids.detach().cpu().long().flatten()  # type: ignore[union-attr]


def save_features(path: PathLike, features: Union[Tensor, np.ndarray], index: Union[Tensor, np.ndarray, None] = None):
    """Write reference features (N, d) for [`PrecomputedFeatures`][lightning_spectral.encoders.PrecomputedFeatures],
    with optional dataset indices.

    ``.npy``: the array itself (read memory-mapped), the index in a sibling ``<stem>.index.npy``; ``.pt``:
    ``{"features": tensor, "index": tensor}`` via ``torch.save``; ``.safetensors``: keys ``features`` and
    ``index``. Row ``i`` holds the features of dataset sample ``index[i]`` (``i`` itself without an index).
    Each file is written whole or not at all ([`written`][lightning_spectral.io.written]).

    Raises:
        ValueError: unsupported suffix, features not a finite floating (N, d) array, or an index that is not
            N distinct integers >= 0.
        lightning_spectral.io.WriteError: the file could not be written (a full disk, a read-only folder);
            the message names it, and no partial file is left.

    Examples:
        >>> import tempfile, torch
        >>> path = tempfile.mkdtemp() + "/ref.safetensors"
        >>> save_features(path, torch.eye(3), index=torch.tensor([10, 20, 30]))
        >>> PrecomputedFeatures(path)[[30, 10]]
        tensor([[0., 0., 1.],
                [1., 0., 0.]])
    """
    path = as_path(path, "path")
    if path.suffix.lower() not in FEATURE_SUFFIXES:
        raise ValueError(f"`path`: suffix {path.suffix!r} is not supported; use one of {', '.join(FEATURE_SUFFIXES)}.")
    if isinstance(features, Tensor):
        check_dense(features, "features")
    feats = as_tensor(features, "features")
    if not isinstance(feats, Tensor):
        raise TypeError(f"`features` must be a (N, d) tensor or array, got {type(features).__name__}.")
    feats = feats.detach().cpu()
    check_table(feats, "features")
    if not all_finite(feats):
        raise ValueError("`features` contains NaN or Inf; clean them before saving.")
    idx = None if index is None else check_index(index, feats.shape[0], "index")
    suffix = path.suffix.lower()
    table = {"features": feats.contiguous(), **({} if idx is None else {"index": idx})}
    if suffix == ".npy":
        with written(path, "path") as temporary, open(temporary, "wb") as handle:
            np.save(handle, table["features"].numpy(), allow_pickle=False)
            if idx is not None:  # the index renamed into place before the features, both whole
                with written(index_path(path), "path") as index_file, open(index_file, "wb") as index_handle:
                    np.save(index_handle, idx.numpy(), allow_pickle=False)
        if idx is None and index_path(path).exists():
            index_path(path).unlink()  # a stale index of an earlier file would silently remap rows
    elif suffix == ".pt":
        with written(path, "path") as temporary:
            torch.save(table, temporary)
    else:
        from safetensors.torch import save_file

        with written(path, "path") as temporary:
            save_file(table, str(temporary))


class PrecomputedFeatures:
    """A table of reference features (N, d) looked up by dataset index, from a file or a tensor.

    Files: ``.npy`` (memory-mapped, ``allow_pickle=False``; an optional ``<stem>.index.npy`` beside it),
    ``.pt`` (``torch.load(weights_only=True)``: a tensor, or a dict with ``"features"`` and optional
    ``"index"``), ``.safetensors`` (key ``"features"``, optional ``"index"``). Without an index row ``i`` is
    dataset sample ``i``; with one, row ``i`` is sample ``index[i]`` (e.g. features written in the order of a
    shuffled or distributed loader). Lookups return float32 (float64 stays float64). Finiteness is checked at
    load for in-memory tables and per lookup for memory-mapped ones.

    Args:
        source: a path, a tensor or a NumPy array (N, d).
        index: dataset indices of the rows (N distinct integers >= 0); overrides an index stored in the file.

    Raises:
        FileNotFoundError: no file at ``source``.
        ValueError: wrong suffix, not a floating (N, d) table, NaN / Inf, a bad index, a refused file.
        KeyError: (on lookup) a dataset index with no row.

    Examples:
        >>> import torch
        >>> table = PrecomputedFeatures(torch.arange(6.0).reshape(3, 2), index=[7, 3, 5])
        >>> table.shape, len(table)  # dataset indices 0..7 spanned, 3 rows stored
        ((8, 2), 3)
        >>> table[torch.tensor([3, 7])]
        tensor([[2., 3.],
                [0., 1.]])
    """

    def __init__(
        self, source: Union[PathLike, Tensor, np.ndarray], index: Union[Tensor, np.ndarray, Sequence[int], None] = None
    ) -> None:
        self.path: Optional[Path] = None
        stored_index: Any = None
        if isinstance(source, (str, os.PathLike)):
            file = EmbeddingFile(source, "source")  # checks suffix, shape and dtype; never unpickles
            self.path, stored_index = file.path, file.index
            data = file.memmap if file.memmap is not None else file.read(0, file.n, check_finite=False)
        elif isinstance(source, (Tensor, np.ndarray)):
            data = check_dense(source, "source").detach().cpu() if isinstance(source, Tensor) else source
        else:
            raise ValueError(
                f"`source` must be a features file path (.npy / .pt / .safetensors), a tensor or an array, got "
                f"{type(source).__name__}."
            )
        check_table(data, "source" if self.path is None else f"features in {str(self.path)!r}")
        self.memory_mapped = isinstance(data, np.memmap)
        if not self.memory_mapped:
            if isinstance(data, np.ndarray):
                data = np.ascontiguousarray(native_byte_order(data))
            data = torch.as_tensor(data)
            if not all_finite(data):
                bad = int((~torch.isfinite(data)).any(dim=1).sum())
                raise ValueError(
                    f"`source`: the features contain NaN or Inf in {bad} of {data.shape[0]} rows; clean them."
                )
        self._data = data
        rows = int(data.shape[0])
        index = stored_index if index is None else index
        self.index: Optional[Tensor] = None
        if index is not None:
            self.index = check_index(index, rows, "index")
            self._sorted, self._order = torch.sort(self.index)

    @property
    def shape(self) -> tuple[int, int]:
        """(N, d): N is the span of dataset indices, ``max(index) + 1`` with an index, else the number of rows.

        Tables indexed by dataset index (``ReferenceEmbedding``) bound-check ids by ``shape[0]``; ids inside the
        span but without a row raise ``KeyError`` on lookup. ``len(table)`` is the number of stored rows.
        """
        span = len(self) if self.index is None or len(self) == 0 else int(self._sorted[-1]) + 1
        return (span, int(self._data.shape[1]))

    def __len__(self) -> int:
        return int(self._data.shape[0])

    def rows(self, ids: Union[int, Sequence[int], Tensor, np.ndarray]) -> Tensor:
        """The stored row positions of dataset indices ``ids`` (long, 1-D).

        Raises:
            KeyError: an index with no stored row.
        """
        ids_t = _lookup_ids(ids)
        if self.index is None:
            rows = ids_t
            bad = (rows < 0) | (rows >= len(self))
        else:
            position = torch.searchsorted(self._sorted, ids_t).clamp(max=max(len(self) - 1, 0))
            bad = self._sorted[position] != ids_t if len(self) else torch.ones_like(ids_t, dtype=torch.bool)
            rows = self._order[position]
        if bool(bad.any()):
            missing = ids_t[bad][:5].tolist()
            where = f"rows 0..{len(self) - 1}" if self.index is None else "the stored index"
            raise KeyError(
                f"PrecomputedFeatures: dataset indices {missing} have no features ({where}); the features must cover "
                "every sample the batches index."
            )
        return rows

    def __getitem__(self, ids: Union[int, Sequence[int], Tensor, np.ndarray]) -> Tensor:
        """Features of dataset indices ``ids``: (len(ids), d), or (d,) for a single integer."""
        single = isinstance(ids, (int, np.integer)) or (isinstance(ids, Tensor) and ids.ndim == 0)
        rows = self.rows(ids)
        if self.memory_mapped:
            # a copy of the looked-up rows only, in the machine's byte order (a .npy may be big-endian)
            data = torch.from_numpy(np.array(self._data[rows.numpy()], dtype=self._data.dtype.newbyteorder("=")))
            if not all_finite(data):
                raise ValueError(
                    f"PrecomputedFeatures: the features of {str(self.path)!r} hold NaN or Inf at rows "
                    f"{rows[~torch.isfinite(data).all(dim=1)][:5].tolist()}; clean the file."
                )
        else:
            data = self._data[rows]
        data = data if data.dtype in (torch.float32, torch.float64) else data.float()
        return data[0] if single else data

    def __repr__(self) -> str:
        source = str(self.path) if self.path is not None else "tensor"
        return f"PrecomputedFeatures({source!r}, shape={self.shape}, indexed={self.index is not None})"
