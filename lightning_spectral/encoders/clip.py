"""open_clip models with their transforms and tokenizer, from an open_clip tag or a local checkpoint file."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, NamedTuple, Optional, Union

import torch
from torch import Tensor, nn

from lightning_spectral.encoders.weights import WEIGHT_SUFFIXES, load_error, read_checkpoint, strip_prefixes
from lightning_spectral.io.paths import PathLike, existing_file

#: The precisions open_clip's ``create_model`` knows (its training script's choices).
CLIP_PRECISIONS = ("fp32", "fp16", "bf16", "amp", "amp_bf16", "amp_bfloat16", "pure_fp16", "pure_bf16")


class ClipBundle(NamedTuple):
    """What [`create_clip`][lightning_spectral.encoders.create_clip] returns; unpacks as ``model, preprocess_train,
    preprocess_val, tokenizer``."""

    model: nn.Module
    preprocess_train: Callable[[Any], Tensor]
    preprocess_val: Callable[[Any], Tensor]
    tokenizer: Callable[..., Tensor]


class _DropRandomInitWarning(logging.Filter):
    """Hide open_clip's 'initialized randomly' warning: the weights are about to be loaded here, or ``pretrained=None``
    asked for a random initialisation (said once, as information)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Model initialized randomly" not in record.getMessage()


def _looks_like_path(pretrained: str) -> bool:
    return (
        os.path.exists(pretrained)
        or os.sep in pretrained
        or "/" in pretrained
        or pretrained.lower().endswith(WEIGHT_SUFFIXES + (".npz", ".npy"))
    )


def load_clip_checkpoint(model: nn.Module, path: PathLike, prefix: str = "", argument: str = "pretrained") -> None:
    """Load a local open_clip checkpoint into ``model`` (strictly), without unpickling arbitrary objects.

    Accepts a bare state_dict or open_clip's training checkpoint ``{"state_dict": ...}`` with ``module.``
    prefixes, as .safetensors / .pt / .pth / .bin / .ckpt, loaded by ``open_clip.load_checkpoint(...,
    weights_only=True)`` with open_clip's own adjustments (third-party formats, old text-tower layout, scalar
    ``logit_scale``, position embeddings resized to the model's image size and context length). The file is
    first read here (safetensors or ``torch.load(weights_only=True)``) so that a refused or unreadable file is
    reported naming ``argument``. With a ``prefix`` (a model inside a larger module's checkpoint, e.g.
    ``"model."``) or keys under ``_orig_mod.`` (torch.compile), the selected weights are loaded here instead,
    position embeddings resized by open_clip's helpers.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is refused (see [`load_weights`][lightning_spectral.encoders.load_weights]) or its keys /
            shapes do not fit ``model`` (the model may then be partly loaded).

    Examples:
        >>> import tempfile, torch
        >>> from lightning_spectral.encoders import create_clip
        >>> tiny = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
        ...             text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
        >>> source, target = create_clip(**tiny).model, create_clip(**tiny).model
        >>> path = tempfile.mkdtemp() + "/clip.pt"
        >>> torch.save({"state_dict": {"module." + k: v for k, v in source.state_dict().items()}}, path)
        >>> load_clip_checkpoint(target, path)
        >>> all(torch.equal(a, b) for a, b in zip(target.state_dict().values(), source.state_dict().values()))
        True
    """
    import open_clip
    from open_clip.model import resize_pos_embed, resize_text_pos_embed

    path = existing_file(path, argument, WEIGHT_SUFFIXES)
    checkpoint, container = read_checkpoint(path, argument)  # refuses pickled objects before open_clip opens the file
    state = strip_prefixes(checkpoint, prefix, path, argument)
    # open_clip reads whole files only, unwrapping {"state_dict": ...} and `module.`: other layouts are loaded here
    as_saved = container in (None, "state_dict") and set(state) == {k.removeprefix("module.") for k in checkpoint}
    try:
        if as_saved:
            del checkpoint, state
            open_clip.load_checkpoint(model, str(path), strict=True, weights_only=True)
        else:
            resize_pos_embed(state, model)
            resize_text_pos_embed(state, model)
            model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError, KeyError, IndexError, AssertionError) as error:  # open_clip asserts shapes
        raise ValueError(load_error(argument, path, f"a {type(model).__name__} model", error)) from None


def create_clip(
    model_name: str = "ViT-B-32",
    pretrained: Optional[PathLike] = None,
    precision: str = "fp32",
    device: Union[str, torch.device] = "cpu",
    checkpoint_prefix: str = "",
    **kwargs: Any,
) -> ClipBundle:
    """An open_clip model, its train / val image transforms and its tokenizer.

    Args:
        model_name: an open_clip architecture (``open_clip.list_models()``), or ``"local-dir:/path"`` /
            ``"hf-hub:org/repo"`` (then open_clip reads the config and weights there; ``pretrained`` is ignored).
        pretrained: ``None`` (random init); a local checkpoint file (.safetensors / .pt / .pth / .bin / .ckpt),
            loaded strictly and safely (see [`load_clip_checkpoint`][lightning_spectral.encoders.load_clip_checkpoint]);
            or an open_clip tag such as
            ``"laion2b_s34b_b79k"`` (``open_clip.list_pretrained()``), which open_clip downloads or finds in its
            cache (loaded with ``weights_only=True``).
        precision: one of `CLIP_PRECISIONS` (``"fp32"``, ``"fp16"``, ``"bf16"``, ``"amp"``, ...), as in open_clip.
        device: where the model is created.
        checkpoint_prefix: for a local file, keep only keys with this prefix (e.g. ``"model."`` for a Lightning
            checkpoint of `CLIPFineTune`, the alignment recipe's module in ``recipes/clip_finetune.py``).
        **kwargs: passed to ``open_clip.create_model_and_transforms``: e.g. ``force_image_size=64``, or
            architecture overrides ``embed_dim=..., vision_cfg={...}, text_cfg={...}`` (tiny test models).

    Returns:
        [`ClipBundle`][lightning_spectral.encoders.ClipBundle] ``(model, preprocess_train, preprocess_val, tokenizer)``;
        the tokenizer produces
        ``model.context_length`` tokens. The model is in train mode, as open_clip returns it.

    Raises:
        FileNotFoundError: ``pretrained`` looks like a path but no file is there.
        ValueError: an unknown tag or ``precision``, or a checkpoint that is refused (NaN weights too) or does not fit
            the architecture.
        RuntimeError: a known tag whose weights cannot be downloaded (no hub access): download the checkpoint
            elsewhere and pass its path.

    Examples:
        >>> import torch
        >>> tiny = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
        ...             text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
        >>> model, _, preprocess_val, tokenizer = create_clip("ViT-B-32", **tiny)
        >>> tokens = tokenizer(["a photo of the digit 3"])
        >>> tokens.shape
        torch.Size([1, 8])
        >>> model.encode_text(tokens).shape, model.encode_image(torch.zeros(1, 3, 32, 32)).shape
        (torch.Size([1, 16]), torch.Size([1, 16]))
    """
    import open_clip
    from lightning.pytorch.utilities import rank_zero_info

    if precision not in CLIP_PRECISIONS:  # open_clip would silently build an fp32 model for any other string
        raise ValueError(f"`precision` must be one of {CLIP_PRECISIONS} (open_clip's), got {precision!r}.")
    common = dict(precision=precision, device=device, **kwargs)
    local = pretrained is not None and (not isinstance(pretrained, str) or _looks_like_path(pretrained))
    if local:
        path = existing_file(pretrained, "pretrained", WEIGHT_SUFFIXES)  # type: ignore[arg-type]
        quiet = _DropRandomInitWarning()
        logging.getLogger().addFilter(quiet)
        try:
            model, preprocess_train, preprocess_val = open_clip.create_model_and_transforms(model_name, **common)
        finally:
            logging.getLogger().removeFilter(quiet)
        load_clip_checkpoint(model, path, prefix=checkpoint_prefix, argument="pretrained")
    else:
        if pretrained is not None and ":" not in model_name:
            tags = open_clip.list_pretrained_tags_by_model(model_name)
            if pretrained not in tags:
                raise ValueError(
                    f"`pretrained`={pretrained!r} is neither an existing file nor an open_clip tag of {model_name!r} "
                    f"(its tags: {tags}); pass a tag or the path of a local checkpoint."
                )
        quiet = _DropRandomInitWarning()
        if pretrained is None:
            logging.getLogger().addFilter(quiet)
            rank_zero_info(f"create_clip: {model_name} with random weights (pretrained=None).")
        try:
            model, preprocess_train, preprocess_val = open_clip.create_model_and_transforms(
                model_name, pretrained=pretrained, weights_only=True, **common
            )
        except RuntimeError as error:
            if pretrained is None or "download" not in str(error).lower():
                raise
            raise RuntimeError(
                f"create_clip: the weights of tag {pretrained!r} for {model_name!r} could not be downloaded ({error}). "
                "Without hub access, download the checkpoint on a machine that has it (e.g. "
                "`open_clip.create_model(name, pretrained=tag)` fills the Hugging Face cache, or fetch the "
                "open_clip_pytorch_model.bin / .safetensors file) and pass its local path as `pretrained`."
            ) from error
        finally:
            logging.getLogger().removeFilter(quiet)
    tokenizer = open_clip.get_tokenizer(model_name, context_length=getattr(model, "context_length", None))
    return ClipBundle(model, preprocess_train, preprocess_val, tokenizer)
