"""Paths given by users: a string or ``os.PathLike``, an existing file of an accepted suffix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

PathLike = Union[str, "os.PathLike[str]"]


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
