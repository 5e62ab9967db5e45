"""Text lists of paths (one a line) decoded by their byte-order mark: UTF-8 (with or without one), UTF-16 and UTF-32
with one (Windows editors and PowerShell's ``>`` write UTF-16); anything else undecodable is refused by name."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import Union

#: Byte-order marks and the codec that reads past them (UTF-32's before UTF-16's: FF FE 00 00 starts with FF FE).
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def list_encoding(path: Union[str, Path]) -> str:
    """The codec of the text file at ``path``: the one its byte-order mark names, else ``"utf-8-sig"``.

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "list.txt"
        >>> _ = path.write_text("a.png\\n", encoding="utf-16")
        >>> list_encoding(path)
        'utf-16'
    """
    with open(path, "rb") as handle:
        head = handle.read(4)
    return next((codec for bom, codec in BOMS if head.startswith(bom)), "utf-8-sig")


def _refusal(path: Union[str, Path], argument: str, where: str) -> ValueError:
    return ValueError(
        f"`{argument}`: the list {str(path)!r} is not UTF-8 text ({where}): save it as UTF-8 (e.g. "
        f"`iconv -f latin1 -t utf-8 list.txt > list-utf8.txt`, or an editor's 'Save with encoding: UTF-8'); "
        "UTF-16 is read when the file starts with its byte-order mark."
    )


def list_lines(path: Union[str, Path], argument: str) -> Iterator[str]:
    """The lines of the text list at ``path`` (decoded per `list_encoding`, universal newlines, each with its end of
    line), read lazily.

    Raises:
        ValueError: bytes that do not decode, or a NUL character (UTF-16 without its byte-order mark); the message
            names ``argument``, the file, the line and the encoding to use.

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "list.txt"
        >>> _ = path.write_bytes("caf\\u00e9.png\\n".encode("latin-1"))
        >>> list(list_lines(path, "--images"))
        Traceback (most recent call last):
        ...
        ValueError: `--images`: the list ... is not UTF-8 text (line 1: ...
    """
    encoding = list_encoding(path)
    with open(path, encoding=encoding) as handle:
        try:
            for number, line in enumerate(handle, start=1):
                if "\x00" in line:
                    raise _refusal(path, argument, f"line {number} holds NUL characters: UTF-16 without its byte-order "
                                   "mark?")
                yield line
        except UnicodeDecodeError as error:
            where = _first_bad_line(path, error) if encoding == "utf-8-sig" else f"{encoding}: {error.reason}"
            raise _refusal(path, argument, where) from None


def _first_bad_line(path: Union[str, Path], error: UnicodeDecodeError) -> str:
    """Where a UTF-8 file first fails to decode: ``"line N: reason, byte 0xXX"`` (the text reader decodes in chunks,
    so its error does not know the line)."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as found:
                return f"line {number}: {found.reason}, byte 0x{found.object[found.start]:02x}"
    return error.reason


def read_list(path: Union[str, Path], argument: str) -> str:
    """The whole text list at ``path``, decoded as `list_lines` does.

    Raises:
        ValueError: as `list_lines`.
    """
    return "".join(list_lines(path, argument))
