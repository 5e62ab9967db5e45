"""Whole-file writes: a temporary file beside the target, renamed over it, so a fault leaves no partial file.

Only a regular file (or a path where nothing is yet) is replaced that way. A symbolic link is followed: its
target is written (a temporary file beside the target, renamed over it), the link stays. A character device
(``/dev/null``, ``/dev/full``, a terminal) or a FIFO is written through, as a shell's ``>`` does: the bytes are
written to a temporary file first, then copied into it (a FIFO must have a reader: opening one without is refused
at once instead of waiting). A block device (a disk) or a socket is refused by name.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from lightning_spectral.io.paths import PathLike


class WriteError(OSError):
    """A file could not be written; nothing partial is left behind. The message names the file and the fix."""


def _kind(path: Path) -> Optional[str]:
    """What ``path`` (its links followed) is when it is neither a regular file, a folder nor absent: ``"device"``
    (a character device), ``"FIFO"``, ``"block device"`` or ``"socket"``; ``None`` otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # absent, a dangling link, a file in the way of a folder: the write itself says why
        return None
    if stat.S_ISCHR(mode):
        return "device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return None


def _refuse_kind(path: Path, argument: str, kind: Optional[str]) -> None:
    if kind in ("block device", "socket"):
        what = "a block device (a disk or a partition)" if kind == "block device" else "a socket"
        raise WriteError(
            f"`{argument}`: {str(path)!r} is {what}, not a file; nothing was written there; give the path of a "
            "regular file."
        )


@contextmanager
def written(path: PathLike, argument: str = "path") -> Iterator[Path]:
    """Write a file whole: yields a temporary path beside ``path`` (same folder, same suffix) to write to, then
    flushes it to disk and renames it over ``path`` (atomic on POSIX and Windows). If the block or the flush fails
    the temporary file is removed and ``path`` is left as it was.

    A symbolic link is followed (its target is replaced, the link kept); a character device (``/dev/null``) or a
    FIFO with a reader is written through; a block device or a socket is refused (module doc).

    Args:
        path: the file to write; missing parent folders are created.
        argument: how ``path`` is named in error messages (e.g. ``"--output"``).

    Raises:
        WriteError: an ``OSError`` while writing (a full disk, a read-only folder, a quota, ``/dev/full``, a FIFO
            without a reader), or a block device or socket at ``path``, naming ``argument``, the file and the fix;
            other errors of the block are re-raised as they are.

    Examples:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "out.txt"
        >>> with written(target) as temporary:
        ...     _ = temporary.write_text("hello")
        >>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
        ('hello', ['out.txt'])
    """
    path = Path(os.fspath(path)).expanduser()
    kind = _kind(path)
    _refuse_kind(path, argument, kind)
    if kind is not None:
        with _written_through(path, argument, kind) as temporary:
            yield temporary
        return
    target = _link_target(path, argument) if path.is_symlink() else path  # a link: its target, the link kept
    temporary = target.with_name(f".{target.stem}.{secrets.token_hex(4)}.partial{target.suffix}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        yield temporary
        with open(temporary, "rb+") as handle:  # on the disk before the rename: a crash cannot leave it empty
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except WriteError:  # a nested write (e.g. an index beside its features) already named its file
        _remove(temporary)
        raise
    except OSError as error:
        _remove(temporary)
        raise WriteError(_write_failure(path, argument, error)) from error
    except BaseException:
        _remove(temporary)
        raise


def _link_target(path: Path, argument: str) -> Path:
    """The file a symbolic link points to (through every link of the chain); a loop of links is refused."""
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # realpath stops where the links loop
        raise WriteError(
            f"`{argument}`: {str(path)!r} is a symbolic link that loops ({str(target)!r} points back into the "
            "chain); nothing was written there; give the path of a file or of a link to one."
        )
    return target


@contextmanager
def _written_through(path: Path, argument: str, kind: str) -> Iterator[Path]:
    """Yield a temporary file (in a private temporary folder, named as ``path``), then copy it into the device or
    FIFO ``path``: opened for writing, never replaced."""
    folder = tempfile.mkdtemp(prefix="lightning-spectral-")
    try:
        temporary = Path(folder) / path.name
        yield temporary
        try:
            blocking = os.O_NONBLOCK if kind == "FIFO" else 0  # a FIFO without a reader: ENXIO now, not a hang
            descriptor = os.open(path, os.O_WRONLY | blocking)
            if kind == "FIFO":
                os.set_blocking(descriptor, True)
            with open(descriptor, "wb") as out, open(temporary, "rb") as source:
                shutil.copyfileobj(source, out)
        except OSError as error:
            raise WriteError(_write_through_failure(path, argument, kind, error)) from error
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_through_failure(path: Path, argument: str, kind: str, error: OSError) -> str:
    reason = error.strerror or str(error) or type(error).__name__
    if kind == "FIFO" and error.errno == errno.ENXIO:
        return (
            f"`{argument}`: {str(path)!r} is a FIFO that no process is reading; start its reader first (e.g. "
            f"`cat {path} &`) or give the path of a regular file."
        )
    what = "a FIFO" if kind == "FIFO" else "a device"
    return f"`{argument}`: could not write to {str(path)!r}, {what} ({reason}); give the path of a regular file."


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
    nearest existing ancestor is a writable folder (for a file, a symbolic link's target's folder; a character
    device or a FIFO, written through, must itself be writable). Called before any work, so that a typo fails at
    once.

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
        what = "a file" if path.is_file() else "not a folder"
        raise WriteError(f"`{argument}`: {str(path)!r} is {what}; give the path of a folder.")
    kind = None if folder else _kind(path)
    _refuse_kind(path, argument, kind)
    if kind is not None:
        if not os.access(path, os.W_OK):
            raise WriteError(f"`{argument}`: cannot write to {str(path)!r}, a {kind}: permission denied; give the "
                             "path of a file you can write.")
        return path
    resolved = _link_target(path, argument) if not folder and path.is_symlink() else path
    ancestor = resolved if folder else resolved.parent
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
