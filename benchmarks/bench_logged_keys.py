"""What a GAN run logs, and how large each metric's own surface is.

    python benchmarks/bench_logged_keys.py [--epochs 2] [--gallery-modes 4] [--n-samples 600] [--r 256]

A small GAN (two MLPs, manual optimisation, two optimisers) trains on scikit-learn's 8x8 digits with
``GeneratedSamples`` measuring FKEAVendi (orders 1 and 2), FINCNovelty against the training digits and FastMMD
against the held-out ones, every validation epoch, logged by Lightning's ``CSVLogger``. Printed: the scalar columns
of ``metrics.csv`` (all, and those the callback wrote), each column whose value never changed over the epochs (a
constant logged as a scalar), and the public names each metric class adds to ``torchmetrics.Metric``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import tempfile
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torchmetrics import Metric

from lightning_spectral.callbacks import GeneratedSamples
from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import ConditionalVendi, FastMMD, FINCNovelty, FKEAVendi, SPECDivergence


class DigitsGAN(L.LightningModule):
    """A minimal GAN on 8x8 digits: MLP generator and discriminator, non-saturating loss, two optimisers."""

    def __init__(self, latent: int = 16) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.latent = latent
        self.generator = nn.Sequential(nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, 64), nn.Sigmoid())
        self.discriminator = nn.Sequential(nn.Linear(64, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        z = torch.randn(n, self.latent, generator=generator).to(self.device)
        return self.generator(z).reshape(n, 1, 8, 8)

    def training_step(self, batch: dict, batch_idx: int) -> None:
        real = batch["image"].reshape(-1, 64)
        opt_g, opt_d = self.optimizers()
        fake = self.generator(torch.randn(real.shape[0], self.latent, device=self.device))
        bce = nn.functional.binary_cross_entropy_with_logits
        d_real, d_fake = self.discriminator(real), self.discriminator(fake.detach())
        loss_d = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
        opt_d.zero_grad()
        self.manual_backward(loss_d)
        opt_d.step()
        d_gen = self.discriminator(fake)
        loss_g = bce(d_gen, torch.ones_like(d_gen))
        opt_g.zero_grad()
        self.manual_backward(loss_g)
        opt_g.step()
        self.log_dict({"loss_d": loss_d, "loss_g": loss_g}, prog_bar=True)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        pass  # the callback measures at the end of the validation epoch

    def configure_optimizers(self) -> list:
        return [torch.optim.Adam(self.generator.parameters(), 2e-3), torch.optim.Adam(self.discriminator.parameters(), 2e-3)]


def run(args: argparse.Namespace, folder: str) -> list[dict[str, str]]:
    """Fit the GAN with the callback and return the rows of its ``metrics.csv``."""
    data = DigitsImages(batch_size=64, seed=0)
    callback = GeneratedSamples(
        {
            "vendi": FKEAVendi(sigma=1.5, n_frequencies=args.r, alpha=[1, 2]),
            "finc": FINCNovelty(sigma=1.5, n_frequencies=args.r, reset_real_features=False),
            "mmd": FastMMD(sigma=1.5, n_frequencies=args.r, reset_real_features=False),
        },
        feature=PixelImageFeature(size=8),
        references={"finc": "reference_dataloader", "mmd": "val_dataloader"},
        n_samples=args.n_samples,
        gallery_modes=args.gallery_modes,
        label_key="label",
    )
    logger = CSVLogger(folder, name="gan")
    trainer = L.Trainer(
        max_epochs=args.epochs, logger=logger, callbacks=[callback], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )
    torch.manual_seed(0)
    trainer.fit(DigitsGAN(), datamodule=data)
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def public_names(cls: type) -> list[str]:
    """Public attributes a metric class adds to ``torchmetrics.Metric`` (its own and its bases' in this library)."""
    return sorted(name for name in dir(cls) if not name.startswith("_") and not hasattr(Metric, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--gallery-modes", type=int, default=4)
    parser.add_argument("--n-samples", type=int, default=600)
    parser.add_argument("--r", type=int, default=256)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as folder:
        rows = run(args, folder)
    columns = list(rows[0]) if rows else []
    scalars = [c for c in columns if c not in ("epoch", "step")]
    ours = [c for c in scalars if c.startswith("gen/")]
    constant = [c for c in ours if len({row[c] for row in rows if row[c] != ""}) == 1]
    print(f"metrics.csv: {len(scalars)} scalar columns ({len(ours)} from GeneratedSamples), {args.epochs} epochs, "
          f"gallery_modes={args.gallery_modes}")
    print("callback columns: " + ", ".join(ours))
    print(f"constant over the epochs ({len(constant)}): " + ", ".join(constant))
    for cls in (FKEAVendi, FINCNovelty, FastMMD, SPECDivergence, ConditionalVendi):
        names = public_names(cls)
        print(f"{cls.__name__}: {len(names)} public names beyond torchmetrics' Metric: {', '.join(names)}")


if __name__ == "__main__":
    main()
