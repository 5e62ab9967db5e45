"""How callbacks obtain embeddings of a batch: the one mechanism every callback of this library uses.

An [`EmbeddingSource`][lightning_spectral.callbacks.EmbeddingSource] is either

- the dotted name of a submodule of the LightningModule (``"encoder"``, ``"model.visual"``): a forward hook
  records its output while the module's own ``training_step`` / ``validation_step`` runs, so no extra
  forward pass is needed; for batches the callback feeds itself (extra dataloaders) it calls the
  submodule on ``batch_input(batch)``; or
- a function ``fn(pl_module, batch) -> Tensor (N, d)``, called on demand.

The hook keeps the output of the last call since
[`EmbeddingSource.clear`][lightning_spectral.callbacks.EmbeddingSource.clear] (with its autograd graph
when gradients are on, which SPECAlign needs); a submodule called several times in one step is reported
once with a warning, because only one call can line up with the batch's samples.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional, Union

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from lightning_spectral._checks import check_features, check_selector

EmbeddingFn = Callable[["L.LightningModule", Any], Tensor]
BatchSelector = Union[str, int, Callable[[Any], Any], None]


def select(batch: Any, selector: BatchSelector, what: str = "batch_input") -> Any:
    """Pick part of a batch: ``None`` = the batch itself if it is a tensor, else its first element;
    an ``int`` indexes a tuple / list; a ``str`` keys a mapping (or an attribute); a function is applied.

    Raises:
        ValueError: the selector does not fit the batch, naming ``what`` and the fix.
    """
    if callable(selector):
        return selector(batch)
    if selector is None:
        if isinstance(batch, Tensor):
            return batch
        if isinstance(batch, Sequence) and not isinstance(batch, str) and len(batch) > 0:
            return batch[0]
        raise ValueError(
            f"`{what}`: cannot guess which part of a {type(batch).__name__} batch to use; pass a key, an index "
            "or a function `fn(batch)`."
        )
    try:
        if isinstance(selector, int):
            return batch[selector]
        if isinstance(batch, Mapping):
            return batch[selector]
        return getattr(batch, selector)
    except (KeyError, IndexError, AttributeError, TypeError):
        raise ValueError(
            f"`{what}`={selector!r} does not select anything in a {type(batch).__name__} batch; "
            "pass a key, an index or a function `fn(batch)`."
        ) from None


def as_embedding(output: Any, owner: str) -> Tensor:
    """The (N, d) tensor inside a module output: a tensor, or the first element of a tuple / list."""
    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    if not isinstance(output, Tensor):
        raise TypeError(
            f"{owner}: the embedding is a {type(output).__name__}, not a tensor; pass a function "
            "`fn(pl_module, batch) -> Tensor` that extracts it."
        )
    if output.ndim != 2:
        raise ValueError(
            f"{owner}: embeddings must have shape (N, d), got {tuple(output.shape)}; pool or flatten them "
            "(e.g. a function returning `tokens.mean(1)`)."
        )
    return output


class EmbeddingSource:
    """Embeddings of a batch from a named submodule (forward hook) or from a function.

    Args:
        source: dotted submodule name, or ``fn(pl_module, batch) -> Tensor (N, d)``.
        batch_input: for a submodule, what to feed it when the callback embeds a batch itself
            (see `select`); ignored for a function.
        owner: name used in error messages.

    Examples:
        >>> import torch, lightning as L
        >>> class M(L.LightningModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.encoder = torch.nn.Linear(3, 2)
        >>> module, source = M(), EmbeddingSource("encoder")
        >>> source.attach(module)
        >>> source.clear()
        >>> _ = module.encoder(torch.randn(4, 3))
        >>> source.captured().shape
        torch.Size([4, 2])
        >>> source.detach()
    """

    def __init__(self, source: Union[str, EmbeddingFn], batch_input: BatchSelector = None, owner: str = "") -> None:
        if not (isinstance(source, str) and source) and not callable(source):
            raise ValueError(
                f"{owner or 'EmbeddingSource'}: the embedding source (`embedding`; SPECAlign's `student`) must be a "
                f"submodule name such as 'encoder' or a function `fn(pl_module, batch) -> Tensor`, got {source!r}."
            )
        check_selector(batch_input, "batch_input", owner or "EmbeddingSource")
        self.source = source
        self.batch_input = batch_input
        self.owner = owner or "EmbeddingSource"
        self._handle: Optional[RemovableHandle] = None
        self._module: Optional[nn.Module] = None
        self._output: Optional[Tensor] = None
        self._calls = 0
        self._warned = False

    @property
    def uses_hook(self) -> bool:
        return isinstance(self.source, str)

    def attach(self, pl_module: nn.Module) -> None:
        """Register the forward hook on the named submodule (no-op for a function source)."""
        if not self.uses_hook or self._handle is not None:
            return
        try:
            self._module = pl_module.get_submodule(self.source)  # type: ignore[arg-type]
        except AttributeError:
            names = [name for name, _ in pl_module.named_modules() if name][:12]
            raise ValueError(
                f"{self.owner}: the LightningModule has no submodule {self.source!r}; "
                f"some it has: {names}. Pass its dotted name or a function `fn(pl_module, batch)`."
            ) from None
        self._handle = self._module.register_forward_hook(self._record)

    def detach(self) -> None:
        """Remove the hook and drop any captured output."""
        if self._handle is not None:
            self._handle.remove()
        self._handle, self._module, self._output = None, None, None

    def _record(self, _module: nn.Module, _inputs: Any, output: Any) -> None:
        self._calls += 1
        self._output = as_embedding(output, self.owner)

    def clear(self) -> None:
        """Forget what was captured before (called at the start of each step)."""
        self._output, self._calls = None, 0

    def captured(self) -> Optional[Tensor]:
        """The submodule's output of the last call since [`clear`][lightning_spectral.callbacks.EmbeddingSource.clear],
        or ``None``."""
        if self._calls > 1 and not self._warned:
            self._warned = True
            rank_zero_warn(
                f"{self.owner}: submodule {self.source!r} ran {self._calls} times in one step; its last output is "
                "used. Pass a function `fn(pl_module, batch)` if another call lines up with the batch."
            )
        return self._output

    def embed(self, pl_module: L.LightningModule, batch: Any) -> Tensor:
        """Compute the embeddings of ``batch`` now (under the caller's grad mode)."""
        if not self.uses_hook:
            return as_embedding(self.source(pl_module, batch), self.owner)  # type: ignore[operator]
        if self._module is None:
            self.attach(pl_module)
        self.clear()
        output = self._module(select(batch, self.batch_input, "batch_input"))  # type: ignore[misc]
        self._output = None
        return as_embedding(output, self.owner)

    def captured_or_embed(self, pl_module: L.LightningModule, batch: Any) -> Tensor:
        """The embedding captured during the current step, or computed now if the step did not produce one."""
        captured = self.captured() if self.uses_hook else None
        return captured if captured is not None else self.embed(pl_module, batch)


class ReferenceEmbedding:
    """A frozen reference embedding of a batch: a module, a table of precomputed features, or a function.

    Args:
        reference: a frozen ``nn.Module`` (an open_clip / timm encoder), run in eval mode under ``no_grad`` on
            ``batch_input(batch)``; a (N_dataset, d) tensor / array, a features file path (.npy / .pt /
            .safetensors, loaded without unpickling), or any table with ``__getitem__(ids)`` and ``shape`` (e.g.
            [`PrecomputedFeatures`][lightning_spectral.encoders.PrecomputedFeatures]), looked up by the dataset indices
            ``index(batch)``; or a function ``fn(batch) -> Tensor``.
        batch_input: what a reference module is fed (see `select`).
        index: where a batch holds its dataset indices (required for a table).
        owner: name used in error messages.

    Examples:
        >>> import torch
        >>> table = ReferenceEmbedding(torch.eye(5), index="index")
        >>> table({"index": torch.tensor([3, 1])}, torch.device("cpu"))
        tensor([[0., 0., 0., 1., 0.],
                [0., 1., 0., 0., 0.]])
    """

    def __init__(self, reference: Any, batch_input: BatchSelector = None, index: BatchSelector = None, owner: str = ""):
        self.owner = owner or "ReferenceEmbedding"
        check_selector(batch_input, "reference_input", self.owner)
        check_selector(index, "index", self.owner)
        self.batch_input = batch_input
        self.index = index
        if isinstance(reference, (str, os.PathLike)):  # a features file (.npy / .pt / .safetensors)
            from lightning_spectral.encoders import PrecomputedFeatures

            try:
                reference = PrecomputedFeatures(reference)
            except FileNotFoundError:
                raise ValueError(
                    f"{self.owner}: the reference {os.fspath(reference)!r} is not an existing features file; a string "
                    "is read as the path of precomputed features (.npy / .pt / .safetensors). For an encoder, pass "
                    "the module, e.g. `lightning_spectral.encoders.TimmReference('vit_base_patch14_dinov2', "
                    "weights=PATH)`."
                ) from None
        if isinstance(reference, np.ndarray):
            reference = torch.from_numpy(np.ascontiguousarray(reference))
        self.is_table = (
            not isinstance(reference, nn.Module) and hasattr(reference, "__getitem__") and hasattr(reference, "shape")
        )
        if self.is_table:
            if index is None:
                raise ValueError(
                    f"{self.owner}: precomputed reference features are looked up by sample index; pass `index`, "
                    "the key / position of the dataset indices in a batch (e.g. index='index')."
                )
            if len(reference.shape) != 2:
                raise ValueError(
                    f"{self.owner}: reference features must be (N_dataset, d), got {tuple(reference.shape)}."
                )
            if isinstance(reference, Tensor):  # dense, floating, finite, with rows: refused now, not in the first step
                check_features(reference, "reference", owner=self.owner)
                if reference.shape[0] == 0:
                    raise ValueError(f"{self.owner}: the reference features have no rows.")
        elif not callable(reference):
            raise ValueError(
                f"{self.owner}: the reference must be a frozen nn.Module, a (N_dataset, d) tensor / array of "
                f"precomputed features or a function fn(batch) -> Tensor, got {type(reference).__name__}."
            )
        self.reference = reference

    def describe(self) -> str:
        """A short label of the reference (its kind and shape or type), e.g. for a callback's ``state_key``."""
        if self.is_table:
            return f"table{tuple(int(n) for n in self.reference.shape)}"
        if isinstance(self.reference, nn.Module):
            return type(self.reference).__name__
        return getattr(self.reference, "__qualname__", type(self.reference).__name__)

    def to(self, device: torch.device) -> "ReferenceEmbedding":
        """Move a reference module to ``device``, frozen (eval mode, no gradients)."""
        if isinstance(self.reference, nn.Module):
            self.reference.to(device).eval().requires_grad_(False)
        return self

    @torch.no_grad()
    def __call__(self, batch: Any, device: torch.device) -> Tensor:
        """The reference embedding (N, d) of ``batch`` on ``device``."""
        if self.is_table:
            ids = torch.as_tensor(select(batch, self.index, "index")).long().flatten().cpu()
            size = int(self.reference.shape[0])
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
                raise IndexError(
                    f"{self.owner}: sample index {int(ids.max())} is outside the {size} precomputed reference "
                    "features; the `index` entries of a batch must be dataset indices."
                )
            return torch.as_tensor(self.reference[ids]).to(device)
        if isinstance(self.reference, nn.Module):
            self.reference.eval()
            output = self.reference(select(batch, self.batch_input, "reference_input"))
            return as_embedding(output, self.owner)
        return as_embedding(self.reference(batch), self.owner).to(device)


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor of a (nested) batch to ``device``, as Lightning does for the loop's own batches."""
    from lightning.fabric.utilities.apply_func import move_data_to_device

    return move_data_to_device(batch, device)
