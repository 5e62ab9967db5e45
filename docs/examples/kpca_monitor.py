"""KPCAOODMonitor in a tiny Trainer.fit: kernel PCA OOD monitoring of an
encoder's embeddings.

scikit-learn digits: the model learns to classify digits 0-7 (in-
distribution); digits 8 and 9 are the out-of-distribution set. The monitor
fits its detector on the training data's embeddings, calibrates a threshold
on the validation data, and logs detection metrics for the OOD loader."""

import lightning as L
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import KPCAOODMonitor

data = load_digits()
order = torch.randperm(
    len(data.target), generator=torch.Generator().manual_seed(0)
)
x = torch.tensor(data.data / 16.0, dtype=torch.float32)[order]
y = torch.tensor(data.target)[order]
inside, labels, outside = x[y < 8], y[y < 8], x[y >= 8]


def loader(
    features: torch.Tensor, targets: torch.Tensor, shuffle: bool = False
) -> DataLoader:
    return DataLoader(
        TensorDataset(features, targets), batch_size=50, shuffle=shuffle
    )


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(64, 16)  # the monitored embedding
        self.head = torch.nn.Linear(16, 8)

    def training_step(self, batch, batch_idx):
        features, targets = batch
        return torch.nn.functional.cross_entropy(
            self.head(self.encoder(features)), targets
        )

    def validation_step(self, batch, batch_idx):
        self.encoder(
            batch[0]
        )  # the monitor's forward hook records this output

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.3)


monitor = KPCAOODMonitor(
    embedding="encoder",  # submodule whose output is the embedding
    # in-distribution data the detector is fitted on
    fit_on=loader(inside[:800], labels[:800]),
    ood_dataloaders={
        "digits89": loader(outside, torch.zeros(len(outside), dtype=torch.long))
    },
    # calibrated threshold keeps 95 % of in-distribution validation samples
    tpr=0.95,
    sigma=0.5, n_frequencies=128, explained_variance=0.9,
)  # fmt: skip
trainer = L.Trainer(
    max_epochs=1,
    callbacks=[monitor],
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
model = Classifier()
trainer.fit(
    model,
    loader(inside[:800], labels[:800], shuffle=True),
    loader(inside[800:1200], labels[800:1200]),
)

print(
    {
        k: round(float(v), 3)
        for k, v in trainer.callback_metrics.items()
        if k.startswith("ood/")
    }
)
# the fitted, calibrated detector stays usable after training
with torch.no_grad():
    flags_in = monitor.detector.predict(model.encoder(inside[1200:]))
    flags_out = monitor.detector.predict(model.encoder(outside))
print(
    f"detector.predict: {float(flags_in.float().mean()):.1%} "
    "of held-out digits 0-7 and "
    f"{float(flags_out.float().mean()):.1%} of digits 8/9 flagged"
)
