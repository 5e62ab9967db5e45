"""A DataLoader that a run resumed from a mid-epoch checkpoint continues where it stopped.

Lightning restores a training loader's position only when the loader has ``state_dict`` / ``load_state_dict``
(its ``_Stateful`` protocol); a plain ``DataLoader`` restarts the epoch from its first batch and runs only as many
batches as were left, so a resumed run trains on the first batches twice and never on the last ones (Lightning
warns "your dataloader is not resumable"): its weights, and every value logged after, differ from the
uninterrupted run's.

[`ResumableDataLoader`][lightning_spectral.data.ResumableDataLoader] is such a loader. Lightning hands a loader its
saved state only when the loader is
created after the checkpoint's loop state is restored; a ``configure_optimizers`` that reads
``trainer.estimated_stepping_batches`` (a warm-up / cosine schedule) creates the training loader before that, and
the state is silently not applied. [`ResumesMidEpoch`][lightning_spectral.data.ResumesMidEpoch] makes a datamodule carry
its training loader's
position itself (the datamodule's ``state_dict`` / ``load_state_dict`` hooks, restored before any loader is
created). The position is a [`LoaderPosition`][lightning_spectral.data.LoaderPosition] the loader shares with the loader
Lightning rebuilds from its
arguments under DDP (with a ``DistributedSampler``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

from torch.utils.data import DataLoader

__all__ = ["LoaderPosition", "ResumableDataLoader", "ResumesMidEpoch"]


class LoaderPosition:
    """Where a training loader is: the sampler epoch of its current pass and the batches it handed out, plus the
    position to resume at (set by [`load_state_dict`][lightning_spectral.data.LoaderPosition.load_state_dict], used by
    the next pass over the same epoch).

    Examples:
        >>> position = LoaderPosition()
        >>> position.load_state_dict({"epoch": 3, "batches": 5})
        >>> position.start(epoch=3, length=10), position.start(epoch=3, length=10)   # used once
        (5, 0)
        >>> position.load_state_dict({"epoch": 3, "batches": 5})
        >>> position.start(epoch=4, length=10)      # another epoch (an end-of-epoch checkpoint): from the start
        0
    """

    def __init__(self) -> None:
        self.epoch: Optional[int] = None
        self.batches = 0
        self.resume: Optional[dict[str, Any]] = None

    def start(self, epoch: Optional[int], length: int) -> int:
        """Begin a pass over sampler epoch ``epoch`` of ``length`` batches; returns the batch to start at: the
        saved position when it belongs to this epoch and lies inside it, else 0."""
        saved, self.resume = self.resume, None
        start = 0
        if saved is not None and saved["epoch"] == epoch and 0 < saved["batches"] < length:
            start = saved["batches"]
        self.epoch, self.batches = epoch, start
        return start

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "batches"}``: the sampler epoch of the current pass and the batches it handed out."""
        return {"epoch": self.epoch, "batches": self.batches}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the next pass over the saved epoch at the saved batch.

        Raises:
            ValueError: ``state_dict`` is not ``{"epoch": int or None, "batches": int >= 0}`` (the checkpoint was
                written with another loader).
        """
        valid = (
            isinstance(state_dict, dict)
            and {"epoch", "batches"} <= set(state_dict)
            and (state_dict["epoch"] is None or isinstance(state_dict["epoch"], int))
            and isinstance(state_dict["batches"], int)
            and state_dict["batches"] >= 0
        )
        if not valid:
            raise ValueError(
                "ResumableDataLoader: the checkpoint's loader state must be {'epoch': int or None, 'batches': int "
                f">= 0}}, got {state_dict!r}; resume with the datamodule (and loader) the checkpoint was written with."
            )
        self.resume = {"epoch": state_dict["epoch"], "batches": state_dict["batches"]}


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` whose position in the epoch travels in Lightning checkpoints.

    ``state_dict()`` is ``{"epoch": e, "batches": k}``: ``k`` batches of the pass over sampler epoch ``e`` were
    handed out (Lightning fetches a sized loader's batches one at a time, so at a checkpoint ``k`` batches were
    trained on). After ``load_state_dict``, the next pass over the same sampler epoch starts at batch ``k``: the
    batch sampler's index lists of that epoch (``set_epoch`` applied, DDP's ``DistributedSampler`` included) are
    drawn again and the first ``k`` skipped without loading a sample. A pass over another epoch (a checkpoint
    written at the end of an epoch) starts at the first batch.

    The sampler must give the same order for the same epoch (``DistributedSampler``,
    [`EpochShuffle`][lightning_spectral.data.EpochShuffle], a seeded sampler with ``set_epoch`` and ``epoch``); with a
    sampler that has no ``epoch`` attribute (a fixed order) a saved position inside the epoch is always resumed.

    Args:
        *args: ``DataLoader``'s arguments.
        position: the [`LoaderPosition`][lightning_spectral.data.LoaderPosition] to report to (a datamodule's, see
            [`ResumesMidEpoch`][lightning_spectral.data.ResumesMidEpoch]);
            default: a new one.
        **kwargs: ``DataLoader``'s arguments.

    Examples:
        >>> loader = ResumableDataLoader(list(range(10)), batch_size=4)
        >>> batches = iter(loader); _ = next(batches); loader.state_dict()
        {'epoch': None, 'batches': 1}
        >>> again = ResumableDataLoader(list(range(10)), batch_size=4)
        >>> again.load_state_dict(loader.state_dict())
        >>> [batch.tolist() for batch in again], len(again)   # the rest of the epoch, then whole epochs
        ([[4, 5, 6, 7], [8, 9]], 3)
        >>> len(list(again))
        3
    """

    def __init__(self, *args: Any, position: Optional[LoaderPosition] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.position = position if position is not None else LoaderPosition()

    def _sampler_epoch(self) -> Optional[int]:
        for sampler in (self.sampler, getattr(self.batch_sampler, "sampler", None)):
            epoch = getattr(sampler, "epoch", None)
            if isinstance(epoch, int) and not isinstance(epoch, bool):
                return epoch
        return None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        # a generator: this body runs at the first `next`, after Lightning's `set_epoch` of the epoch
        position = self.position
        start = position.start(self._sampler_epoch(), len(self))
        if start == 0:
            source: Any = super().__iter__()
        else:
            remaining = list(self.batch_sampler)[start:]  # index lists only: no sample is loaded
            source = DataLoader(
                self.dataset,
                batch_sampler=remaining,
                num_workers=self.num_workers,
                collate_fn=self.collate_fn,
                pin_memory=self.pin_memory,
                timeout=self.timeout,
                worker_init_fn=self.worker_init_fn,
                multiprocessing_context=self.multiprocessing_context,
                generator=self.generator,
            )
        for batch in source:
            position.batches += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "batches"}``: the sampler epoch of the current pass and the batches it handed out."""
        return self.position.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Start the next pass over the saved epoch at the saved batch (see
        [`LoaderPosition.load_state_dict`][lightning_spectral.data.LoaderPosition.load_state_dict]).
        """
        self.position.load_state_dict(state_dict)


class ResumesMidEpoch:
    """Mixin for a ``LightningDataModule``: the position of its training loader (a
    [`ResumableDataLoader`][lightning_spectral.data.ResumableDataLoader]
    built with ``position=self.train_position``) is saved with the datamodule's state in checkpoints, and a
    resumed run's training loader starts where the checkpointed one stopped.

    Examples:
        >>> class Data(ResumesMidEpoch):   # in practice also a LightningDataModule
        ...     def train_dataloader(self):
        ...         return ResumableDataLoader(list(range(10)), batch_size=4, position=self.train_position)
        >>> data = Data(); batches = iter(data.train_dataloader()); _ = next(batches)
        >>> state = data.state_dict(); state
        {'train_loader': {'epoch': None, 'batches': 1}}
        >>> resumed = Data(); resumed.load_state_dict(state)
        >>> [batch.tolist() for batch in resumed.train_dataloader()]
        [[4, 5, 6, 7], [8, 9]]
    """

    _train_position: Optional[LoaderPosition] = None

    @property
    def train_position(self) -> LoaderPosition:
        """The position every training loader of this datamodule reports to."""
        if self._train_position is None:
            self._train_position = LoaderPosition()
        return self._train_position

    def state_dict(self) -> dict[str, Any]:
        """``{"train_loader": {"epoch", "batches"}}``."""
        return {"train_loader": self.train_position.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the training loader at the saved position (a checkpoint without one: from the epoch's start)."""
        if "train_loader" in state_dict:
            self.train_position.load_state_dict(state_dict["train_loader"])
