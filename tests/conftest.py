"""What the tests share: scikit-learn's digits as tensors, a quiet CPU Trainer, a recipe script run as a user runs it,
and a small digits classifier."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
# the recipes' own modules (their models: digits_vae, clip_finetune), as a recipe script imports them
sys.path.insert(0, str(ROOT / "recipes"))


def run_recipe_script(script: str, config: str, save_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """``python recipes/<script> --config recipes/configs/<config> ...`` in a new process, logs under ``save_dir``;
    stdout and stderr captured as text."""
    command = [sys.executable, str(ROOT / "recipes" / script), "--config", str(ROOT / "recipes" / "configs" / config),
               f"--trainer.logger.init_args.save_dir={save_dir}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@lru_cache
def digits() -> tuple[Tensor, Tensor]:
    """scikit-learn's 1,797 handwritten digits: pixels (N, 64) in [0, 1] (float32) and labels (N,)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return torch.tensor(data.data / 16.0, dtype=torch.float32), torch.tensor(data.target)


def quiet_trainer(root: Path, callbacks: Sequence[L.Callback] = (), logger: bool = False, **kwargs: Any) -> L.Trainer:
    """A one-epoch CPU Trainer that prints nothing and writes nothing but what a test asks for: ``logger=True`` gives a
    TensorBoard logger in ``root``; checkpoints are off unless ``enable_checkpointing=True``."""
    options: dict[str, Any] = dict(
        max_epochs=1, accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=root,
    )  # fmt: skip
    options.update(kwargs)
    return L.Trainer(callbacks=list(callbacks), logger=TensorBoardLogger(root) if logger else False, **options)


class LinearModule(L.LightningModule):
    """A (4 -> 3) linear encoder whose batches are ``(x (B, 4), ...)``: the smallest module a callback can hook."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(4, 3)

    def training_step(self, batch: Any, _: int) -> Tensor:
        return self.encoder(batch[0]).square().mean()

    def validation_step(self, batch: Any, _: int) -> None:
        self.encoder(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class DigitsClassifier(L.LightningModule):
    """A linear ``encoder`` (64 -> ``width``) and a linear ``head`` trained to classify digits (cross-entropy, SGD);
    batches are ``(pixels, labels, ...)``. Validation only calls the encoder (the callbacks read its output)."""

    def __init__(self, width: int = 16, classes: int = 10, lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(64, width)
        self.head = torch.nn.Linear(width, classes)
        self.lr = lr

    def training_step(self, batch: Any, _: int) -> Tensor:
        x, y = batch[0], batch[1]
        return torch.nn.functional.cross_entropy(self.head(self.encoder(x)), y)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.encoder(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class CollectiveBytes(L.Callback):
    """Counts the bytes this rank receives through ``torch.distributed`` collectives (all-reduce: the tensor,
    all-gather: every rank's part) during each validation epoch's end, as a pair of callbacks around the callback
    under test: ``CollectiveBytes(path, "start")``, the callback, ``CollectiveBytes(path, "end")``.

    The ``"start"`` instance first counts one ``compute()`` of every metric in ``metrics`` (the baseline), and the
    ``"end"`` instance writes ``{"compute": ..., "epoch_end": ...}`` per validation epoch to ``path/rank{r}.json``.
    The patches are installed in ``setup``, inside the (spawned) process that runs.
    """

    counted: dict[str, int] = {}

    def __init__(self, path: Path, role: str, metrics: Any = None) -> None:
        self.path, self.role, self.metrics = Path(path), role, metrics

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        import torch.distributed as dist

        if getattr(dist, "_counting", False):
            return
        counted = CollectiveBytes.counted
        counted.setdefault("bytes", 0)
        reduce, gather = dist.all_reduce, dist.all_gather

        def all_reduce(tensor: Tensor, *args: Any, **kwargs: Any) -> Any:
            counted["bytes"] += tensor.numel() * tensor.element_size()
            return reduce(tensor, *args, **kwargs)

        def all_gather(tensors: list, tensor: Tensor, *args: Any, **kwargs: Any) -> Any:
            counted["bytes"] += len(tensors) * tensor.numel() * tensor.element_size()
            return gather(tensors, tensor, *args, **kwargs)

        dist.all_reduce, dist.all_gather, dist._counting = all_reduce, all_gather, True

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        import json

        counted = CollectiveBytes.counted
        if self.role == "start":
            counted["bytes"] = 0
            for metric in self.metrics.values():
                metric.compute()
            counted["compute"], counted["bytes"] = counted["bytes"], 0
            return
        record = {"compute": counted["compute"], "epoch_end": counted["bytes"]}
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
