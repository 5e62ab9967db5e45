"""When GeneratedSamples measures: after each validation epoch, or, for a module without a validation loop (a GAN with
two optimisers and no ``validation_step``, or ``limit_val_batches=0``), after each training epoch; never nothing."""

import math

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from lightning_spectral.callbacks import GeneratedSamples
from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FINCNovelty, FKEAVendi


class ManualGAN(L.LightningModule):
    """A GAN as people write it: manual optimisation, two optimisers, no validation_step."""

    def __init__(self, latent: int = 8) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.latent = latent
        self.generator = nn.Sequential(nn.Linear(latent, 64), nn.ReLU(), nn.Linear(64, 64), nn.Sigmoid())
        self.discriminator = nn.Sequential(nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))

    def sample(self, n, generator):
        return self.generator(torch.randn(n, self.latent, generator=generator).to(self.device)).reshape(n, 1, 8, 8)

    def training_step(self, batch, batch_idx):
        real = batch["image"].flatten(1)
        opt_g, opt_d = self.optimizers()
        fake = self.generator(torch.randn(len(real), self.latent))
        bce = nn.functional.binary_cross_entropy_with_logits
        d_real, d_fake = self.discriminator(real), self.discriminator(fake.detach())
        loss_d = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
        opt_d.zero_grad()
        self.manual_backward(loss_d)
        opt_d.step()
        d_gen = self.discriminator(fake)
        opt_g.zero_grad()
        self.manual_backward(bce(d_gen, torch.ones_like(d_gen)))
        opt_g.step()

    def configure_optimizers(self):
        return [torch.optim.Adam(self.generator.parameters(), 1e-3), torch.optim.Adam(self.discriminator.parameters(), 1e-3)]


class ValidatedGAN(ManualGAN):
    def validation_step(self, batch, batch_idx):
        pass


def callback(**kwargs):
    metrics = {"vendi": FKEAVendi(1.5, 32), "finc": FINCNovelty(1.5, 32, reset_real_features=False)}
    return GeneratedSamples(metrics, feature=PixelImageFeature(size=8), references={"finc": "reference_dataloader"},
                            n_samples=120, galleries=False, **kwargs)


def fit(module, tmp_path, epochs=2, **trainer_kwargs):
    torch.manual_seed(0)
    generated = callback(every_n_epochs=trainer_kwargs.pop("every_n_epochs", 1))
    trainer = L.Trainer(max_epochs=epochs, callbacks=[generated], logger=CSVLogger(tmp_path), limit_train_batches=3,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        num_sanity_val_steps=0, **trainer_kwargs)
    trainer.fit(module, datamodule=DigitsImages(batch_size=32))
    return generated, trainer


def logged_epochs(trainer, key):
    import csv

    with open(f"{trainer.logger.log_dir}/metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    return sorted({int(row["epoch"]) for row in rows if row.get(key) not in (None, "")})


def test_a_manual_optimisation_gan_without_validation_step_is_measured_every_training_epoch(tmp_path, caplog):
    with caplog.at_level("INFO"):
        generated, trainer = fit(ManualGAN(), tmp_path)
    assert sorted(generated.history) == [0, 1]  # measured at the end of each training epoch
    assert "no `validation_step`" in caplog.text and "end of each training epoch" in caplog.text
    assert logged_epochs(trainer, "gen/vendi/vendi_1") == [0, 1]
    assert math.isfinite(generated.last_values["finc/missing_score"])


def test_limit_val_batches_zero_measures_at_the_training_epochs_end(tmp_path):
    generated, trainer = fit(ValidatedGAN(), tmp_path, limit_val_batches=0)
    assert sorted(generated.history) == [0, 1]
    assert logged_epochs(trainer, "gen/vendi/vendi_1") == [0, 1]


def test_a_module_with_a_validation_loop_is_measured_once_per_epoch_after_validation(tmp_path):
    generated, trainer = fit(ValidatedGAN(), tmp_path, limit_val_batches=1)
    assert sorted(generated.history) == [0, 1]  # once each: not again at the training epoch's end
    assert logged_epochs(trainer, "gen/vendi/vendi_1") == [0, 1]


def test_every_n_epochs_beyond_max_epochs_warns_at_setup_and_measures_the_last_epoch(tmp_path):
    with pytest.warns(UserWarning, match=r"every_n_epochs=5 never comes within max_epochs=2.*only the last epoch"):
        generated, _ = fit(ManualGAN(), tmp_path, every_n_epochs=5)
    assert sorted(generated.history) == [1]


def test_one_line_per_measured_epoch_names_the_numbers_and_the_missing_classes(tmp_path, caplog):
    """The line a person reads in the console: the headline numbers and, with class labels on the reference, the
    classes of the missing modes' gallery rows, and the headline values in the progress bar's postfix;
    ``print_epoch_line=False`` prints no line and shows nothing in the bar."""
    torch.manual_seed(0)
    metrics = {"vendi": FKEAVendi(1.5, 64), "finc": FINCNovelty(1.5, 64, reset_real_features=False)}
    generated = GeneratedSamples(metrics, feature=PixelImageFeature(size=8), references={"finc": "reference_dataloader"},
                                 n_samples=200, label_key="label", gallery_modes=3, gallery_per_mode=4)
    trainer = L.Trainer(max_epochs=1, callbacks=[generated], logger=CSVLogger(tmp_path), limit_train_batches=2,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    with caplog.at_level("INFO"):
        trainer.fit(ManualGAN(), datamodule=DigitsImages(batch_size=32, drop_classes=[0, 6]))
    line = generated.last_line
    assert line.startswith("gen epoch 0: vendi: vendi_1 ") and "+- " in line and "| finc: " in line
    missing = int(generated.last_values["finc/missing_modes"])
    assert f"missing_modes {missing}" in line and line in caplog.text
    if "finc/missing" in generated.last_galleries:  # rows shown: their classes are named
        assert "(rows of classes " in line
    shown = trainer.progress_bar_metrics  # the progress bar's postfix: the headline values, not their se
    assert "gen/vendi/vendi_1" in shown and "gen/finc/missing_modes" in shown
    assert not any(key.endswith("_se") for key in shown), shown
    quiet = callback(print_epoch_line=False)
    caplog.clear()
    trainer = L.Trainer(max_epochs=1, callbacks=[quiet], logger=False, limit_train_batches=2, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False)
    with caplog.at_level("INFO"):
        trainer.fit(ManualGAN(), datamodule=DigitsImages(batch_size=32))
    assert quiet.last_line.startswith("gen epoch 0:") and quiet.last_line not in caplog.text
    assert not any(key.startswith("gen/") for key in trainer.progress_bar_metrics)


def test_a_reference_for_a_metric_that_cannot_count_its_samples_is_refused_by_name():
    """Before each measured epoch the callback asks a metric given a reference whether it holds one already
    (``sample_count(real=True)``): a metric without it is named when the callback is built, not at an epoch's end."""
    import torchmetrics

    class Counted(torchmetrics.MeanMetric):
        inputs = "two"

        def reading(self):
            return None

        def reset_reference(self):
            pass

    with pytest.raises(TypeError, match=r"`metrics\['mean'\]` \(Counted\) has no sample_count \(asked for by "
                                        r"`references\['mean'\]`\)"):
        GeneratedSamples({"mean": Counted()}, feature=PixelImageFeature(size=8), references={"mean": "val_dataloader"},
                         galleries=False)
