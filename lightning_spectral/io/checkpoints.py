"""A checkpoint path checked before any work: a readable, complete Lightning checkpoint or one of its aliases.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from lightning_spectral.io.paths import PathLike


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
        lightning_spectral.io.checkpoints.CheckpointError: `--ckpt_path`: ... is not a complete checkpoint (100 bytes: ...
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
