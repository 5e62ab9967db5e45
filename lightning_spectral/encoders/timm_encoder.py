"""Frozen timm feature extractors (e.g. DINOv2, the SPEC paper's reference) with weights from a local file."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Callable, NamedTuple, Optional, Union

from torch import Tensor, nn

from lightning_spectral._checks import check_nonnegative_int, check_normalisation
from lightning_spectral.encoders.input_adapter import InputAdapter
from lightning_spectral.encoders.weights import WEIGHT_SUFFIXES, load_error, load_weights
from lightning_spectral.io.paths import PathLike, existing_file


class TimmEncoder(NamedTuple):
    """What [`create_timm_encoder`][lightning_spectral.encoders.create_timm_encoder] returns; unpacks as ``model,
    transform, data_config``."""

    model: nn.Module
    transform: Callable[[Any], Tensor]
    data_config: dict[str, Any]


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
        weights: a local .safetensors / .pt / .pth / .bin file (see
            [`load_weights`][lightning_spectral.encoders.load_weights]); ``None`` = random init, with a warning (a
            random
            reference is rarely what you want).
        num_classes: 0 for pooled features.
        checkpoint_prefix: keep only keys with this prefix (removed).
        input_mean: the per-channel mean of the tensors the encoder will be fed (e.g. open_clip's
            ``OPENAI_DATASET_MEAN`` when it shares batches with a CLIP model); if given (with ``input_std``), the
            model is wrapped as ``nn.Sequential(InputAdapter(...), model)`` converting to its own statistics.
        input_std: the per-channel standard deviation of those tensors (e.g. ``OPENAI_DATASET_STD``).
        input_size: with ``input_mean`` / ``input_std``, also resize fed tensors to this size.
        **kwargs: passed to ``timm.create_model``, e.g. ``img_size=224`` (DINOv2 defaults to 518).

    Returns:
        [`TimmEncoder`][lightning_spectral.encoders.TimmEncoder] ``(model, transform, data_config)``: ``transform`` maps
        a PIL image to the tensor
        the model expects, ``data_config`` holds its input size, mean, std, interpolation and crop.

    Raises:
        FileNotFoundError: no file at ``weights``.
        ValueError: the file is refused, or its keys / shapes do not fit the architecture.

    Examples:
        >>> import torch
        >>> encoder, transform, config = create_timm_encoder(
        ...     "vit_small_patch14_dinov2", img_size=28, depth=1, embed_dim=48, num_heads=2, weights=None
        ... )
        >>> encoder(torch.rand(2, 3, 28, 28)).shape
        torch.Size([2, 48])
    """
    import timm
    from timm.data import create_transform, resolve_model_data_config

    check_nonnegative_int(num_classes, "num_classes")
    check_normalisation(input_mean, input_std, ("input_mean", "input_std"), channels=(1, 3))
    if input_size is not None and input_mean is None:
        raise ValueError("`input_size` needs `input_mean` and `input_std` (the normalisation of the fed tensors).")
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
        except (RuntimeError, IndexError, AssertionError) as error:  # timm's filters index shapes they assume
            raise ValueError(load_error("weights", path, f"timm {name!r}", error)) from None
    model.eval().requires_grad_(False)
    data_config = resolve_model_data_config(model)
    size = kwargs.get("img_size")
    if size is not None:  # the pretrained config keeps its native size (518 for DINOv2): report the real one
        size = (size, size) if isinstance(size, int) else tuple(size)
        data_config["input_size"] = (data_config["input_size"][0], *size)
    transform = create_transform(**data_config, is_training=False)
    if input_mean is not None and input_std is not None:
        adapter = InputAdapter(input_mean, input_std, data_config["mean"], data_config["std"], size=input_size)
        model = nn.Sequential(adapter, model).eval().requires_grad_(False)
    return TimmEncoder(model, transform, data_config)


class TimmReference(nn.Module):
    """A frozen timm encoder as a module with plain arguments: what a LightningCLI config names by ``class_path``.

    ``forward(x) = create_timm_encoder(...).model(x)``, (N, d): e.g. DINOv2 ViT-B/14, the SPEC paper's reference,
    fed the CLIP-normalised batches of a recipe through ``input_mean`` / ``input_std``. Its parameters stay frozen
    (``requires_grad=False``) and callbacks run it in eval mode.

    Args:
        name: a timm architecture, e.g. ``"vit_base_patch14_dinov2"``.
        weights: a local weights file (see [`create_timm_encoder`][lightning_spectral.encoders.create_timm_encoder]);
            ``None`` = random init, with a warning.
        input_mean: the per-channel mean of the tensors it is fed (their normalisation).
        input_std: the per-channel standard deviation of the tensors it is fed.
        input_size: the size of the tensors it is fed.
        model_kwargs: passed to ``timm.create_model`` (e.g. ``{"img_size": 224}``).

    Raises:
        FileNotFoundError, ValueError: as [`create_timm_encoder`][lightning_spectral.encoders.create_timm_encoder].

    Examples:
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
