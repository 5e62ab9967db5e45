"""SPECAlign in a tiny Trainer.fit: align a linear encoder's embedding to a
reference embedding.

The inputs hold 3 clusters in their first 4 coordinates and loud noise in
the other 12; the reference embedding (precomputed, looked up by sample
index) groups the 3 clusters. The task loss alone does not care about the
clusters; SPECAlign adds weight * SPEC-diff(encoder output, reference) to
it."""

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import SPECAlign
from lightning_spectral.functional import spec

g = torch.Generator().manual_seed(0)
N = 512
labels = torch.arange(N) % 3
centers = 3.0 * torch.randn(3, 4, generator=g)
x = torch.cat(
    [
        centers[labels] + 0.3 * torch.randn(N, 4, generator=g),
        4.0 * torch.randn(N, 12, generator=g),
    ],
    1,
)
# (N, 8)
reference = torch.nn.functional.one_hot(
    labels, 8
).float() + 0.1 * torch.randn(N, 8, generator=g)


class AutoEncoder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        # the student embedding SPECAlign hooks
        self.encoder = torch.nn.Linear(16, 8)
        self.decoder = torch.nn.Linear(8, 16)

    def training_step(self, batch, batch_idx):
        inputs, _index = batch
        return 1e-3 * torch.nn.functional.mse_loss(
            self.decoder(self.encoder(inputs)), inputs
        )

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


def spec_diff(module: AutoEncoder) -> float:
    with torch.no_grad():
        return float(
            spec(module.encoder(x), reference, kernel="cosine").spec_diff
        )


def fit(module: AutoEncoder, callbacks: list) -> L.Trainer:
    trainer = L.Trainer(
        max_epochs=5,
        callbacks=callbacks,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        module,
        DataLoader(
            TensorDataset(x, torch.arange(N)), batch_size=128, shuffle=True
        ),
    )
    return trainer


module, baseline = AutoEncoder(), AutoEncoder()
before = spec_diff(module)
align = SPECAlign(
    reference=reference,  # precomputed (N_dataset, d_ref) features ...
    index=1,  # ... looked up by the sample indices at batch[1]
    # the submodule whose output is the student embedding (a forward hook)
    student="encoder",
    weight=1.0,  # beta in L + beta * SPEC-diff
    kernel="cosine",
)
trainer = fit(module, [align])
fit(baseline, [])  # the same training without the penalty

logged = trainer.callback_metrics
print(
    "logged, last epoch means:",
    {
        k: round(float(v), 4)
        for k, v in logged.items()
        if k.endswith("_epoch")
    },
)
print(
    f"SPEC-diff of the whole set: {before:.3f} before, "
    f"{spec_diff(module):.3f} after {align.penalised_steps} penalised steps "
    f"({spec_diff(baseline):.3f} without SPECAlign)"
)
