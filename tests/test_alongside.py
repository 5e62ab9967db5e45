"""torchmetrics metrics fed alongside the spectral ones (`alongside=` of GeneratedSamples and EmbeddingMetrics): the
real FrechetInceptionDistance / KernelInceptionDistance with a tiny feature module, checked against the same metric
fed the same images directly, through whole fits, under 2 processes against 1, and refused bad inputs."""

from __future__ import annotations

import warnings

import pytest
import torch
from digits_vae import DigitsVAE
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MeanMetric
from torchmetrics.image.fid import FrechetInceptionDistance
from torchmetrics.image.kid import KernelInceptionDistance

from lightning_spectral.callbacks import EmbeddingMetrics, GeneratedSamples, draw_samples
from lightning_spectral.callbacks.alongside import AlongsideMetrics, takes_real
from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FINCNovelty, FKEAVendi
from tests.conftest import DigitsClassifier, quiet_trainer

N_SAMPLES, CHUNK, SEED = 250, 100, 3  # chunks of 100, 100 and a small last one of 50


class TinyFeature(nn.Module):
    """A fixed random projection of 8x8 images to 6 features: what torchmetrics' FID / KID accept as ``feature``
    (``num_features`` says the width; no download)."""

    num_features = 6

    def __init__(self, pixels: int = 64) -> None:
        super().__init__()
        self.project = nn.Linear(pixels, self.num_features)
        with torch.no_grad():
            weight = torch.randn(self.num_features, pixels, generator=torch.Generator().manual_seed(0))
            self.project.weight.copy_(weight)
            self.project.bias.zero_()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.project(images.float().flatten(1))


def fid(**kwargs):
    return FrechetInceptionDistance(feature=TinyFeature(), normalize=True, **kwargs)


def kid(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "will save all extracted features in buffer"
        options = {"subsets": 4, "subset_size": 40, **kwargs}
        return KernelInceptionDistance(feature=TinyFeature(), normalize=True, **options)


def vae_sampler(module, n, generator):
    return module.sample(n, generator=generator)


def tiny_vae(seed=0):
    torch.manual_seed(seed)
    return DigitsVAE(hidden=32, n_components=5, noise_seed=seed)


def generated_callback(**kwargs):
    finc = FINCNovelty(1.5, 64, rho=2.0, reset_real_features=False)
    options = dict(
        feature=PixelImageFeature(8), references={"finc": "reference_dataloader", "fid": "reference_dataloader",
                                                  "kid": "reference_dataloader"},
        n_samples=N_SAMPLES, sample_batch_size=CHUNK, seed=SEED, galleries=False,
        alongside={"fid": fid(reset_real_features=False), "kid": kid(), "mean": MeanMetric()},
    )
    options.update(kwargs)
    return GeneratedSamples({"vendi": FKEAVendi(1.5, 64), "finc": finc}, **options)


def direct(module, data, seed=SEED):
    """FID, KID and the mean pixel fed the callback's images directly: the seeded samples, the reference loader."""
    metrics = {"fid": fid(), "kid": kid(), "mean": MeanMetric()}
    for _, images in draw_samples(vae_sampler, module, N_SAMPLES, CHUNK, seed):
        for name in ("fid", "kid"):
            metrics[name].update(images, real=False)
        metrics["mean"].update(images)
    for batch in data.reference_dataloader():
        for name in ("fid", "kid"):
            metrics[name].update(batch["image"], real=True)
    torch.manual_seed(seed)
    fid_value = float(metrics["fid"].compute())
    torch.manual_seed(seed)
    kid_mean, kid_std = (float(v) for v in metrics["kid"].compute())
    return {"fid": fid_value, "kid/mean": kid_mean, "kid/std": kid_std, "mean": float(metrics["mean"].compute())}


def test_generated_samples_logs_fid_and_kid_equal_to_the_metrics_fed_directly(tmp_path):
    module, data = tiny_vae(), DigitsImages(batch_size=64)  # 1,438 training digits: a small last batch too
    callback = generated_callback()
    trainer = quiet_trainer(tmp_path, [callback], max_epochs=2, limit_train_batches=2, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=data)
    want = direct(module.eval(), data)
    for name, value in want.items():
        assert callback.last_values[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name
        assert float(trainer.callback_metrics[f"gen/{name}"]) == pytest.approx(value, rel=1e-6, abs=1e-9), name
    assert {"vendi/vendi_1", "finc/missing_score"} <= set(callback.last_values)  # the spectral metrics beside them
    assert sorted(callback.history) == [0, 1] and callback.history[0]["fid"] != callback.history[1]["fid"]
    # FID keeps its reference (reset_real_features=False): filled once; KID's is fed again at epoch 2, in the same
    # pass as nothing else (FINC keeps its own): 1 pass at epoch 1 (FINC, FID, KID together) + 1 at epoch 2 (KID).
    assert callback.reference_passes == 2
    assert int(callback.alongside.metrics["fid"].real_features_num_samples) == len(data.train_set)
    assert int(callback.alongside.metrics["fid"].fake_features_num_samples) == 0  # reset after logging
    assert callback.last_timings["alongside"] > 0


def test_kid_draws_leave_the_training_random_stream_alone():
    along = AlongsideMetrics({"kid": kid(subset_size=10)}, "test")
    along.update(torch.rand(30, 1, 8, 8), real=False)
    along.update(torch.rand(30, 1, 8, 8), real=True)
    module = DigitsClassifier()
    module.log = lambda *args, **kwargs: None  # outside a Trainer
    torch.manual_seed(123)
    first = along.report(None, module, "gen/", seed=5)
    after = torch.rand(3)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(3))  # the global stream continues as if KID had drawn nothing
    assert set(first) == {"kid/mean", "kid/std"}


def test_embedding_metrics_feed_the_batch_inputs_to_fid(tmp_path):
    torch.manual_seed(0)
    x = torch.rand(203, 64)  # 203 = 3 batches of 64 and a small last one of 11
    reference = torch.rand(150, 64) * 0.8
    val = DataLoader(TensorDataset(x, torch.zeros(203, dtype=torch.long)), batch_size=64)
    ref = DataLoader(TensorDataset(reference, torch.zeros(150, dtype=torch.long)), batch_size=64)
    features = lambda: FrechetInceptionDistance(feature=TinyFeature(), reset_real_features=False)  # noqa: E731
    callback = EmbeddingMetrics({"vendi": FKEAVendi(1.0, 32)}, embedding="encoder", reference_dataloader=ref,
                                alongside={"fid": features(), "mean": MeanMetric()})
    trainer = quiet_trainer(tmp_path, [callback], max_epochs=2, limit_train_batches=1, num_sanity_val_steps=0)
    module = DigitsClassifier()
    trainer.fit(module, train_dataloaders=val, val_dataloaders=val)
    metric = features()
    metric.update(x, real=False)
    metric.update(reference, real=True)
    assert callback.last_values["fid"] == pytest.approx(float(metric.compute()), rel=1e-6)
    assert callback.last_values["mean"] == pytest.approx(float(x.mean()), rel=1e-6)
    assert "vendi/vendi_1" in callback.last_values
    assert int(callback.alongside.metrics["fid"].real_features_num_samples) == 150  # once, over two epochs
    # resumed from a checkpoint by the same callback object: the kept reference is cleared at setup and fed once
    checkpoint = tmp_path / "last.ckpt"
    trainer.save_checkpoint(checkpoint)
    again = quiet_trainer(tmp_path, [callback], max_epochs=3, limit_train_batches=1, num_sanity_val_steps=0)
    again.fit(module, train_dataloaders=val, val_dataloaders=val, ckpt_path=checkpoint)
    assert int(callback.alongside.metrics["fid"].real_features_num_samples) == 150
    assert callback.last_values["fid"] == pytest.approx(float(metric.compute()), rel=1e-6)


def uniform_images(module, n, generator):
    """Seeded uniform images: the same bits on any shard (an untrained VAE's samples are nearly alike, and FID of a
    nearly singular covariance turns their float32 shard-to-shard rounding into 0.2%)."""
    return torch.rand(n, 1, 8, 8, generator=generator)


def test_two_processes_log_what_one_process_logs(tmp_path):
    module = tiny_vae()
    torch.manual_seed(1)
    real = DataLoader([{"image": image} for image in torch.rand(N_SAMPLES, 1, 8, 8)], batch_size=60)
    logged = {}
    for devices in (1, 2):
        # KID over every sample (subset_size = n): its value does not depend on the order the ranks' rows arrive in;
        # a rank fed every sample (double feeding) would make it draw a random half, a doubled count moves FID.
        callback = GeneratedSamples(
            {"vendi": FKEAVendi(1.5, 64)}, PixelImageFeature(8), references={"fid": real, "kid": real},
            n_samples=N_SAMPLES, sample_batch_size=CHUNK, seed=SEED, galleries=False, sample=uniform_images,
            alongside={"fid": fid(), "kid": kid(subsets=2, subset_size=N_SAMPLES), "mean": MeanMetric()},
        )
        strategy = "ddp_spawn" if devices == 2 else "auto"
        trainer = quiet_trainer(tmp_path / str(devices), [callback], devices=devices, strategy=strategy,
                                num_sanity_val_steps=0)
        trainer.validate(module, datamodule=DigitsImages(batch_size=64), verbose=False)
        logged[devices] = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("gen/")}
    assert {"gen/fid", "gen/kid/mean", "gen/kid/std", "gen/mean"} <= set(logged[1]) == set(logged[2])
    # FID sums in float64 (1e-6 covers float32 features computed in other batches); KID's polynomial MMD sums float32
    # in the order the ranks' rows arrive (1e-4; its std over 2 permutations of all rows is such rounding only)
    for name, value in logged[1].items():
        rel, tol = (1e-4, 1e-3) if name.startswith("gen/kid") else (1e-6, 1e-9)
        assert logged[2][name] == pytest.approx(value, rel=rel, abs=tol), name


def test_bad_alongside_is_refused_by_name_before_any_work():
    pixels = PixelImageFeature(8)
    vendi = {"vendi": FKEAVendi(1.5, 16)}
    with pytest.raises(ValueError, match=r"`alongside\['fid'\]` must be a torchmetrics.Metric"):
        GeneratedSamples(vendi, pixels, alongside={"fid": TinyFeature()})
    with pytest.raises(ValueError, match=r"`alongside` must map names"):
        GeneratedSamples(vendi, pixels, alongside=[fid()])
    with pytest.raises(ValueError, match=r"`alongside\['vendi'\]` has the name of a metric in `metrics`"):
        GeneratedSamples(vendi, pixels, alongside={"vendi": MeanMetric()})
    with pytest.raises(ValueError, match=r"`references`.*missing \['fid'\]"):  # FID takes real= and needs a reference
        GeneratedSamples(vendi, pixels, alongside={"fid": fid()})
    with pytest.raises(ValueError, match=r"`references`.*not two-sample metrics \['mean'\]"):  # MeanMetric has no real
        GeneratedSamples(vendi, pixels, alongside={"mean": MeanMetric()}, references={"mean": "val_dataloader"})
    with pytest.raises(ValueError, match=r"`alongside` metrics \['fid'\] take `real=`: pass `reference_dataloader`"):
        EmbeddingMetrics(vendi, alongside={"fid": fid()}, reference_features=torch.ones(4, 3))
    with pytest.raises(ValueError, match=r"`alongside\[3\]`|names must be non-empty strings"):
        EmbeddingMetrics(vendi, alongside={3: MeanMetric()})
    assert takes_real(fid()) and not takes_real(MeanMetric())
