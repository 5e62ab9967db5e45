"""StderrProgressBar: progress on stderr, redrawn bars on a terminal, a quiet line now and then in a log.

Lightning's default progress bar draws on stdout with carriage returns: a job whose output is redirected to a
file gets every redraw (about 130 KB for the 80-second demo) mixed into the results it prints, and a recipe that
turns the bar off prints nothing for minutes. This bar keeps stdout for results: on a terminal it is Lightning's
``TQDMProgressBar`` drawing on stderr; when stderr is not a terminal (a log file, a pipe, CI) it writes one line
at the start, then after the first epoch, then at most every ``every_s`` seconds (inside an epoch: how far; at
an epoch's end: its progress-bar metrics; inside an epoch only when it lasts longer than that), and at the end.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import redirect_stdout
from typing import Any, Optional

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from tqdm import tqdm as Tqdm
from typing_extensions import override

from lightning_spectral._checks import check_positive

__all__ = ["StderrProgressBar"]


def duration(seconds: float) -> str:
    """``"42 s"``, ``"3.5 min"``, ``"1.5 h"``.

    Examples:
        >>> duration(4.2), duration(210), duration(5400)
        ('4 s', '3.5 min', '1.5 h')
    """
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class StderrProgressBar(TQDMProgressBar):
    """Training progress on stderr: tqdm bars when stderr is a terminal, else quiet periodic lines.

    Lines (rank 0 only), e.g.::

        epoch 0 (1 of 20) done, 4 s elapsed, about 76 s left: train/contrastive 3.91, val/zero_shot_acc 0.25
        epoch 7 (8 of 20): 12/19 batches, 31 s elapsed, about 49 s left

    The epoch is Lightning's index (``trainer.current_epoch``, from 0, as in checkpoint names, loggers and the
    callbacks' epoch lines), then how many of ``max_epochs`` it makes.

    Args:
        every_s: at most one line every ``every_s`` seconds (besides the first epoch's and the last).
        bars: ``True`` draws bars, ``False`` writes lines, ``None`` (default) decides by ``sys.stderr.isatty()``.
        refresh_rate: batches between redraws of a bar (``TQDMProgressBar``'s).

    Raises:
        ValueError: ``every_s`` not a number > 0, ``bars`` not a bool or ``None``.

    Examples:
        >>> bar = StderrProgressBar(every_s=30)
        >>> StderrProgressBar(every_s=0)
        Traceback (most recent call last):
        ...
        ValueError: `every_s` must be a finite number > 0, got 0.0.
    """

    def __init__(self, every_s: float = 30.0, bars: Optional[bool] = None, refresh_rate: int = 1) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.every_s = check_positive(every_s, "every_s")
        if bars is not None and not isinstance(bars, bool):
            raise ValueError(f"`bars` must be True, False or None (decide by the terminal), got {bars!r}.")
        self.bars = bars
        self._lines = False
        self._started = 0.0
        self._epoch_started = 0.0
        self._last_line = -math.inf

    # ---- where the bars draw -------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._lines = not (self.bars if self.bars is not None else sys.stderr.isatty())
        if self._lines:
            super().disable()  # the tqdm bars draw nothing; the lines below report instead

    @override
    def enable(self) -> None:
        if not self._lines:  # the tuners re-enable the bar after their trial runs
            super().enable()

    def _on_stderr(self, make: Any) -> Tqdm:
        with redirect_stdout(sys.stderr):  # TQDMProgressBar draws on `sys.stdout` as it is when a bar is made
            return make()

    @override
    def init_sanity_tqdm(self) -> Tqdm:
        return self._on_stderr(super().init_sanity_tqdm)

    @override
    def init_train_tqdm(self) -> Tqdm:
        return self._on_stderr(super().init_train_tqdm)

    @override
    def init_validation_tqdm(self) -> Tqdm:
        return self._on_stderr(super().init_validation_tqdm)

    @override
    def init_test_tqdm(self) -> Tqdm:
        return self._on_stderr(super().init_test_tqdm)

    @override
    def init_predict_tqdm(self) -> Tqdm:
        return self._on_stderr(super().init_predict_tqdm)

    # ---- lines ---------------------------------------------------------------------------------------------------
    def _say(self, trainer: L.Trainer, text: str) -> None:
        if trainer.is_global_zero:
            print(text, file=sys.stderr, flush=True)
        self._last_line = time.monotonic()

    def _where(self, trainer: L.Trainer, batches_done: int) -> str:
        """``"12 s elapsed, about 40 s left"`` from the share of all training batches done so far."""
        elapsed = time.monotonic() - self._started
        text = f"{duration(elapsed)} elapsed"
        per_epoch, epochs = self.total_train_batches, trainer.max_epochs
        if isinstance(per_epoch, int) and per_epoch > 0 and epochs is not None and epochs > 0:
            done = trainer.current_epoch * per_epoch + batches_done
            total = epochs * per_epoch
            if trainer.max_steps is not None and trainer.max_steps > 0:
                total = min(total, trainer.max_steps * trainer.accumulate_grad_batches)
            if 0 < done < total:
                text += f", about {duration(elapsed * (total - done) / done)} left"
        return text

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._started = time.monotonic()
        if self._lines:
            epochs = _max_epochs(trainer)
            plural = "" if epochs == 1 else "s"
            self._say(trainer, f"training: {epochs} epoch{plural} of {self.total_train_batches} batches (a line at "
                               f"most every {self.every_s:g} s; stderr is not a terminal)")

    @override
    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        super().on_train_epoch_start(trainer, *_)
        self._epoch_started = time.monotonic()

    @override
    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        now = time.monotonic()
        # inside an epoch only when epochs are long: short ones report at their end, with their metrics
        if self._lines and min(now - self._last_line, now - self._epoch_started) >= self.every_s:
            done = batch_idx + 1
            self._say(trainer, f"epoch {self._epoch(trainer)}: {done}/{self.total_train_batches} batches, "
                               f"{self._where(trainer, done)}")

    @override
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if not self._lines:
            return
        first, last = trainer.current_epoch == 0, trainer.current_epoch + 1 == trainer.max_epochs
        if first or last or trainer.should_stop or time.monotonic() - self._last_line >= self.every_s:
            metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
            values = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
            total = self.total_train_batches if isinstance(self.total_train_batches, int) else 0
            self._say(trainer, f"epoch {self._epoch(trainer)} done, {self._where(trainer, total)}"
                               + (f": {values}" if values else ""))

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if self._lines:
            self._say(trainer, f"training done in {duration(time.monotonic() - self._started)}")

    @staticmethod
    def _epoch(trainer: L.Trainer) -> str:
        return f"{trainer.current_epoch} ({trainer.current_epoch + 1} of {_max_epochs(trainer)})"


def _max_epochs(trainer: L.Trainer) -> Any:
    """The fit's ``max_epochs``, or ``"?"`` where it is unbounded (``None`` or -1)."""
    return trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else "?"
