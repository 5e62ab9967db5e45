"""The items every datamodule yields: image-caption pairs as dicts, with the caption's tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor
from torch.utils.data import Dataset

Tokenizer = Callable[..., Tensor]


class ImageTextDataset(Dataset):
    """Image-caption pairs as dict items; images are produced by ``load(source)``.

    Args:
        sources: one entry per item, handed to ``load`` (a file path, a pixel tensor, ...).
        captions: one caption per item.
        labels: one class per item (-1 = unknown).
        indices: the items' dataset indices (positions in the whole source).
        load: ``source -> float tensor (3, H, W)``; picklable for ``num_workers > 0``.
        tokenizer: ``tokenizer([caption]) -> (1, context_length)`` token ids; ``None`` = no ``"text"``.

    Raises:
        ValueError: the four sequences differ in length; (on access) a tokenizer that does not return
            (1, context_length) ids for one caption.

    Examples:
        >>> import torch
        >>> data = ImageTextDataset([torch.zeros(3, 4, 4)], ["a photo"], [2], [17], load=lambda x: x)
        >>> item = data[0]
        >>> item["image"].shape, item["caption"], item["label"], item["index"]
        (torch.Size([3, 4, 4]), 'a photo', 2, 17)
    """

    def __init__(
        self,
        sources: Sequence[Any],
        captions: Sequence[str],
        labels: Sequence[int],
        indices: Sequence[int],
        load: Callable[[Any], Tensor],
        tokenizer: Optional[Tokenizer] = None,
    ) -> None:
        if not len(sources) == len(captions) == len(labels) == len(indices):
            raise ValueError(
                f"ImageTextDataset: sources, captions, labels and indices must have one entry per item, got "
                f"{len(sources)}, {len(captions)}, {len(labels)} and {len(indices)}."
            )
        self.sources, self.captions = sources, list(captions)
        self.labels, self.indices = [int(v) for v in labels], [int(v) for v in indices]
        self.load, self.tokenizer = load, tokenizer
        self._tokens: dict[str, Tensor] = {}

    def __len__(self) -> int:
        return len(self.captions)

    def tokens(self, caption: str) -> Tensor:
        """Token ids (context_length,) of ``caption``, cached (captions repeat in class-template datasets)."""
        if caption not in self._tokens:
            tokens = torch.as_tensor(self.tokenizer([caption]))  # type: ignore[misc]
            if tokens.ndim != 2 or tokens.shape[0] != 1:
                raise ValueError(
                    f"`tokenizer` must map a list of n captions to (n, context_length) token ids, got shape "
                    f"{tuple(tokens.shape)} for one caption; use `open_clip.get_tokenizer(model_name)`."
                )
            if len(self._tokens) < 4096:
                self._tokens[caption] = tokens[0]
            return tokens[0]
        return self._tokens[caption]

    def __getitem__(self, i: int) -> dict[str, Any]:
        item: dict[str, Any] = {
            "image": self.load(self.sources[i]),
            "caption": self.captions[i],
            "index": self.indices[i],
            "label": self.labels[i],
        }
        if self.tokenizer is not None:
            item["text"] = self.tokens(self.captions[i])
        return item


def resolve_tokenizer(tokenizer: Union[str, Tokenizer, None], context_length: Optional[int]) -> Optional[Tokenizer]:
    """A tokenizer: a callable as is, a model name through ``open_clip.get_tokenizer``, or ``None``.

    Raises:
        ValueError: ``tokenizer`` is none of these, or ``context_length`` is given with a callable.

    Examples:
        >>> resolve_tokenizer("ViT-B-32", context_length=6)(["a photo"]).shape
        torch.Size([1, 6])
    """
    if tokenizer is None or callable(tokenizer):
        if context_length is not None and tokenizer is not None:
            raise ValueError("`context_length` only applies when `tokenizer` is an open_clip model name.")
        return tokenizer
    if isinstance(tokenizer, str):
        import open_clip

        return open_clip.get_tokenizer(tokenizer, context_length=context_length)
    raise ValueError(
        f"`tokenizer` must be an open_clip model name, a callable `tokenizer(list[str]) -> (n, context_length)` "
        f"or None, got {type(tokenizer).__name__}."
    )
