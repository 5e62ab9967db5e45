"""EmbeddingMetrics in a tiny Trainer.fit: diversity, novelty, a two-sample
test and SPEC of the validation embeddings, logged every validation epoch
without touching validation_step.

scikit-learn digits, a linear encoder trained to classify them; the
reference side of the two-sample metrics is the training data (re-embedded
each epoch: "train vs validation"); the SPEC reference is a frozen random
projection of the same validation images."""

import lightning as L
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import EmbeddingMetrics
from lightning_spectral.metrics import (
    FastMMD,
    FINCNovelty,
    FKEAVendi,
    SPECDivergence,
)

data = load_digits()
x, y = torch.tensor(data.data / 16.0, dtype=torch.float32), torch.tensor(
    data.target
)
# a random split: the file is
ids = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
# ordered by writer, and train vs validation would differ (FastMMD detects it)
x, y = x[ids], y[ids]
train, val = TensorDataset(x[:1000], y[:1000], ids[:1000]), TensorDataset(
    x[1000:1600], y[1000:1600], ids[1000:1600]
)


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(64, 16)  # the measured embedding
        self.head = torch.nn.Linear(16, 10)

    def training_step(self, batch, batch_idx):
        features, targets, _ = batch
        return torch.nn.functional.cross_entropy(
            self.head(self.encoder(features)), targets
        )

    def validation_step(self, batch, batch_idx):
        features, targets, _ = batch
        self.log(
            "val/loss",
            torch.nn.functional.cross_entropy(
                self.head(self.encoder(features)), targets
            ),
        )

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


torch.manual_seed(1)
reference_encoder = torch.nn.Linear(
    64, 12
)  # a frozen "reference encoder" for SPEC
metrics = EmbeddingMetrics(
    {
        "vendi": FKEAVendi(sigma=2.0, n_frequencies=128),
        # validation against the training data
        "novelty": FINCNovelty(sigma=2.0, n_frequencies=128),
        "mmd": FastMMD(sigma=2.0, n_frequencies=64),  # also logs mmd_p_value
        # encoder vs reference_encoder
        "spec": SPECDivergence("cosine", in_features=(16, 12)),
    },
    # its output, captured during validation_step by a forward hook
    embedding="encoder",
    reference_dataloader=DataLoader(train, batch_size=100),
    spec_reference=reference_encoder,
    spec_reference_input=0,  # the reference encoder is fed batch[0]
)
trainer = L.Trainer(
    max_epochs=1,
    callbacks=[metrics],
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(
    Classifier(),
    DataLoader(train, batch_size=100, shuffle=True),
    DataLoader(val, batch_size=100),
)
print(
    {
        k: float(f"{float(v):.4g}")
        for k, v in trainer.callback_metrics.items()
        if k.startswith("val/")
    }
)
