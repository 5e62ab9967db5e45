"""One tower of an open_clip model as a module ``x -> (N, d)``, for callbacks that hook it by name."""

from __future__ import annotations

from torch import Tensor, nn


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
            module that registers the model itself (e.g. `CLIPFineTune`, the alignment recipe's module in ``recipes/clip_finetune.py``).

    Raises:
        ValueError: ``model`` has no ``encode_image``.

    Examples:
        >>> import torch
        >>> from lightning_spectral.encoders import create_clip
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
        owns_model: register ``model`` as a submodule (see [`ImageTower`][lightning_spectral.encoders.ImageTower]).

    Raises:
        ValueError: ``model`` has no ``encode_text``.

    Examples:
        >>> from lightning_spectral.encoders import create_clip
        >>> tiny = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
        ...             text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
        >>> model, _, _, tokenizer = create_clip(**tiny)
        >>> TextTower(model)(tokenizer(["a photo of the digit 0", "a photo of the digit 1"])).shape
        torch.Size([2, 16])
    """

    _method = "encode_text"
