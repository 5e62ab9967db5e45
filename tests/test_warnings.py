"""No warning floods: a 2-process fit of each callback prints no Lightning advice to sync values the library synced
already, and no deprecation warning from the library's own calls."""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import DriftMonitor, EmbeddingMetrics, GeneratedSamples, KPCAOODMonitor, SPECAlign
from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi
from tests.conftest import DigitsClassifier, digits, quiet_trainer

PACKAGE = str(Path(__file__).resolve().parents[1] / "lightning_spectral")

x, y = digits()
ids = torch.arange(len(x))
# sizes divisible by 2 x the batch size: DistributedSampler neither pads nor drops under 2 processes
TRAIN = TensorDataset(x[:400], y[:400], ids[:400])
VAL = TensorDataset(x[400:600], y[400:600], ids[400:600])
PROBE = TensorDataset(x[600:800], y[600:800], ids[600:800])


def digit_image(i: int) -> torch.Tensor:
    return x[i].view(8, 8)


class WarningLog(L.Callback):
    """Records every warning of its (spawned) process from ``setup`` to ``teardown``, with whether a frame of
    lightning_spectral is on the stack that raised it, into ``folder/rank{r}.json``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.records: list[dict[str, Any]] = []
        self.context = warnings.catch_warnings()
        self.context.__enter__()
        warnings.simplefilter("always")  # every occurrence; the library's own filters are added in front of this one

        def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            stack = [frame.filename for frame in traceback.extract_stack()[:-1]]
            self.records.append({
                "category": category.__name__, "message": str(message), "where": f"{filename}:{lineno}",
                "library": any(name.startswith(PACKAGE) for name in stack),
            })

        warnings.showwarning = show

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.context.__exit__(None, None, None)
        Path(self.folder, f"rank{trainer.global_rank}.json").write_text(json.dumps(self.records))


def classifier_callbacks() -> list[L.Callback]:
    """EmbeddingMetrics, KPCAOODMonitor, SPECAlign and DriftMonitor at tiny sizes, on one classifier."""
    frozen = torch.nn.Linear(64, 12)
    return [
        EmbeddingMetrics(
            {"vendi": FKEAVendi(2.0, 32), "finc": FINCNovelty(2.0, 32), "mmd": FastMMD(2.0, 32)},
            embedding="encoder", reference_dataloader=DataLoader(TRAIN, batch_size=50), index=2, images=digit_image,
            gallery_modes=2, gallery_per_mode=2,
        ),
        KPCAOODMonitor(fit_on=DataLoader(TRAIN, batch_size=50), ood_dataloaders=DataLoader(PROBE, batch_size=50),
                       sigma=0.5, n_frequencies=32),
        SPECAlign(reference=frozen, weight=0.1, student="encoder", every_n_steps=2),
        DriftMonitor(DataLoader(PROBE, batch_size=50), embedding="encoder", index=2, images=digit_image,
                     top_clusters=2, gallery_per_cluster=2),
    ]  # fmt: skip


def generated_callback() -> GeneratedSamples:
    return GeneratedSamples(
        {"vendi": FKEAVendi(1.5, 32), "finc": FINCNovelty(1.5, 32, reset_real_features=False),
         "mmd": FastMMD(1.5, 32, reset_real_features=False)},
        feature=PixelImageFeature(8), references={"finc": "reference_dataloader", "mmd": "val_dataloader"},
        n_samples=100, sample_batch_size=50, label_key="label", gallery_modes=2, gallery_per_mode=2,
        max_gallery_images=100,
    )  # fmt: skip


def flood(folder: Path) -> dict[str, list[str]]:
    """Per rank, the warnings the test forbids: Lightning's ``sync_dist`` advice (the modules here log nothing of
    their own, so every such advice names a value a callback logged) and deprecation warnings raised under a call of
    the library."""
    found = {}
    for rank in (0, 1):
        records = json.loads(Path(folder, f"rank{rank}.json").read_text())
        found[f"rank{rank}"] = [
            f"{r['category']} at {r['where']}: {r['message'][:200]}"
            for r in records
            if "sync_dist" in r["message"]
            or (r["library"] and r["category"] in ("DeprecationWarning", "FutureWarning", "PendingDeprecationWarning"))
        ]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("case", ["classifier", "generative"])
def test_two_process_fits_print_no_sync_advice_and_no_deprecation(tmp_path, case):
    log = tmp_path / "warnings"
    log.mkdir()
    if case == "classifier":
        module: L.LightningModule = DigitsClassifier()
        callbacks = [*classifier_callbacks(), WarningLog(log)]
        data: dict[str, Any] = dict(train_dataloaders=DataLoader(TRAIN, batch_size=50),
                                    val_dataloaders=DataLoader(VAL, batch_size=50))
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))
        from digits_vae import DigitsVAE

        torch.manual_seed(0)
        module, callbacks = DigitsVAE(hidden=32, n_components=5), [generated_callback(), WarningLog(log)]
        data = dict(datamodule=DigitsImages(batch_size=128))
    trainer = quiet_trainer(tmp_path, callbacks, logger=True, devices=2, strategy="ddp_spawn", max_epochs=1,
                            num_sanity_val_steps=0, limit_train_batches=4)
    trainer.fit(module, **data)
    assert flood(log) == {"rank0": [], "rank1": []}
