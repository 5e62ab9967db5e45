"""Encoders and reference features, loaded offline and without unpickling arbitrary objects.

- :func:`create_clip`: an open_clip model with its transforms and tokenizer; ``pretrained`` is an open_clip
  tag (needs the hub, or its cache) or a local checkpoint file, which this module loads itself.
- :class:`ImageTower` / :class:`TextTower`: one tower of an open_clip model as a module ``x -> (N, d)``.
- :func:`create_timm_encoder`: a frozen timm feature extractor (e.g. DINOv2, the SPEC paper's reference) with
  weights from a local file, and its evaluation transform.
- :class:`PrecomputedFeatures` / :func:`save_features`: a table of reference features keyed by dataset index
  (.npy memory-mapped, .pt, .safetensors).

Every file is read with ``safetensors``, ``torch.load(..., weights_only=True)`` or ``numpy.load(...,
allow_pickle=False)``: a file that needs arbitrary pickled objects is refused with an error saying how to
re-save it. Nothing here downloads anything unless an open_clip tag is asked for.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_spectral.files import (
    FEATURE_SUFFIXES,
    EmbeddingFile,
    PathLike,
    check_index,
    check_table,
    existing_file,
    index_path,
    torch_load_safe,
)

WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile

__all__ = [
    "ClipBundle",
    "ImageTower",
    "InputAdapter",
    "PixelEncoder",
    "PrecomputedFeatures",
    "TextTower",
    "TimmEncoder",
    "TimmReference",
    "create_clip",
    "create_timm_encoder",
    "load_clip_checkpoint",
    "load_weights",
    "save_features",
]


# ----------------------------------------------------------------------------------------------------------------
# safe weight files
# ----------------------------------------------------------------------------------------------------------------


def _strip_wrappers(key: str) -> str:
    while key.startswith(_WRAPPER_PREFIXES):
        for prefix in _WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
    return key


def load_weights(path: PathLike, prefix: str = "", argument: str = "weights") -> dict[str, Tensor]:
    """Read a state_dict from a local file without unpickling arbitrary objects.

    ``.safetensors`` files are read with safetensors; ``.pt`` / ``.pth`` / ``.bin`` / ``.ckpt`` with
    ``torch.load(weights_only=True)``. A training checkpoint ``{"state_dict": ...}`` (open_clip, Lightning) or
    ``{"model": ...}`` (timm) is unwrapped; ``module.`` (DDP) and ``_orig_mod.`` (torch.compile) key prefixes
    are removed.

    Args:
        path: the weights file.
        prefix: keep only keys starting with this prefix, with the prefix removed (e.g. ``"model."`` for the
            open_clip model inside a Lightning checkpoint of :class:`~lightning_spectral.clip.CLIPFineTune`).
        argument: the argument name used in error messages.

    Returns:
        ``{name: tensor}`` on the CPU.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: unsupported suffix, a file that needs arbitrary pickled objects, no tensors, or no key with
            ``prefix``.

    Example:
        >>> import tempfile, torch
        >>> path = tempfile.mkdtemp() + "/linear.pt"
        >>> torch.save({"state_dict": {"module.weight": torch.ones(2, 3)}}, path)
        >>> {k: tuple(v.shape) for k, v in load_weights(path).items()}
        {'weight': (2, 3)}
    """
    path = existing_file(path, argument, WEIGHT_SUFFIXES)
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            checkpoint: Any = load_file(str(path), device="cpu")
        except (SafetensorError, OSError) as error:
            raise ValueError(f"`{argument}`: {str(path)!r} is not a readable safetensors file ({error}).") from None
    else:
        checkpoint = torch_load_safe(path, argument)
    for container in ("state_dict", "model"):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(container), dict):
            checkpoint = checkpoint[container]
            break
    if not isinstance(checkpoint, dict) or not checkpoint:
        raise ValueError(
            f"`{argument}`: {str(path)!r} holds a {type(checkpoint).__name__}, not a state_dict; save "
            "`model.state_dict()` (a dict of tensors)."
        )
    state = {_strip_wrappers(str(key)): value for key, value in checkpoint.items() if isinstance(value, Tensor)}
    if not state:
        raise ValueError(f"`{argument}`: {str(path)!r} holds no tensors; save `model.state_dict()`.")
    if prefix:
        state = {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}
        if not state:
            some = sorted(checkpoint)[:5]
            raise ValueError(
                f"`{argument}`: no key of {str(path)!r} starts with prefix {prefix!r}; some keys: {some}. "
                "Pass the prefix these keys share (or '' for none)."
            )
    return state


def _mismatch_error(argument: str, path: Path, what: str, missing: Sequence[str], unexpected: Sequence[str]) -> str:
    parts = []
    if missing:
        parts.append(f"{len(missing)} weights of the model are missing from the file (e.g. {list(missing)[:4]})")
    if unexpected:
        parts.append(f"{len(unexpected)} keys of the file are not in the model (e.g. {list(unexpected)[:4]})")
    return (
        f"`{argument}`: {str(path)!r} does not fit {what}: {'; '.join(parts)}. Pass the architecture (name and "
        "overrides) the checkpoint was saved from, or `checkpoint_prefix` if its keys carry a prefix."
    )


# ----------------------------------------------------------------------------------------------------------------
# open_clip
# ----------------------------------------------------------------------------------------------------------------


class ClipBundle(NamedTuple):
    """What :func:`create_clip` returns; unpacks as ``model, preprocess_train, preprocess_val, tokenizer``."""

    model: nn.Module
    preprocess_train: Callable[[Any], Tensor]
    preprocess_val: Callable[[Any], Tensor]
    tokenizer: Callable[..., Tensor]


class _DropRandomInitWarning(logging.Filter):
    """Hide open_clip's 'initialized randomly' warning while the weights are about to be loaded here."""

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
    prefixes, as .safetensors / .pt / .pth / .bin / .ckpt. Applies open_clip's own adjustments (third-party
    formats, old text-tower layout, scalar ``logit_scale``, position embeddings resized to the model's image
    size and context length).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is refused (see :func:`load_weights`) or its keys / shapes do not fit ``model``.
    """
    from open_clip.convert import convert_state_dict
    from open_clip.model import convert_to_custom_text_state_dict, resize_pos_embed, resize_text_pos_embed

    state = load_weights(path, prefix=prefix, argument=argument)
    path = Path(os.fspath(path)).expanduser()
    state = convert_state_dict(model, state)
    if "positional_embedding" in state and not hasattr(model, "positional_embedding"):
        state = convert_to_custom_text_state_dict(state)
    for name in ("logit_scale", "logit_bias"):
        param = getattr(model, name, None)
        if name in state and isinstance(param, Tensor) and state[name].ndim != param.ndim:
            state[name] = state[name].reshape(param.shape)
    if "logit_bias" not in state and getattr(model, "logit_bias", None) is not None and "logit_scale" in state:
        state["logit_bias"] = torch.zeros_like(state["logit_scale"])
    try:
        resize_pos_embed(state, model)
        resize_text_pos_embed(state, model)
    except Exception as error:  # noqa: BLE001 - reported with the file name below
        raise ValueError(
            f"`{argument}`: position embeddings of {str(path)!r} do not fit the model ({error})."
        ) from None
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(_mismatch_error(argument, path, f"a {type(model).__name__} model", missing, unexpected))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:  # shape mismatches
        lines = [line.strip() for line in str(error).splitlines() if "size mismatch" in line][:3]
        raise ValueError(
            f"`{argument}`: {str(path)!r} has the model's keys but other shapes: {' '.join(lines)} "
            "Pass the architecture (name and overrides) the checkpoint was saved from."
        ) from None


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
            loaded here strictly and safely (see :func:`load_clip_checkpoint`); or an open_clip tag such as
            ``"laion2b_s34b_b79k"`` (``open_clip.list_pretrained()``), which open_clip downloads or finds in its
            cache (loaded with ``weights_only=True``).
        precision: ``"fp32"``, ``"fp16"``, ``"bf16"``, ``"amp"``, ... as in open_clip.
        device: where the model is created.
        checkpoint_prefix: for a local file, keep only keys with this prefix (e.g. ``"model."`` for a Lightning
            checkpoint of :class:`~lightning_spectral.clip.CLIPFineTune`).
        **kwargs: passed to ``open_clip.create_model_and_transforms``: e.g. ``force_image_size=64``, or
            architecture overrides ``embed_dim=..., vision_cfg={...}, text_cfg={...}`` (tiny test models).

    Returns:
        :class:`ClipBundle` ``(model, preprocess_train, preprocess_val, tokenizer)``; the tokenizer produces
        ``model.context_length`` tokens. The model is in train mode, as open_clip returns it.

    Raises:
        FileNotFoundError: ``pretrained`` looks like a path but no file is there.
        ValueError: an unknown tag, or a checkpoint that is refused or does not fit the architecture.
        RuntimeError: a known tag whose weights cannot be downloaded (no hub access): download the checkpoint
            elsewhere and pass its path.

    Example:
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
        try:
            model, preprocess_train, preprocess_val = open_clip.create_model_and_transforms(
                model_name, pretrained=pretrained, **common
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
    tokenizer = open_clip.get_tokenizer(model_name, context_length=getattr(model, "context_length", None))
    return ClipBundle(model, preprocess_train, preprocess_val, tokenizer)


class _Tower(nn.Module):
    def __init__(self, model: nn.Module, normalize: bool = False, owns_model: bool = True) -> None:
        super().__init__()
        method = self._method
        if not callable(getattr(model, method, None)):
            raise ValueError(
                f"{type(self).__name__}: `model` must be an open_clip model with `{method}`, got "
                f"{type(model).__name__}; create one with `create_clip`."
            )
        if owns_model:
            self.model = model
        else:  # a plain reference: the model is registered elsewhere (no duplicate state_dict keys)
            object.__setattr__(self, "model", model)
        self.normalize = bool(normalize)

    _method = ""

    def forward(self, x: Tensor) -> Tensor:
        return getattr(self.model, self._method)(x, normalize=self.normalize)

    def extra_repr(self) -> str:
        return f"normalize={self.normalize}"


class ImageTower(_Tower):
    """The image tower of an open_clip model: ``forward(images) = model.encode_image(images)``, (N, d).

    The model is a registered submodule, so ``.to()``, ``.eval()`` and ``requires_grad_`` reach it: use it as
    a frozen reference module, or inside a LightningModule as the submodule a callback hooks by name (its
    ``state_dict`` then repeats the model's weights under the tower's name; hold the model in one place only
    if that matters).

    Args:
        model: an open_clip model (``CLIP`` / ``CustomTextCLIP``).
        normalize: L2-normalise the embeddings.
        owns_model: register ``model`` as a submodule (default). ``False`` keeps a plain reference, for a
            module that registers the model itself (e.g. :class:`~lightning_spectral.clip.CLIPFineTune`).

    Example:
        >>> import torch
        >>> tiny = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
        ...             text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
        >>> tower = ImageTower(create_clip(**tiny).model, normalize=True)
        >>> z = tower(torch.rand(2, 3, 32, 32))
        >>> z.shape, torch.allclose(z.norm(dim=1), torch.ones(2))
        (torch.Size([2, 16]), True)
    """

    _method = "encode_image"


class TextTower(_Tower):
    """The text tower of an open_clip model: ``forward(tokens) = model.encode_text(tokens)``, (N, d).

    Args:
        model: an open_clip model.
        normalize: L2-normalise the embeddings.
        owns_model: register ``model`` as a submodule (see :class:`ImageTower`).

    Example:
        >>> tiny = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
        ...             text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
        >>> model, _, _, tokenizer = create_clip(**tiny)
        >>> TextTower(model)(tokenizer(["a photo of the digit 0", "a photo of the digit 1"])).shape
        torch.Size([2, 16])
    """

    _method = "encode_text"


# ----------------------------------------------------------------------------------------------------------------
# timm
# ----------------------------------------------------------------------------------------------------------------


class TimmEncoder(NamedTuple):
    """What :func:`create_timm_encoder` returns; unpacks as ``model, transform, data_config``."""

    model: nn.Module
    transform: Callable[[Any], Tensor]
    data_config: dict[str, Any]


def _triple(values: Sequence[float], name: str) -> Tensor:
    tensor = torch.as_tensor(values, dtype=torch.float32).flatten()
    if tensor.numel() not in (1, 3) or not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"`{name}` must be 1 or 3 finite numbers (per channel), got {values!r}.")
    return tensor.expand(3).reshape(1, 3, 1, 1).clone()


class InputAdapter(nn.Module):
    """Re-normalise (and optionally resize) image tensors prepared for one model into another's convention.

    ``forward(x) = resize((x * std_in + mean_in - mean_out) / std_out)``: e.g. batches normalised with
    open_clip's OPENAI mean / std fed to a DINOv2 reference that expects ImageNet statistics.

    Args:
        mean_in, std_in: the normalisation the incoming tensors carry.
        mean_out, std_out: the normalisation the wrapped model expects.
        size: resize to this (height, width) or square size with bicubic interpolation; ``None`` keeps the size.

    Example:
        >>> import torch
        >>> adapter = InputAdapter((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), size=4)
        >>> y = adapter(torch.zeros(1, 3, 2, 2))
        >>> y.shape, torch.allclose(y, torch.full_like(y, 0.5))
        (torch.Size([1, 3, 4, 4]), True)
    """

    def __init__(
        self,
        mean_in: Sequence[float],
        std_in: Sequence[float],
        mean_out: Sequence[float],
        std_out: Sequence[float],
        size: Union[int, tuple[int, int], None] = None,
    ) -> None:
        super().__init__()
        std_in_t, std_out_t = _triple(std_in, "std_in"), _triple(std_out, "std_out")
        if bool((std_in_t <= 0).any()) or bool((std_out_t <= 0).any()):
            raise ValueError(f"`std_in` and `std_out` must be > 0, got {std_in!r} and {std_out!r}.")
        scale = std_in_t / std_out_t
        shift = (_triple(mean_in, "mean_in") - _triple(mean_out, "mean_out")) / std_out_t
        self.register_buffer("scale", scale, persistent=False)
        self.register_buffer("shift", shift, persistent=False)
        if size is not None:
            size = (size, size) if isinstance(size, int) else tuple(size)  # type: ignore[assignment]
            if len(size) != 2 or any(not isinstance(s, int) or s < 1 for s in size):  # type: ignore[arg-type]
                raise ValueError(f"`size` must be an integer >= 1 or a pair of them, got {size!r}.")
        self.size = size

    def forward(self, x: Tensor) -> Tensor:
        x = x * self.scale.to(x.dtype) + self.shift.to(x.dtype)
        if self.size is not None and tuple(x.shape[-2:]) != self.size:
            x = F.interpolate(x, size=self.size, mode="bicubic", align_corners=False, antialias=True)
        return x


def create_timm_encoder(
    name: str,
    weights: Optional[PathLike] = None,
    num_classes: int = 0,
    checkpoint_prefix: str = "",
    input_mean: Optional[Sequence[float]] = None,
    input_std: Optional[Sequence[float]] = None,
    input_size: Union[int, tuple[int, int], None] = None,
    **kwargs: Any,
) -> TimmEncoder:
    """A frozen timm encoder (eval mode, no gradients) with weights from a local file, and its eval transform.

    The weights go through timm's own checkpoint filter of the architecture, so timm-format files (e.g.
    ``model.safetensors`` of ``timm/vit_base_patch14_dinov2.lvd142m``) and, for DINOv2, the original
    ``dinov2_vitb14_pretrain.pth`` both load, with position embeddings resampled to ``img_size``. With
    ``num_classes=0`` (a feature extractor: ``forward`` returns the pooled (N, d) embedding, the CLS token for
    DINOv2) a classifier head in the file is dropped; every other key must match.

    Args:
        name: a timm architecture, e.g. ``"vit_base_patch14_dinov2"`` (``timm.list_models("*dinov2*")``).
        weights: a local .safetensors / .pt / .pth / .bin file (see :func:`load_weights`); ``None`` = random
            init, with a warning (a random reference is rarely what you want).
        num_classes: 0 for pooled features.
        checkpoint_prefix: keep only keys with this prefix (removed).
        input_mean, input_std: the normalisation of the tensors the encoder will be fed (e.g. open_clip's
            ``OPENAI_DATASET_MEAN`` / ``STD`` when it shares batches with a CLIP model); if given, the model is
            wrapped as ``nn.Sequential(InputAdapter(...), model)`` converting to the model's own statistics.
        input_size: with ``input_mean`` / ``input_std``, also resize fed tensors to this size.
        **kwargs: passed to ``timm.create_model``, e.g. ``img_size=224`` (DINOv2 defaults to 518).

    Returns:
        :class:`TimmEncoder` ``(model, transform, data_config)``: ``transform`` maps a PIL image to the tensor
        the model expects, ``data_config`` holds its input size, mean, std, interpolation and crop.

    Raises:
        FileNotFoundError: no file at ``weights``.
        ValueError: the file is refused, or its keys / shapes do not fit the architecture.

    Example:
        >>> import torch
        >>> encoder, transform, config = create_timm_encoder(
        ...     "vit_small_patch14_dinov2", img_size=28, depth=1, embed_dim=48, num_heads=2, weights=None
        ... )
        >>> encoder(torch.rand(2, 3, 28, 28)).shape
        torch.Size([2, 48])
    """
    import timm
    from timm.data import create_transform, resolve_model_data_config

    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"`num_classes` must be an integer >= 0 (0 = pooled features), got {num_classes!r}.")
    if not timm.is_model(name.split(".")[0]):
        raise ValueError(f"`name`={name!r} is not a timm architecture; see `timm.list_models('*dinov2*')`.")
    if weights is None:
        warnings.warn(
            f"create_timm_encoder: no `weights` given, {name!r} is randomly initialised; pass the path of a local "
            "weights file for a meaningful reference.",
            UserWarning,
            stacklevel=2,
        )
        model = timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    else:
        path = existing_file(weights, "weights", WEIGHT_SUFFIXES)
        state = load_weights(path, prefix=checkpoint_prefix, argument="weights")
        default_cfg = timm.models.get_pretrained_cfg(name)
        classifier = (default_cfg.classifier if default_cfg is not None else None) or "head"
        classifiers = (classifier,) if isinstance(classifier, str) else tuple(classifier)
        if num_classes == 0:  # a feature extractor: a classifier in the file is not used
            state = {k: v for k, v in state.items() if not any(k.startswith(c + ".") for c in classifiers)}
        overlay = dict(state_dict=state, num_classes=num_classes)
        try:
            model = timm.create_model(
                name, pretrained=True, num_classes=num_classes, pretrained_cfg_overlay=overlay, **kwargs
            )
        except RuntimeError as error:
            text = str(error)
            missing, unexpected = _listed_keys(text, "Missing key(s)"), _listed_keys(text, "Unexpected key(s)")
            if missing or unexpected:
                raise ValueError(_mismatch_error("weights", path, f"timm {name!r}", missing, unexpected)) from None
            lines = [line.strip() for line in text.splitlines() if "size mismatch" in line][:3] or [text.strip()]
            raise ValueError(
                f"`weights`: {str(path)!r} does not fit timm {name!r}: {' '.join(lines)} Pass the architecture "
                "(name and kwargs such as `img_size`) the weights were saved from."
            ) from None
    model.eval().requires_grad_(False)
    data_config = resolve_model_data_config(model)
    size = kwargs.get("img_size")
    if size is not None:  # the pretrained config keeps its native size (518 for DINOv2): report the real one
        size = (size, size) if isinstance(size, int) else tuple(size)
        data_config["input_size"] = (data_config["input_size"][0], *size)
    transform = create_transform(**data_config, is_training=False)
    if input_mean is not None or input_std is not None:
        if input_mean is None or input_std is None:
            raise ValueError(
                "Pass both `input_mean` and `input_std` (the normalisation of the fed tensors), or neither."
            )
        adapter = InputAdapter(input_mean, input_std, data_config["mean"], data_config["std"], size=input_size)
        model = nn.Sequential(adapter, model).eval().requires_grad_(False)
    elif input_size is not None:
        raise ValueError("`input_size` needs `input_mean` and `input_std` (the normalisation of the fed tensors).")
    return TimmEncoder(model, transform, data_config)


def _listed_keys(text: str, marker: str) -> list[str]:
    """The quoted keys PyTorch lists after ``marker`` ("Missing key(s)", ...) in a ``load_state_dict`` error."""
    match = re.search(re.escape(marker) + r" in state_dict: (.*?)\.\s*(?:\n|$)", text, flags=re.S)
    return re.findall(r'"([^"]+)"', match.group(1)) if match else []


class TimmReference(nn.Module):
    """A frozen timm encoder as a module with plain arguments: what a LightningCLI config names by ``class_path``.

    ``forward(x) = create_timm_encoder(...).model(x)``, (N, d): e.g. DINOv2 ViT-B/14, the SPEC paper's reference,
    fed the CLIP-normalised batches of a recipe through ``input_mean`` / ``input_std``. Its parameters stay frozen
    (``requires_grad=False``) and callbacks run it in eval mode.

    Args:
        name: a timm architecture, e.g. ``"vit_base_patch14_dinov2"``.
        weights: a local weights file (see :func:`create_timm_encoder`); ``None`` = random init, with a warning.
        input_mean, input_std, input_size: the normalisation (and size) of the tensors it is fed.
        model_kwargs: passed to ``timm.create_model`` (e.g. ``{"img_size": 224}``).

    Example:
        >>> import torch, warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     ref = TimmReference("vit_small_patch14_dinov2",
        ...                         model_kwargs=dict(img_size=28, depth=1, embed_dim=48, num_heads=2))
        >>> ref(torch.rand(2, 3, 28, 28)).shape
        torch.Size([2, 48])
    """

    def __init__(
        self,
        name: str,
        weights: Optional[str] = None,
        input_mean: Optional[Sequence[float]] = None,
        input_std: Optional[Sequence[float]] = None,
        input_size: Optional[int] = None,
        model_kwargs: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.encoder = create_timm_encoder(
            name, weights, input_mean=input_mean, input_std=input_std, input_size=input_size, **(model_kwargs or {})
        ).model

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(x)


class PixelEncoder(nn.Module):
    """A frozen, weight-free image encoder: grey images average-pooled to ``size x size``, centred per image.

    ``forward(x)[i] = g_i - mean(g_i)`` with ``g_i = avg_pool(mean over channels of x_i)``, (N, size^2). It is
    the offline reference of the tiny recipe: scikit-learn's digits are 8x8 grey images, so with ``size=8`` it
    recovers their pixels (up to the affine normalisation of the rendered images), whose neighbourhoods
    classify the digits well. Optionally followed by a fixed linear ``projection`` (``(size^2, k)`` with
    ``offset`` (size^2,)), e.g. a discriminant projection fitted elsewhere.

    Example:
        >>> import torch
        >>> z = PixelEncoder(size=4)(torch.rand(2, 3, 16, 16))
        >>> z.shape, bool(z.sum(1).abs().max() < 1e-5)
        (torch.Size([2, 16]), True)
    """

    def __init__(self, size: int = 8, projection: Optional[Tensor] = None, offset: Optional[Tensor] = None) -> None:
        super().__init__()
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"PixelEncoder: `size` must be an integer >= 1, got {size!r}.")
        self.size = size
        if projection is not None and tuple(projection.shape[:1]) != (size * size,):
            raise ValueError(
                f"PixelEncoder: `projection` must have {size * size} rows (size^2), "
                f"got shape {tuple(projection.shape)}."
            )
        self.register_buffer("projection", None if projection is None else projection.float().clone())
        self.register_buffer("offset", None if offset is None else offset.float().reshape(1, -1).clone())

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"PixelEncoder: expects images (N, C, H, W), got shape {tuple(x.shape)}.")
        grey = F.adaptive_avg_pool2d(x.float().mean(1, keepdim=True), self.size).flatten(1)
        z = grey - grey.mean(1, keepdim=True)
        if self.projection is not None:
            z = (z - (self.offset if self.offset is not None else 0.0)) @ self.projection
        return z


# ----------------------------------------------------------------------------------------------------------------
# precomputed reference features
# ----------------------------------------------------------------------------------------------------------------


def save_features(path: PathLike, features: Union[Tensor, np.ndarray], index: Union[Tensor, np.ndarray, None] = None):
    """Write reference features (N, d) for :class:`PrecomputedFeatures`, with optional dataset indices.

    ``.npy``: the array itself (read memory-mapped), the index in a sibling ``<stem>.index.npy``; ``.pt``:
    ``{"features": tensor, "index": tensor}`` via ``torch.save``; ``.safetensors``: keys ``features`` and
    ``index``. Row ``i`` holds the features of dataset sample ``index[i]`` (``i`` itself without an index).

    Raises:
        ValueError: unsupported suffix, features not a finite floating (N, d) array, or an index that is not
            N distinct integers >= 0.

    Example:
        >>> import tempfile, torch
        >>> path = tempfile.mkdtemp() + "/ref.safetensors"
        >>> save_features(path, torch.eye(3), index=torch.tensor([10, 20, 30]))
        >>> PrecomputedFeatures(path)[[30, 10]]
        tensor([[0., 0., 1.],
                [1., 0., 0.]])
    """
    path = Path(os.fspath(path)).expanduser()
    if path.suffix.lower() not in FEATURE_SUFFIXES:
        raise ValueError(f"`path`: suffix {path.suffix!r} is not supported; use one of {', '.join(FEATURE_SUFFIXES)}.")
    feats = torch.as_tensor(np.asarray(features) if not isinstance(features, Tensor) else features).detach().cpu()
    check_table(feats, "features")
    if not bool(torch.isfinite(feats).all()):
        raise ValueError("`features` contains NaN or Inf; clean them before saving.")
    idx = None if index is None else check_index(torch.as_tensor(np.asarray(index)), feats.shape[0], "index")
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        np.save(path, feats.contiguous().numpy(), allow_pickle=False)
        if idx is not None:
            np.save(index_path(path), idx.numpy(), allow_pickle=False)
        elif index_path(path).exists():
            index_path(path).unlink()  # a stale index of an earlier file would silently remap rows
    elif suffix == ".pt":
        torch.save({"features": feats.contiguous(), **({} if idx is None else {"index": idx})}, path)
    else:
        from safetensors.torch import save_file

        save_file({"features": feats.contiguous(), **({} if idx is None else {"index": idx})}, str(path))


class PrecomputedFeatures:
    """A table of reference features (N, d) looked up by dataset index, from a file or a tensor.

    Files: ``.npy`` (memory-mapped, ``allow_pickle=False``; an optional ``<stem>.index.npy`` beside it),
    ``.pt`` (``torch.load(weights_only=True)``: a tensor, or a dict with ``"features"`` and optional
    ``"index"``), ``.safetensors`` (key ``"features"``, optional ``"index"``). Without an index row ``i`` is
    dataset sample ``i``; with one, row ``i`` is sample ``index[i]`` (e.g. features written in the order of a
    shuffled or distributed loader). Lookups return float32 (float64 stays float64). Finiteness is checked at
    load for in-memory tables and per lookup for memory-mapped ones.

    Args:
        source: a path, a tensor or a NumPy array (N, d).
        index: dataset indices of the rows (N distinct integers >= 0); overrides an index stored in the file.

    Raises:
        FileNotFoundError: no file at ``source``.
        ValueError: wrong suffix, not a floating (N, d) table, NaN / Inf, a bad index, a refused file.
        KeyError: (on lookup) a dataset index with no row.

    Example:
        >>> import torch
        >>> table = PrecomputedFeatures(torch.arange(6.0).reshape(3, 2), index=[7, 3, 5])
        >>> table.shape, len(table)  # dataset indices 0..7 spanned, 3 rows stored
        ((8, 2), 3)
        >>> table[torch.tensor([3, 7])]
        tensor([[2., 3.],
                [0., 1.]])
    """

    def __init__(
        self, source: Union[PathLike, Tensor, np.ndarray], index: Union[Tensor, np.ndarray, Sequence[int], None] = None
    ) -> None:
        self.path: Optional[Path] = None
        stored_index: Any = None
        if isinstance(source, (str, os.PathLike)):
            file = EmbeddingFile(source, "source")  # checks suffix, shape and dtype; never unpickles
            self.path, stored_index = file.path, file.index
            data = file.memmap if file.memmap is not None else file.read(0, file.n, check_finite=False)
        elif isinstance(source, (Tensor, np.ndarray)):
            data = source.detach().cpu() if isinstance(source, Tensor) else source
        else:
            raise ValueError(
                f"`source` must be a features file path (.npy / .pt / .safetensors), a tensor or an array, got "
                f"{type(source).__name__}."
            )
        check_table(data, "source" if self.path is None else f"features in {str(self.path)!r}")
        self.memory_mapped = isinstance(data, np.memmap)
        if not self.memory_mapped:
            data = torch.as_tensor(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data)
            if not bool(torch.isfinite(data).all()):
                bad = int((~torch.isfinite(data)).any(dim=1).sum())
                raise ValueError(
                    f"`source`: the features contain NaN or Inf in {bad} of {data.shape[0]} rows; clean them."
                )
        self._data = data
        rows = int(data.shape[0])
        index = stored_index if index is None else index
        self.index: Optional[Tensor] = None
        if index is not None:
            self.index = check_index(torch.as_tensor(np.asarray(index)), rows, "index")
            self._sorted, self._order = torch.sort(self.index)

    @property
    def shape(self) -> tuple[int, int]:
        """(N, d): N is the span of dataset indices, ``max(index) + 1`` with an index, else the number of rows.

        Tables indexed by dataset index (``ReferenceEmbedding``) bound-check ids by ``shape[0]``; ids inside the
        span but without a row raise ``KeyError`` on lookup. ``len(table)`` is the number of stored rows.
        """
        span = len(self) if self.index is None or len(self) == 0 else int(self._sorted[-1]) + 1
        return (span, int(self._data.shape[1]))

    def __len__(self) -> int:
        return int(self._data.shape[0])

    def rows(self, ids: Union[int, Sequence[int], Tensor, np.ndarray]) -> Tensor:
        """The stored row positions of dataset indices ``ids`` (long, 1-D).

        Raises:
            KeyError: an index with no stored row.
        """
        ids_t = torch.as_tensor(np.asarray(ids) if not isinstance(ids, Tensor) else ids).cpu()
        if ids_t.is_floating_point() or ids_t.dtype == torch.bool:
            raise ValueError(f"dataset indices must be integers, got dtype {ids_t.dtype}.")
        ids_t = ids_t.long().flatten()
        if self.index is None:
            rows = ids_t
            bad = (rows < 0) | (rows >= len(self))
        else:
            position = torch.searchsorted(self._sorted, ids_t).clamp(max=max(len(self) - 1, 0))
            bad = self._sorted[position] != ids_t if len(self) else torch.ones_like(ids_t, dtype=torch.bool)
            rows = self._order[position]
        if bool(bad.any()):
            missing = ids_t[bad][:5].tolist()
            where = f"rows 0..{len(self) - 1}" if self.index is None else "the stored index"
            raise KeyError(
                f"PrecomputedFeatures: dataset indices {missing} have no features ({where}); the features must cover "
                "every sample the batches index."
            )
        return rows

    def __getitem__(self, ids: Union[int, Sequence[int], Tensor, np.ndarray]) -> Tensor:
        """Features of dataset indices ``ids``: (len(ids), d), or (d,) for a single integer."""
        single = isinstance(ids, (int, np.integer)) or (isinstance(ids, Tensor) and ids.ndim == 0)
        rows = self.rows(ids)
        if self.memory_mapped:
            data = torch.from_numpy(np.array(self._data[rows.numpy()]))
            if not bool(torch.isfinite(data).all()):
                raise ValueError(
                    f"PrecomputedFeatures: the features of {str(self.path)!r} hold NaN or Inf at rows "
                    f"{rows[~torch.isfinite(data).all(dim=1)][:5].tolist()}; clean the file."
                )
        else:
            data = self._data[rows]
        data = data if data.dtype in (torch.float32, torch.float64) else data.float()
        return data[0] if single else data

    def __repr__(self) -> str:
        source = str(self.path) if self.path is not None else "tensor"
        return f"PrecomputedFeatures({source!r}, shape={self.shape}, indexed={self.index is not None})"
