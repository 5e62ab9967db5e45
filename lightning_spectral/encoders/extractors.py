"""Ready-made image feature extractors for the metrics' ``feature=`` (as Inception is for torchmetrics' FID / KID).

Each takes float images in [0, 1] of shape (N, C, H, W), does its model's own preprocessing (resize and centre-crop
to the input size, 1 -> 3 channels where the model needs 3, the model's mean / std) and returns float32 embeddings
(N, d). They are frozen: eval mode (also under ``train()``), no gradients.

- [`ClipImageFeature`][lightning_spectral.encoders.ClipImageFeature]: the image tower of an open_clip model (a local
  checkpoint or an open_clip tag);
- [`TimmImageFeature`][lightning_spectral.encoders.TimmImageFeature]: a timm encoder, e.g. DINOv2, from a local weights
  file;
- [`PixelImageFeature`][lightning_spectral.encoders.PixelImageFeature]: pooled grey pixels
  ([`PixelEncoder`][lightning_spectral.encoders.PixelEncoder]), weight-free,
  for offline use (e.g. 8x8 digits).

A metric wraps them in [`FrozenFeature`][lightning_spectral.metrics.FrozenFeature], which checks the input convention
first
(``normalize=True``: floats in [0, 1]; ``normalize=False``: uint8 in [0, 255]).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_spectral._checks import check_image_batch, check_normalisation, check_positive_int
from lightning_spectral.encoders.pixels import PixelEncoder

Size = Union[int, tuple[int, int]]


def _pair(size: Size, name: str) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2:
        raise ValueError(f"`{name}` must be an integer >= 1 or a pair of them, got {size!r}.")
    return check_positive_int(pair[0], name), check_positive_int(pair[1], name)


def resize_center_crop(images: Tensor, size: tuple[int, int], crop_pct: float = 1.0, mode: str = "bicubic") -> Tensor:
    """Resize the shorter side to ``size / crop_pct`` and centre-crop ``size`` (torchvision's / timm's eval transform).

    Args:
        images: (N, C, H, W) float.
        size: (height, width) of the output.
        crop_pct: share of the resized image kept by the crop (timm's ``crop_pct``; 1 keeps the whole short side).
        mode: ``"bicubic"``, ``"bilinear"`` or ``"nearest"`` (antialiased when shrinking).

    Returns:
        (N, C, size[0], size[1]); bicubic overshoot is clamped back to the input's range.

    Examples:
        >>> import torch
        >>> resize_center_crop(torch.rand(2, 3, 8, 12), (16, 16)).shape
        torch.Size([2, 3, 16, 16])
    """
    height, width = images.shape[-2:]
    if (height, width) == tuple(size) and crop_pct == 1.0:
        return images
    scale_to = (math.floor(size[0] / crop_pct), math.floor(size[1] / crop_pct))
    ratio = max(scale_to[0] / height, scale_to[1] / width)  # the shorter side reaches its target
    new = (max(size[0], round(height * ratio)), max(size[1], round(width * ratio)))
    if new != (height, width):
        kwargs: dict[str, Any] = {} if mode == "nearest" else {"align_corners": False, "antialias": True}
        low, high = images.amin(), images.amax()
        images = F.interpolate(images, size=new, mode=mode, **kwargs).clamp(low, high)
    top, left = (new[0] - size[0]) // 2, (new[1] - size[1]) // 2
    return images[..., top : top + size[0], left : left + size[1]]


class ImageFeature(nn.Module):
    """A frozen ``model`` behind its own preprocessing: images (N, C, H, W) in [0, 1] -> embeddings (N, d).

    ``forward(x) = model(normalise(resize_center_crop(channels(x))))`` with the model's input size, mean and std;
    1-channel images are repeated to 3 when the model takes 3.

    Args:
        model: images (N, channels, H, W) -> (N, d) (or a tuple whose first element is that).
        size: the model's input size (square side or (height, width)); ``None`` keeps the images' size.
        mean: per-channel mean the model's inputs are normalised with (``None``: no normalisation).
        std: per-channel standard deviation of that normalisation (``None`` with ``mean``).
        channels: channels the model takes (1 or 3).
        crop_pct: timm's centre-crop share (1: resize the short side to ``size`` and crop the long one).
        interpolation: ``"bicubic"``, ``"bilinear"`` or ``"nearest"``.
        normalize_embeddings: L2-normalise the embeddings (CLIP's convention).

    Raises:
        ValueError: bad arguments; at call time, input that is not a float batch (N, C, H, W) in [0, 1] with 1 or
            ``channels`` channels, or holds NaN / Inf (the message names ``images`` and the fix).

    Examples:
        >>> import torch
        >>> feature = ImageFeature(torch.nn.Flatten(), size=4, mean=(0.5,), std=(0.5,), channels=1)
        >>> feature(torch.rand(2, 1, 8, 8)).shape
        torch.Size([2, 16])
    """

    def __init__(
        self,
        model: nn.Module,
        size: Optional[Size] = None,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        channels: int = 3,
        crop_pct: float = 1.0,
        interpolation: str = "bicubic",
        normalize_embeddings: bool = False,
    ) -> None:
        super().__init__()
        if channels not in (1, 3):
            raise ValueError(f"`channels` must be 1 or 3 (the channels the model takes), got {channels!r}.")
        check_normalisation(mean, std, ("mean", "std"), channels=(1, channels))
        if interpolation not in ("bicubic", "bilinear", "nearest"):
            raise ValueError(f"`interpolation` must be 'bicubic', 'bilinear' or 'nearest', got {interpolation!r}.")
        if not 0 < float(crop_pct) <= 1:
            raise ValueError(f"`crop_pct` must be in (0, 1], got {crop_pct!r}.")
        self.model = model
        self.size = None if size is None else _pair(size, "size")
        self.channels, self.crop_pct, self.interpolation = channels, float(crop_pct), interpolation
        self.normalize_embeddings = bool(normalize_embeddings)
        shape = (1, channels, 1, 1)
        if mean is not None and std is not None:
            mean_t = torch.tensor([float(v) for v in mean]).expand(channels).reshape(shape).clone()
            std_t = torch.tensor([float(v) for v in std]).expand(channels).reshape(shape).clone()
        else:
            mean_t, std_t = torch.zeros(shape), torch.ones(shape)
        self.register_buffer("mean", mean_t, persistent=False)
        self.register_buffer("std", std_t, persistent=False)
        self.eval().requires_grad_(False)

    def train(self, mode: bool = True) -> "ImageFeature":
        """Frozen: stays in eval mode whatever ``mode`` says (dropout / batch-norm statistics never switch)."""
        return super().train(False)

    def check(self, images: Any, name: str = "images") -> Tensor:
        """Validate a batch of images (N, C, H, W), C in (1, ``channels``), and return it as float32.

        Raises:
            TypeError / ValueError: naming ``name`` and the fix.
        """
        return check_image_batch(images, name, channels=sorted({1, self.channels}), owner=type(self).__name__)

    def preprocess(self, images: Tensor) -> Tensor:
        """The model's input: channels matched, resized and centre-cropped, normalised. (N, channels, h, w)."""
        images = self.check(images)
        if images.shape[1] != self.channels:  # grey -> RGB (the model takes 3 channels)
            images = images.expand(-1, self.channels, -1, -1)
        if self.size is not None:
            images = resize_center_crop(images, self.size, self.crop_pct, self.interpolation)
        return (images - self.mean.to(images.device)) / self.std.to(images.device)

    def forward(self, images: Tensor) -> Tensor:
        """Embeddings (N, d), float32, computed without gradients."""
        with torch.no_grad():
            output = self.model(self.preprocess(images))
        if isinstance(output, (tuple, list)):
            output = output[0]
        output = output.float()
        return F.normalize(output, dim=1) if self.normalize_embeddings else output

    def extra_repr(self) -> str:
        return f"size={self.size}, channels={self.channels}, crop_pct={self.crop_pct}"


class ClipImageFeature(ImageFeature):
    """The image tower of an open_clip model with open_clip's eval preprocessing, as a frozen extractor.

    Preprocessing (open_clip's ``preprocess_val`` on tensors): grey -> RGB, shorter side resized (bicubic) to the
    tower's ``image_size``, centre crop, the tower's mean / std (``visual.preprocess_cfg``, OpenAI's by default).
    Only the image tower is kept (the text tower is dropped).

    Args:
        model_name: an open_clip architecture (see [`create_clip`][lightning_spectral.encoders.create_clip]).
        pretrained: a local checkpoint file or an open_clip tag; ``None`` = random init.
        normalize_embeddings: L2-normalise the embeddings (CLIP's cosine geometry).
        model_kwargs: passed to [`create_clip`][lightning_spectral.encoders.create_clip] (e.g. tiny architectures).
        model: an open_clip model already built (then ``model_name`` / ``pretrained`` are ignored).

    Raises:
        FileNotFoundError, ValueError, RuntimeError: as [`create_clip`][lightning_spectral.encoders.create_clip];
            ``model`` without an image tower.

    Examples:
        >>> import torch
        >>> tiny = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16,
        ...             patch_size=16), text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
        >>> feature = ClipImageFeature(model_kwargs=tiny)
        >>> feature(torch.rand(2, 1, 8, 8)).shape        # grey 8x8 digits: RGB, 32 x 32, OpenAI statistics
        torch.Size([2, 16])
    """

    def __init__(
        self,
        model_name: str = "ViT-B-32",
        pretrained: Optional[str] = None,
        normalize_embeddings: bool = True,
        model_kwargs: Optional[dict[str, Any]] = None,
        model: Optional[nn.Module] = None,
    ) -> None:
        if model is None:
            from lightning_spectral.encoders.clip import create_clip

            model = create_clip(model_name, pretrained=pretrained, **(model_kwargs or {})).model
        visual = getattr(model, "visual", None)
        if not isinstance(visual, nn.Module):
            raise ValueError(
                f"ClipImageFeature: `model` must be an open_clip model with a `visual` tower, got "
                f"{type(model).__name__}; build one with `create_clip`."
            )
        config = getattr(visual, "preprocess_cfg", None) or {}
        size = config.get("size", getattr(visual, "image_size", 224))
        mean = config.get("mean")
        std = config.get("std")
        if mean is None or std is None:
            from open_clip import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

            mean, std = OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
        interpolation = config.get("interpolation", "bicubic")
        super().__init__(
            visual,
            size=size,
            mean=mean,
            std=std,
            channels=3,
            interpolation=interpolation if interpolation in ("bicubic", "bilinear", "nearest") else "bicubic",
            normalize_embeddings=normalize_embeddings,
        )


class TimmImageFeature(ImageFeature):
    """A timm encoder (e.g. DINOv2, pooled CLS features) with timm's eval preprocessing, as a frozen extractor.

    Preprocessing (timm's eval transform on tensors): grey -> RGB (for 3-channel models), shorter side resized to
    ``input_size / crop_pct`` (the model's interpolation), centre crop to ``input_size``, the model's mean / std.

    Args:
        name: a timm architecture, e.g. ``"vit_base_patch14_dinov2"``.
        weights: a local weights file (see [`create_timm_encoder`][lightning_spectral.encoders.create_timm_encoder]);
            ``None`` =
            random init, with a warning.
        model_kwargs: passed to ``timm.create_model`` (e.g. ``{"img_size": 224}``; DINOv2 defaults to 518).

    Raises:
        FileNotFoundError, ValueError: as [`create_timm_encoder`][lightning_spectral.encoders.create_timm_encoder].

    Examples:
        >>> import torch, warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")          # random weights: a warning says so
        ...     feature = TimmImageFeature("vit_small_patch14_dinov2",
        ...                                model_kwargs=dict(img_size=28, depth=1, embed_dim=48, num_heads=2))
        >>> feature(torch.rand(2, 3, 64, 64)).shape
        torch.Size([2, 48])
    """

    def __init__(self, name: str, weights: Optional[str] = None, model_kwargs: Optional[dict[str, Any]] = None) -> None:
        from lightning_spectral.encoders.timm_encoder import create_timm_encoder

        model, _, config = create_timm_encoder(name, weights, **(model_kwargs or {}))
        channels, height, width = config["input_size"]
        interpolation = config.get("interpolation", "bicubic")
        super().__init__(
            model,
            size=(height, width),
            mean=config["mean"],
            std=config["std"],
            channels=channels,
            crop_pct=config.get("crop_pct", 1.0) or 1.0,
            interpolation=interpolation if interpolation in ("bicubic", "bilinear", "nearest") else "bicubic",
        )


class PixelImageFeature(ImageFeature):
    """Pooled grey pixels, centred per image ([`PixelEncoder`][lightning_spectral.encoders.PixelEncoder]): weight-free,
    offline. ``size=8`` on scikit-learn's 8x8 digits gives their 64 pixels.

    Args:
        size: images are average-pooled to ``size x size`` (they must be at least that large).

    Raises:
        ValueError: at call time, images smaller than ``size`` or with other than 1 or 3 channels.

    Examples:
        >>> import torch
        >>> PixelImageFeature(size=8)(torch.rand(5, 1, 8, 8)).shape
        torch.Size([5, 64])
    """

    def __init__(self, size: int = 8) -> None:
        super().__init__(PixelEncoder(size=check_positive_int(size, "size")), channels=3)
        self.pool = size

    def check(self, images: Any, name: str = "images") -> Tensor:
        images = super().check(images, name)
        if min(images.shape[-2:]) < self.pool:
            raise ValueError(
                f"PixelImageFeature: `{name}` are {images.shape[-2]} x {images.shape[-1]}, smaller than the "
                f"{self.pool} x {self.pool} cells they are pooled to; build it with size <= "
                f"{min(images.shape[-2:])} or upsample the images."
            )
        return images

    def preprocess(self, images: Tensor) -> Tensor:
        return self.check(images)  # the encoder averages the channels and pools itself

    def extra_repr(self) -> str:
        return f"size={self.pool}"
