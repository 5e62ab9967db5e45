"""Reading torch files without unpickling: ``torch.load(weights_only=True)``, refusals named.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import Any

import torch


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
    except (RuntimeError, EOFError, OSError, KeyError, IndexError, ValueError, TypeError, AttributeError,
            struct.error, UnicodeDecodeError) as error:  # random bytes reach the unpickler's every corner
        how = ", memory-mappable" if mmap else ""
        detail = str(error) or type(error).__name__
        raise ValueError(
            f"`{argument}`: {str(path)!r} is not a readable{how} PyTorch file ({detail}); re-save it with "
            "`torch.save` (zip format)."
        ) from None
