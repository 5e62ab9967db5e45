"""Images in: the frozen feature extractor a metric may hold (as torchmetrics' FID / KID hold Inception)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from lightning_spectral._checks import all_finite, check_bool, check_dense


class FrozenFeature(nn.Module):
    """A frozen ``module`` mapping images to embeddings (N, d), with torchmetrics' image input conventions.

    Input: a batch of images (N, ...) as ``uint8`` in [0, 255] (``normalize=False``, torchmetrics' FID default) or
    as floats in [0, 1] (``normalize=True``). The module always receives float32 images in [0, 1] and decides
    which shapes it takes (e.g. ``nn.Sequential(nn.Flatten())`` on 1-channel digits, or the extractors of
    [`lightning_spectral.encoders`][lightning_spectral.encoders] that resize and normalise for a CLIP / DINOv2 tower).

    Frozen: the module runs in eval mode under ``no_grad``, its parameters do not require gradients, and it is
    kept outside the metric's submodules, so no optimizer of the LightningModule sees it, ``train()`` does not
    switch it, and the metric's ``state_dict`` does not carry its weights (unless ``save=True``). Device moves of
    the metric move it; dtype casts do not (embeddings stay float32).

    Args:
        module: images -> (N, d).
        normalize: images are floats in [0, 1] (True) or ``uint8`` in [0, 255] (False); ``None`` (the default of
            every metric and callback): read from the dtype, ``uint8`` as [0, 255] and floats as [0, 1] (both checked).
        save: register the module as a submodule so that its weights go into ``state_dict``.

    Examples:
        >>> import torch
        >>> frozen = FrozenFeature(torch.nn.Flatten(), normalize=True)
        >>> frozen(torch.rand(4, 1, 8, 8)).shape
        torch.Size([4, 64])
    """

    def __init__(self, module: nn.Module, normalize: Optional[bool] = None, save: bool = False) -> None:
        super().__init__()
        if not isinstance(module, nn.Module) and not callable(module):
            raise TypeError(f"`feature` must be an nn.Module mapping images to (N, d), got {type(module).__name__}.")
        self.normalize = None if normalize is None else check_bool(normalize, "normalize")
        self.save = check_bool(save, "save")
        if isinstance(module, nn.Module):
            module.eval().requires_grad_(False)
        if save:
            self.module = module
        else:  # invisible to parameters(), state_dict() and load_state_dict()
            object.__setattr__(self, "_hidden", module)

    @property
    def extractor(self) -> Callable[[Tensor], Tensor]:
        """The wrapped module."""
        return self.module if self.save else self.__dict__["_hidden"]

    def train(self, mode: bool = True) -> "FrozenFeature":
        super().train(mode)
        if isinstance(self.extractor, nn.Module):
            self.extractor.eval()  # frozen: dropout / batch-norm statistics never switch to training
        return self

    def _apply(self, fn: Callable, recurse: bool = True) -> "FrozenFeature":
        super()._apply(fn, recurse)
        if not self.save and isinstance(self.extractor, nn.Module):
            device = fn(torch.zeros(0)).device  # follow device moves only; a dtype cast would change embeddings
            self.extractor.to(device)
        return self

    def images(self, images: Any, name: str = "images") -> Tensor:
        """Validate a batch of images and return it as float32 in [0, 1].

        Raises:
            TypeError: not a tensor, or the wrong dtype for ``normalize``.
            ValueError: no batch dimension, an empty image, values outside the range, NaN / Inf.
        """
        if not isinstance(images, Tensor):
            raise TypeError(f"`{name}` must be a tensor of images (N, C, H, W), got {type(images).__name__}.")
        check_dense(images, name)
        if images.ndim < 2:
            raise ValueError(f"`{name}` must be a batch of images (N, C, H, W), got shape {tuple(images.shape)}.")
        if self.normalize is False or (self.normalize is None and images.dtype == torch.uint8):
            if images.dtype != torch.uint8:
                raise TypeError(
                    f"`{name}` has dtype {images.dtype}, but the metric was built with normalize=False, which expects "
                    "uint8 images in [0, 255] (torchmetrics' convention). Pass normalize=True for float images in "
                    "[0, 1], or convert with `(images * 255).round().to(torch.uint8)`."
                )
            return images.float().div_(255.0)
        if not images.is_floating_point():
            raise TypeError(
                f"`{name}` has dtype {images.dtype}, but normalize=True expects float images in [0, 1]; pass "
                "normalize=False for uint8 images in [0, 255]."
            )
        images = images.float()
        if images.numel():
            if not all_finite(images):
                raise ValueError(f"`{name}` contains NaN or Inf; clean the generated images first.")
            low, high = float(images.min()), float(images.max())
            if low < -1e-6 or high > 1 + 1e-6:
                hint = "map [-1, 1] outputs with `(x + 1) / 2`" if low >= -1 - 1e-6 and high <= 1 + 1e-6 else (
                    "pass uint8 images with normalize=False" if high <= 255 else "rescale them to [0, 1]"
                )
                raise ValueError(
                    f"`{name}` has values in [{low:.3g}, {high:.3g}], but normalize=True expects images in [0, 1]; "
                    f"{hint}."
                )
        return images

    def forward(self, images: Any, name: str = "images") -> Tensor:
        """Embeddings (N, d) of a batch of images, computed under ``no_grad`` in eval mode.

        Raises:
            ValueError: the module does not return one (N, d) tensor per batch of N images.
        """
        images = self.images(images, name)
        with torch.no_grad():
            output = self.extractor(images)
        if isinstance(output, (tuple, list)) and output:
            output = output[0]
        if not isinstance(output, Tensor) or output.ndim != 2 or output.shape[0] != images.shape[0]:
            shape = tuple(output.shape) if isinstance(output, Tensor) else type(output).__name__
            raise ValueError(
                f"`feature` must map {images.shape[0]} images to an (N, d) tensor of embeddings, got {shape}; end the "
                "module with pooling or `nn.Flatten()`."
            )
        return output.detach()
