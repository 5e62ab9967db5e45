"""The metrics inside a real Trainer.fit on CPU: logged with self.log, galleries through TensorBoard, DDP."""

import lightning as L
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi
from lightning_spectral.pictures import log_picture, mode_gallery, plot_spectrum
from tests.conftest import digits, quiet_trainer

SIGMA = 2.0




class DigitsModule(L.LightningModule):
    """A linear encoder trained to classify digits 0-7; digits 8 and 9 never appear in the reference."""

    def __init__(self, galleries: bool = False):
        super().__init__()
        self.encoder = torch.nn.Linear(64, 16)
        self.head = torch.nn.Linear(16, 10)
        self.vendi = FKEAVendi(sigma=SIGMA, n_frequencies=256)
        self.novelty = FINCNovelty(sigma=SIGMA, n_frequencies=256, rho=1.0, reset_real_features=False)
        self.mmd = FastMMD(sigma=SIGMA, n_frequencies=128, reset_real_features=False)
        self.galleries = galleries
        self.images, self.labels = digits()

    def training_step(self, batch, _):
        x, y, _ = batch
        loss = torch.nn.functional.cross_entropy(self.head(self.encoder(x)), y)
        self.log("train/loss", loss)
        return loss

    def on_validation_epoch_start(self):
        if self.novelty.sample_count(real=True) == 0:  # the reference is accumulated once (a collective)
            reference = self.images[self.labels < 8]
            shard = reference[self.global_rank :: self.trainer.world_size]
            with torch.no_grad():
                self.novelty.update(self.encoder(shard), real=True)
                self.mmd.update(self.encoder(shard), real=True)

    def validation_step(self, batch, _):
        x, _, _ = batch
        z = self.encoder(x)
        self.vendi.update(z)
        self.novelty.update(z, real=False)
        self.mmd.update(z, real=False)
        self.log("val/vendi", self.vendi)
        self.log("val/novelty", self.novelty)
        self.log("val/mmd", self.mmd)

    def on_validation_epoch_end(self):
        if not self.galleries:
            return
        loader = self.trainer.val_dataloaders
        batches = [(self.encoder(x), ids) for x, _, ids in loader]
        samples = self.vendi.reading().top_samples(batches, k=3, per_mode=6)
        log_picture(self.trainer, "val/vendi_modes", mode_gallery(samples, lambda i: self.images[i].view(8, 8)))
        log_picture(self.trainer, "val/vendi_spectrum", plot_spectrum(self.vendi.reading().modes(20).eigenvalues))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loaders():
    x, y = digits()
    ids = torch.arange(len(x))
    train = TensorDataset(x[:1000], y[:1000], ids[:1000])
    val = TensorDataset(x[1000:1600], y[1000:1600], ids[1000:1600])
    return DataLoader(train, batch_size=100, shuffle=True), DataLoader(val, batch_size=100)


def expected_metrics(module):
    x, labels = digits()
    with torch.no_grad():
        z = module.encoder(x[1000:1600])
        reference = module.encoder(x[labels < 8])
    vendi = FKEAVendi(sigma=SIGMA, n_frequencies=256)
    vendi.update(z)
    novelty = FINCNovelty(sigma=SIGMA, n_frequencies=256, rho=1.0)
    novelty.update(z, real=False)
    novelty.update(reference, real=True)
    mmd = FastMMD(sigma=SIGMA, n_frequencies=128)
    mmd.update(z, real=False)
    mmd.update(reference, real=True)
    return float(vendi.compute()), float(novelty.compute()), float(mmd.compute())


def trainer(tmp_path, **kwargs):
    # num_sanity_val_steps=0: the reference is embedded once, with the trained encoder
    return quiet_trainer(tmp_path, logger=True, num_sanity_val_steps=0, **kwargs)


def test_metrics_and_galleries_logged_inside_trainer_fit(tmp_path):
    torch.manual_seed(0)
    module = DigitsModule(galleries=True)
    train, val = loaders()
    fit = trainer(tmp_path, devices=1)
    fit.fit(module, train, val)
    vendi, novelty, mmd = expected_metrics(module)
    assert float(fit.callback_metrics["val/vendi"]) == pytest.approx(vendi, rel=1e-5)
    assert float(fit.callback_metrics["val/novelty"]) == pytest.approx(novelty, rel=1e-4, abs=1e-6)
    assert float(fit.callback_metrics["val/mmd"]) == pytest.approx(mmd, rel=1e-4)
    # Lightning reset the metrics after logging; the reference side was kept (reset_real_features=False)
    assert module.novelty.sample_count() == 0
    assert module.novelty.sample_count(real=True) == int((digits()[1] < 8).sum())
    events = EventAccumulator(str(fit.logger.log_dir), size_guidance={"images": 0})
    events.Reload()
    assert {"val/vendi_modes", "val/vendi_spectrum"} <= set(events.Tags()["images"])
    gallery = events.Images("val/vendi_modes")[0]
    assert gallery.width > gallery.height > 0  # 3 rows of 6 digit images


def test_metrics_under_ddp_trainer_equal_single_process(tmp_path):
    torch.manual_seed(0)
    module = DigitsModule()
    train, val = loaders()
    fit = trainer(tmp_path, devices=2, strategy="ddp_spawn")
    fit.fit(module, train, val)
    vendi, novelty, mmd = expected_metrics(module)  # the module's trained weights come back from rank 0
    assert float(fit.callback_metrics["val/vendi"]) == pytest.approx(vendi, rel=1e-5)
    assert float(fit.callback_metrics["val/mmd"]) == pytest.approx(mmd, rel=1e-4)
    # the reference split (hence the noise threshold) depends on the sharding; the eigenvalues do not
    assert float(fit.callback_metrics["val/novelty"]) == pytest.approx(novelty, rel=0.05, abs=1e-3)
