"""Files: image files read as 8-bit RGB (16-bit and float greys scaled, decompression bombs refused by name), text
lists of paths decoded by their byte-order mark, whole-file writes, checkpoint paths checked before any
work (and a script's entry point that turns a refused path into one line), and embedding files read without unpickling.
"""

from lightning_spectral.io.checkpoints import LIGHTNING_CKPT_ALIASES, CheckpointError, check_checkpoint
from lightning_spectral.io.embedding_file import (
    FEATURE_SUFFIXES,
    EmbeddingFile,
    check_index,
    check_table,
    index_path,
    native_byte_order,
)
from lightning_spectral.io.images import as_rgb, open_rgb, opened
from lightning_spectral.io.paths import PathLike, as_path, existing_file
from lightning_spectral.io.safe_load import torch_load_safe, unpickler_reason
from lightning_spectral.io.script_entry import run_script
from lightning_spectral.io.text_lists import list_encoding, list_lines, read_list
from lightning_spectral.io.writing import WriteError, check_writable, written

__all__ = [
    "as_path",
    "as_rgb",
    "check_checkpoint",
    "check_index",
    "check_table",
    "check_writable",
    "CheckpointError",
    "EmbeddingFile",
    "existing_file",
    "FEATURE_SUFFIXES",
    "index_path",
    "LIGHTNING_CKPT_ALIASES",
    "list_encoding",
    "list_lines",
    "native_byte_order",
    "open_rgb",
    "opened",
    "PathLike",
    "read_list",
    "run_script",
    "torch_load_safe",
    "unpickler_reason",
    "WriteError",
    "written",
]
