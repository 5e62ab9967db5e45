"""The checkpoint file checked before Lightning loads it: a cut-off file is refused by name, not with torch's
``PytorchStreamReader failed reading zip archive``.

No callback hook sees the ``ckpt_path`` of ``Trainer.fit(ckpt_path=...)`` before Lightning reads the file: Lightning
2.x calls the callbacks' ``setup`` and then loads the checkpoint (``_CheckpointConnector.resume_start`` through
``strategy.load_checkpoint``), and ``trainer.ckpt_path`` is only set by that load. What every load goes through is
the strategy's checkpoint plugin (``strategy.checkpoint_io``, public and settable), so
[`CheckedCheckpointIO`][lightning_spectral.callbacks.CheckedCheckpointIO] wraps it: at ``setup`` the callbacks of
this library install it (``guard_checkpoint_loading``) and at ``teardown`` (or ``on_exception``) put the plugin back
(``release_checkpoint_loading``). Pass it as a Trainer plugin to check loads without these callbacks.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import lightning as L
from lightning.pytorch.plugins.io import CheckpointIO, TorchCheckpointIO

from lightning_spectral.io.checkpoints import check_checkpoint


class CheckedCheckpointIO(CheckpointIO):
    """A checkpoint plugin that checks a file with
    [`check_checkpoint`][lightning_spectral.io.check_checkpoint] before ``inner`` loads it; saving and removing
    are ``inner``'s. Folders (sharded FSDP / DeepSpeed checkpoints) and URLs load unchecked.

    Args:
        inner: the plugin that reads and writes (default: Lightning's ``TorchCheckpointIO``).

    Examples:
        >>> import lightning as L
        >>> trainer = L.Trainer(plugins=[CheckedCheckpointIO()], logger=False, enable_progress_bar=False)
        >>> type(trainer.strategy.checkpoint_io).__name__
        'CheckedCheckpointIO'
    """

    def __init__(self, inner: Optional[CheckpointIO] = None) -> None:
        self.inner = TorchCheckpointIO() if inner is None else inner

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self.inner.save_checkpoint(*args, **kwargs)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``inner.load_checkpoint(path, ...)`` once ``path`` passed
        [`check_checkpoint`][lightning_spectral.io.check_checkpoint].

        Raises:
            CheckpointError: no file at ``path``, or a cut-off one (a ``ValueError`` naming ``ckpt_path``, the file,
                its size and the fix).
        """
        if not (isinstance(path, (str, os.PathLike)) and os.path.isdir(path)):
            check_checkpoint(path, argument="ckpt_path")
        return self.inner.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self.inner.remove_checkpoint(*args, **kwargs)

    def teardown(self) -> None:
        self.inner.teardown()

    def __getattr__(self, name: str) -> Any:  # members of a user's own plugin stay reachable
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def guard_checkpoint_loading(trainer: L.Trainer) -> bool:
    """Wrap ``trainer.strategy.checkpoint_io`` in a
    [`CheckedCheckpointIO`][lightning_spectral.callbacks.CheckedCheckpointIO] unless it is one already; whether this
    call wrapped it (the caller then puts it back with `release_checkpoint_loading`)."""
    strategy = trainer.strategy
    if isinstance(strategy.checkpoint_io, CheckedCheckpointIO):
        return False
    strategy.checkpoint_io = CheckedCheckpointIO(strategy.checkpoint_io)
    return True


def release_checkpoint_loading(trainer: L.Trainer) -> None:
    """Put back the plugin `guard_checkpoint_loading` wrapped (nothing if another plugin replaced it since)."""
    strategy = trainer.strategy
    checked = strategy.checkpoint_io
    if isinstance(checked, CheckedCheckpointIO):
        strategy.checkpoint_io = checked.inner
