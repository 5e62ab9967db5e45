"""Reading embedding and weight files safely (never unpickling arbitrary objects), and writing files whole.

[`EmbeddingFile`][lightning_spectral.files.EmbeddingFile] opens a (N, d) floating table in a ``.npy``
(``numpy.load(mmap_mode="r",
allow_pickle=False)``), ``.pt`` (``torch.load(mmap=True, weights_only=True)``) or ``.safetensors``
(``safetensors.safe_open``, row ranges read with ``get_slice``) file and reads it in row chunks. The conventions
are those of [`save_features`][lightning_spectral.encoders.save_features]: in a ``.pt`` either a tensor or a dict with a
``"features"`` tensor, in a ``.safetensors`` the key ``"features"`` (or the only key), and an optional dataset
index (``"index"``, or ``<stem>.index.npy`` beside a ``.npy``): row ``i`` is sample ``index[i]``. Both
[`PrecomputedFeatures`][lightning_spectral.encoders.PrecomputedFeatures] and the command line read files through it.

[`written`][lightning_spectral.files.written] is how the library writes every file (the command line's JSON, scores and
pictures,
[`save_features`][lightning_spectral.encoders.save_features], the recipes' summaries): into a temporary file beside the
target, renamed over it only once complete, so a full disk or a crash leaves the old file or none, never a
truncated one, and the error names the file.
"""

from __future__ import annotations

import errno
import os
import pickle
import secrets
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch import Tensor

from lightning_spectral._checks import check_dense, check_positive_int

PathLike = Union[str, "os.PathLike[str]"]
FEATURE_SUFFIXES = (".npy", ".pt", ".safetensors")


def as_path(path: Any, argument: str) -> Path:
    """``path`` as a ``Path``, or a ``TypeError`` naming ``argument`` when it is no path at all (None, a number)."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise TypeError(
            f"`{argument}` must be a file path (a str or pathlib.Path), got {type(path).__name__} {path!r}."
        )
    return Path(os.fspath(path)).expanduser()


def existing_file(path: PathLike, argument: str, suffixes: Sequence[str]) -> Path:
    path = as_path(path, argument)
    if not path.is_file():
        raise FileNotFoundError(f"`{argument}`: no file at {str(path)!r}; pass the path of an existing local file.")
    if path.suffix.lower() not in suffixes:
        raise ValueError(
            f"`{argument}`: {str(path)!r} has suffix {path.suffix!r}; supported: {', '.join(suffixes)}. "
            "Convert the file to one of these formats."
        )
    return path


def unpickler_reason(error: BaseException) -> str:
    """The informative part of torch's ``weights_only`` error: what the unpickler met (a global, an operand).

    Examples:
        >>> unpickler_reason(Exception("Weights only load failed. ...\\n WeightsUnpickler error: Unsupported "
        ...     "global: GLOBAL argparse.Namespace was not an allowed global by default. Please use ..."))
        'Unsupported global: GLOBAL argparse.Namespace was not an allowed global by default'
    """
    text = str(error)
    _, marker, after = text.partition("WeightsUnpickler error:")
    lines = [line.strip() for line in (after if marker else text).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[0].split(". ")[0].rstrip(".")


def torch_load_safe(path: Path, argument: str, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)``: tensors and plain containers only, never arbitrary objects.

    ``mmap=True`` maps the tensors' storage from the file instead of reading it (zip-format files only).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        reason = unpickler_reason(error)
        if "global" not in reason.lower():  # not a refused object: the bytes are no pickle torch can read
            raise ValueError(
                f"`{argument}`: {str(path)!r} is not a readable PyTorch file ({reason}); re-save it with `torch.save` "
                "(zip format)."
            ) from None
        raise ValueError(
            f"`{argument}`: refused to load {str(path)!r}: it holds pickled objects other than tensors and plain "
            f"containers, and only `torch.load(weights_only=True)` is used ({reason}). If you trust the file, "
            "re-save just the tensors, e.g. `torch.save(model.state_dict(), 'weights.pt')` or "
            "`safetensors.torch.save_file(state_dict, 'weights.safetensors')`."
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        how = "memory-mappable " if mmap else ""
        raise ValueError(
            f"`{argument}`: {str(path)!r} is not a readable, {how}PyTorch file ({error}); re-save it with "
            "`torch.save` (zip format)."
        ) from None


class WriteError(OSError):
    """A file could not be written; nothing partial is left behind. The message names the file and the fix."""


@contextmanager
def written(path: PathLike, argument: str = "path") -> Iterator[Path]:
    """Write a file whole: yields a temporary path beside ``path`` (same folder, same suffix) to write to, then
    flushes it to disk and renames it over ``path`` (atomic on POSIX and Windows). If the block or the flush fails
    the temporary file is removed and ``path`` is left as it was.

    Args:
        path: the file to write; missing parent folders are created.
        argument: how ``path`` is named in error messages (e.g. ``"--output"``).

    Raises:
        WriteError: an ``OSError`` while writing (a full disk, a read-only folder, a quota), naming ``argument``,
            the file and the fix; other errors of the block are re-raised as they are.

    Examples:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "out.txt"
        >>> with written(target) as temporary:
        ...     _ = temporary.write_text("hello")
        >>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
        ('hello', ['out.txt'])
    """
    path = Path(os.fspath(path)).expanduser()
    temporary = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.partial{path.suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield temporary
        with open(temporary, "rb+") as handle:  # on the disk before the rename: a crash cannot leave it empty
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except WriteError:  # a nested write (e.g. an index beside its features) already named its file
        _remove(temporary)
        raise
    except OSError as error:
        _remove(temporary)
        raise WriteError(_write_failure(path, argument, error)) from error
    except BaseException:
        _remove(temporary)
        raise


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:  # never created (no folder, a file in the way): nothing to remove
        pass


def _write_failure(path: Path, argument: str, error: OSError) -> str:
    reason = error.strerror or str(error) or type(error).__name__
    if error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):  # EDQUOT: not on Windows
        fix = "free some space on that disk or write to another one"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "choose a folder you can write to"
    elif error.errno in (errno.EISDIR, errno.ENOTDIR):
        fix = "give the path of a file, not of a folder"
    else:
        fix = "check the path and the disk"
    return f"`{argument}`: could not write {str(path)!r} ({reason}); nothing was written there; {fix}."


def check_writable(path: PathLike, argument: str, folder: bool = False) -> Path:
    """``path`` if a file (``folder=False``) or the files of a folder (``folder=True``) can be created there: its
    nearest existing ancestor is a writable folder. Called before any work, so that a typo fails at once.

    Raises:
        WriteError: naming ``argument``, the path and the fix.

    Examples:
        >>> import tempfile
        >>> check_writable(Path(tempfile.mkdtemp()) / "new" / "out.json", "--output").name
        'out.json'
    """
    path = Path(os.fspath(path)).expanduser()
    if not folder and path.is_dir():
        raise WriteError(f"`{argument}`: {str(path)!r} is a folder; give the path of a file.")
    if folder and path.exists() and not path.is_dir():
        raise WriteError(f"`{argument}`: {str(path)!r} is a file; give the path of a folder.")
    ancestor = path if folder else path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise WriteError(f"`{argument}`: cannot create {str(path)!r}: {str(ancestor)!r} is not a folder.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise WriteError(
            f"`{argument}`: cannot write {str(path)!r}: the folder {str(ancestor)!r} is not writable; choose a "
            "folder you can write to."
        )
    return path


class CheckpointError(ValueError):
    """A checkpoint to resume from is missing or incomplete. The message names the file and the fix."""


#: ``ckpt_path`` values Lightning resolves itself (not file names).
LIGHTNING_CKPT_ALIASES = ("last", "best", "hpc", "registry")


def check_checkpoint(path: PathLike, argument: str = "--ckpt_path") -> None:
    """Check that ``path`` is a whole checkpoint file, without loading it: a zip archive whose central directory,
    written last, is there (or a legacy pickle). Lightning's aliases (``"last"``, ``"best"``, ...) and URLs pass
    unchecked.

    A checkpoint cut off while it was written or copied (a full disk, a killed job, an interrupted transfer)
    otherwise fails deep inside ``Trainer.fit`` with torch's ``PytorchStreamReader failed reading zip archive``.

    Raises:
        CheckpointError: no file at ``path``, or an incomplete one; the message names ``argument``, the file, its
            size and the fix.

    Examples:
        >>> import tempfile, torch
        >>> path = Path(tempfile.mkdtemp()) / "last.ckpt"
        >>> torch.save({"state_dict": {}}, path)
        >>> check_checkpoint(path)
        >>> _ = path.write_bytes(path.read_bytes()[:100])   # cut off
        >>> check_checkpoint(path)
        Traceback (most recent call last):
        ...
        lightning_spectral.files.CheckpointError: `--ckpt_path`: ... is not a complete checkpoint (100 bytes: ...
    """
    if str(path) in LIGHTNING_CKPT_ALIASES or "://" in str(path):
        return
    path = Path(os.fspath(path)).expanduser()
    if not path.is_file():
        raise CheckpointError(
            f"`{argument}`: no checkpoint file at {str(path)!r}; pass a checkpoint the run wrote (its "
            "`checkpoints/` folder, e.g. `.../version_0/checkpoints/last.ckpt`)."
        )
    if zipfile.is_zipfile(path):
        return
    with open(path, "rb") as handle:
        head = handle.read(2)
    if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:  # a pickle: torch.save's legacy format
        return
    raise CheckpointError(
        f"`{argument}`: {str(path)!r} is not a complete checkpoint ({path.stat().st_size} bytes: the end of the "
        "archive is missing, so it was cut off while being written or copied); resume from another checkpoint of "
        "the run (e.g. the previous epoch's) or copy the file again."
    )


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
    [`chunks`][lightning_spectral.files.EmbeddingFile.chunks] reads row ranges and refuses NaN / Inf naming the file and
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
