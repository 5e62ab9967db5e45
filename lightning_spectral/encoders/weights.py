"""Weight files read without unpickling arbitrary objects, and the errors of weights that do not fit a model."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from torch import Tensor
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from lightning_spectral.io.paths import PathLike, existing_file
from lightning_spectral.io.safe_load import torch_load_safe

WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile
CONTAINERS = ("state_dict", "model")  # open_clip / Lightning training checkpoints, timm's


def read_checkpoint(path: Path, argument: str) -> tuple[dict[str, Tensor], Optional[str]]:
    """The tensors of a weights file as saved, and the key of the container they were found in.

    ``.safetensors`` files are read with safetensors, others with ``torch.load(weights_only=True)``; a training
    checkpoint ``{"state_dict": ...}`` / ``{"model": ...}`` is unwrapped (its key is returned, else ``None``) and
    non-tensor entries are dropped.

    Raises:
        ValueError: a file that needs arbitrary pickled objects, an unreadable file, no state_dict, no tensors.
    """
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            checkpoint: Any = load_file(str(path), device="cpu")
        except (SafetensorError, OSError) as error:
            raise ValueError(f"`{argument}`: {str(path)!r} is not a readable safetensors file ({error}).") from None
    else:
        checkpoint = torch_load_safe(path, argument)
    found = [key for key in CONTAINERS if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict)]
    container = found[0] if found else None
    if container is not None:
        checkpoint = checkpoint[container]
    if not isinstance(checkpoint, dict) or not checkpoint:
        raise ValueError(
            f"`{argument}`: {str(path)!r} holds a {type(checkpoint).__name__}, not a state_dict; save "
            "`model.state_dict()` (a dict of tensors)."
        )
    state = {str(key): value for key, value in checkpoint.items() if isinstance(value, Tensor)}
    if not state:
        raise ValueError(f"`{argument}`: {str(path)!r} holds no tensors; save `model.state_dict()`.")
    broken = [key for key, value in state.items() if value.is_floating_point() and bool(value.isnan().any())]
    if broken:  # a diverged run's weights: every embedding would be NaN
        raise ValueError(
            f"`{argument}`: {str(path)!r} holds NaN weights in {len(broken)} tensors (e.g. {broken[:3]}); the run "
            "that wrote it diverged or the file is damaged. Load an earlier checkpoint."
        )
    return state, container


def strip_prefixes(state: dict[str, Tensor], prefix: str, path: Path, argument: str) -> dict[str, Tensor]:
    """``state`` without wrapper prefixes (``module.``, ``_orig_mod.``, nested in any order), then only the keys
    that start with ``prefix``, the prefix removed.

    Raises:
        ValueError: no key starts with ``prefix``.
    """
    state = dict(state)
    while True:  # DDP around torch.compile or the reverse: peel until no wrapper prefix is left
        before = set(state)
        for wrapper in WRAPPER_PREFIXES:
            consume_prefix_in_state_dict_if_present(state, wrapper)
        if set(state) == before:
            break
    if not prefix:
        return state
    selected = {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}
    if not selected:
        raise ValueError(
            f"`{argument}`: no key of {str(path)!r} starts with prefix {prefix!r}; some keys: {sorted(state)[:5]}. "
            "Pass the prefix these keys share (or '' for none)."
        )
    return selected


def load_weights(path: PathLike, prefix: str = "", argument: str = "weights") -> dict[str, Tensor]:
    """Read a state_dict from a local file without unpickling arbitrary objects.

    ``.safetensors`` files are read with safetensors; ``.pt`` / ``.pth`` / ``.bin`` / ``.ckpt`` with
    ``torch.load(weights_only=True)``. A training checkpoint ``{"state_dict": ...}`` (open_clip, Lightning) or
    ``{"model": ...}`` (timm) is unwrapped; ``module.`` (DDP) and ``_orig_mod.`` (torch.compile) key prefixes
    are removed.

    Args:
        path: the weights file.
        prefix: keep only keys starting with this prefix, with the prefix removed (e.g. ``"model."`` for the
            open_clip model inside a Lightning checkpoint of `CLIPFineTune`, the alignment recipe's module in ``recipes/clip_finetune.py``).
        argument: the argument name used in error messages.

    Returns:
        ``{name: tensor}`` on the CPU.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: unsupported suffix, a file that needs arbitrary pickled objects, no tensors, or no key with
            ``prefix``.

    Examples:
        >>> import tempfile, torch
        >>> path = tempfile.mkdtemp() + "/linear.pt"
        >>> torch.save({"state_dict": {"module.weight": torch.ones(2, 3)}}, path)
        >>> {k: tuple(v.shape) for k, v in load_weights(path).items()}
        {'weight': (2, 3)}
    """
    path = existing_file(path, argument, WEIGHT_SUFFIXES)
    state, _ = read_checkpoint(path, argument)
    return strip_prefixes(state, prefix, path, argument)


def listed_keys(text: str, marker: str) -> list[str]:
    """The quoted keys PyTorch lists after ``marker`` ("Missing key(s)", ...) in a ``load_state_dict`` error."""
    match = re.search(re.escape(marker) + r" in state_dict: (.*?)\.\s*(?:\n|$)", text, flags=re.S)
    return re.findall(r'"([^"]+)"', match.group(1)) if match else []


def mismatch_error(argument: str, path: Path, what: str, missing: Sequence[str], unexpected: Sequence[str]) -> str:
    """The message for a file whose keys do not fit a model: counts and examples of both kinds, and the fix."""
    parts = []
    if missing:
        parts.append(f"{len(missing)} weights of the model are missing from the file (e.g. {list(missing)[:4]})")
    if unexpected:
        parts.append(f"{len(unexpected)} keys of the file are not in the model (e.g. {list(unexpected)[:4]})")
    return (
        f"`{argument}`: {str(path)!r} does not fit {what}: {'; '.join(parts)}. Pass the architecture (name and "
        "overrides) the checkpoint was saved from, or `checkpoint_prefix` if its keys carry a prefix."
    )


def load_error(argument: str, path: Path, what: str, error: BaseException) -> str:
    """The message for an error raised while loading ``path`` into ``what``: missing / unexpected keys, shapes
    that differ, or (anything else, e.g. position embeddings that cannot be resized) the error itself."""
    text = str(error)
    missing, unexpected = listed_keys(text, "Missing key(s)"), listed_keys(text, "Unexpected key(s)")
    if missing or unexpected:
        return mismatch_error(argument, path, what, missing, unexpected)
    shapes = [line.strip() for line in text.splitlines() if "size mismatch" in line][:3]
    if shapes:
        return (
            f"`{argument}`: {str(path)!r} has the keys of {what} but other shapes: {' '.join(shapes)} Pass the "
            "architecture (name and overrides such as `img_size`) the checkpoint was saved from."
        )
    return f"`{argument}`: {str(path)!r} does not fit {what} ({type(error).__name__}: {text.strip()})."
