"""Whole-file writes: a temporary file beside the target, renamed over it, so a fault leaves no partial file.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lightning_spectral.io.paths import PathLike


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
