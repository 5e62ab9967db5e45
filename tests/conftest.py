"""What the tests share: scikit-learn's digits as tensors, a quiet CPU Trainer, and a small digits classifier."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor


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
