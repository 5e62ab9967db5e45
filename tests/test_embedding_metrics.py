"""EmbeddingMetrics in a real Trainer.fit: logged values equal the metrics computed by hand on the trained
encoder, galleries reach TensorBoard, the state survives a checkpoint, and DDP gives the single-process values."""

import json
import math

import lightning as L
import pytest
import torch
import torchmetrics
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import EmbeddingMetrics
from lightning_spectral.functional import spec
from lightning_spectral.metrics import ConditionalVendi, FastMMD, FINCNovelty, FKEAVendi, RFFCovariance, SPECDivergence
from tests.conftest import CollectiveBytes, DigitsClassifier, digits, quiet_trainer

SIGMA = 2.0


Module = DigitsClassifier


x, y = digits()
ids = torch.arange(len(x))
TRAIN = TensorDataset(x[:1000], y[:1000], ids[:1000])
VAL = TensorDataset(x[1000:1600], y[1000:1600], ids[1000:1600])
REFERENCE_PROJECTION = torch.nn.Linear(64, 12)  # a frozen "reference encoder" for SPEC
torch.nn.init.normal_(REFERENCE_PROJECTION.weight, generator=torch.Generator().manual_seed(1))


def digit_image(i):
    return x[i].view(8, 8)


def make_callback(fixed_reference=None):
    metrics = {
        "vendi": FKEAVendi(sigma=SIGMA, n_frequencies=128),
        "novelty": FINCNovelty(sigma=SIGMA, n_frequencies=128),
        "mmd": FastMMD(sigma=SIGMA, n_frequencies=64),
        "spec": SPECDivergence("cosine", in_features=(16, 12)),
    }
    return EmbeddingMetrics(
        metrics,
        embedding="encoder",
        reference_dataloader=None if fixed_reference is not None else DataLoader(TRAIN, batch_size=100),
        reference_features=fixed_reference,
        spec_reference=REFERENCE_PROJECTION,
        index=2,
        images=digit_image,  # module level: ddp_spawn pickles the callback
        gallery_modes=2,
        gallery_per_mode=4,
    )


def expected(module):
    with torch.no_grad():
        z, reference = module.encoder(x[1000:1600]), module.encoder(x[:1000])
        spec_reference = REFERENCE_PROJECTION(x[1000:1600])
    vendi = FKEAVendi(sigma=SIGMA, n_frequencies=128)
    vendi.update(z)
    novelty = FINCNovelty(sigma=SIGMA, n_frequencies=128)
    mmd = FastMMD(sigma=SIGMA, n_frequencies=64)
    for batch in reference.split(100):
        novelty.update(batch, real=True)
        mmd.update(batch, real=True)
    novelty.update(z, real=False)
    mmd.update(z, real=False)
    return {
        "vendi/vendi_1": float(vendi.compute()),
        "vendi/vendi_1_se": float(vendi.reading().standard_error()),  # the standard errors are logged beside the scores
        "novelty/novel_score": float(novelty.compute()),
        "novelty/novel_score_se": float(novelty.reading().summary()["se"]),
        "mmd/mmd2": float(mmd.compute()),
        "mmd/mmd2_se": float(mmd.reading().standard_error()),
        "mmd/minus_log10_p": -math.log10(float(mmd.reading().p_value())),  # a p-value survives a float32 logger so
        "spec/spec_diff": float(spec(z, spec_reference, "cosine").spec_diff),
    }


def make_trainer(tmp_path, callback, **kwargs):
    return quiet_trainer(tmp_path, [callback], logger=True, **kwargs)


def test_logged_values_equal_metrics_on_the_trained_encoder(tmp_path):
    module, callback = Module(), make_callback()
    trainer = make_trainer(tmp_path, callback, enable_checkpointing=False)
    trainer.fit(module, DataLoader(TRAIN, batch_size=100, shuffle=True), DataLoader(VAL, batch_size=100))
    want = expected(module)
    for name, value in want.items():
        assert float(trainer.callback_metrics[f"val/{name}"]) == pytest.approx(value, rel=1e-4, abs=1e-6), name
    assert want["spec/spec_diff"] > 0.05 and want["vendi/vendi_1"] > 1.5 and want["vendi/vendi_1_se"] > 0  # not degenerate
    logged = {name for name in trainer.callback_metrics if name.startswith("val/")}
    assert not any("n_features" in name or "sigma" in name or "/detail/" in name for name in logged)  # no constant
    events = EventAccumulator(str(trainer.logger.log_dir), size_guidance={"images": 0})
    events.Reload()
    tags = set(events.Tags()["images"])
    assert {"val/vendi/modes", "val/spec/a_only", "val/spec/b_only"} <= tags
    # a novelty gallery exactly when a novel mode is significant (none is logged for noise)
    assert ("val/novelty/novel" in tags) == (callback.last_values["novelty/novel_modes"] > 0)
    assert callback.metrics["vendi"].sample_count() == 0  # reset after logging


def test_fixed_reference_and_checkpoint_round_trip(tmp_path):
    with torch.no_grad():
        fixed = torch.randn(500, 16, generator=torch.Generator().manual_seed(3))
    callback = make_callback(fixed_reference=fixed)
    callback.metrics["novelty"].reset_real_features = False  # accumulated once, kept across epochs
    trainer = make_trainer(tmp_path, callback, enable_checkpointing=False)
    trainer.fit(Module(), DataLoader(TRAIN, batch_size=100), DataLoader(VAL, batch_size=100))
    assert callback.metrics["novelty"].sample_count(real=True) == 500
    state = callback.state_dict()
    restored = make_callback(fixed_reference=fixed)
    restored.load_state_dict(state)
    for kept, original in zip(restored.metrics["novelty"].ref, callback.metrics["novelty"].ref, strict=True):
        assert torch.equal(kept.cov_sum, original.cov_sum)
    assert restored.reference_accumulated and restored.last_values == callback.last_values


def test_configuration_errors():
    with pytest.raises(ValueError, match="reference"):
        EmbeddingMetrics({"mmd": FastMMD(sigma=1.0)})
    with pytest.raises(ValueError, match="spec_reference"):
        EmbeddingMetrics({"spec": SPECDivergence("cosine", in_features=(2, 2))})
    with pytest.raises(ValueError, match="index"):
        EmbeddingMetrics({"vendi": FKEAVendi(sigma=1.0)}, images=lambda i: torch.zeros(8, 8))
    with pytest.raises(ValueError, match="metrics"):
        EmbeddingMetrics({})
    # a metric whose value is a matrix is refused by name when the callback is built (it logged 1,025 scalars)
    with pytest.raises(ValueError, match=r"`metrics\['cov'\]` \(RFFCovariance\) reports a matrix"):
        EmbeddingMetrics({"cov": RFFCovariance(sigma=1.0, n_frequencies=16)})
    with pytest.raises(TypeError, match="log_detail"):
        EmbeddingMetrics({"vendi": FKEAVendi(sigma=1.0)}, log_detail="yes")


def test_datamodule_names_are_resolved_at_setup(tmp_path):
    class Data(L.LightningDataModule):
        def train_dataloader(self):
            return DataLoader(TRAIN, batch_size=100)

        def val_dataloader(self):
            return DataLoader(VAL, batch_size=100)

        def reference_loader(self):
            return DataLoader(TRAIN, batch_size=250)

    callback = EmbeddingMetrics({"mmd": FastMMD(sigma=1.0, n_frequencies=64)}, reference_dataloader="reference_loader")
    trainer = make_trainer(tmp_path, callback, enable_checkpointing=False, limit_train_batches=1)
    trainer.fit(Module(), datamodule=Data())
    assert "val/mmd/mmd2" in trainer.callback_metrics
    # the reference side is the whole named loader (1000 samples) on the last epoch
    mmd = callback.metrics["mmd"]
    callback.on_validation_epoch_start(trainer, trainer.lightning_module)
    assert mmd.sample_count(real=True) == 1000
    unnamed = EmbeddingMetrics({"mmd": FastMMD(sigma=1.0)}, reference_dataloader="reference_loader")
    trainer = make_trainer(tmp_path, unnamed, enable_checkpointing=False)
    with pytest.raises(ValueError, match="`reference_dataloader`='reference_loader' names an attribute"):
        trainer.fit(Module(), DataLoader(TRAIN, batch_size=100), DataLoader(VAL, batch_size=100))


def test_ddp_values_equal_single_process(tmp_path):
    single_module, single = Module(), make_callback()
    loaders = (DataLoader(TRAIN, batch_size=100), DataLoader(VAL, batch_size=100))
    make_trainer(tmp_path / "single", single, enable_checkpointing=False).fit(single_module, *loaders)
    ddp_module, ddp = Module(), make_callback()
    trainer = make_trainer(tmp_path / "ddp", ddp, enable_checkpointing=False, devices=2, strategy="ddp_spawn")
    trainer.fit(ddp_module, *loaders)
    want = expected(ddp_module)  # the module's weights come back from rank 0
    for name in ("vendi/vendi_1", "mmd/mmd2", "spec/spec_diff", "novelty/novel_score"):  # FINC's halves: any sharding
        assert float(trainer.callback_metrics[f"val/{name}"]) == pytest.approx(want[name], rel=1e-4, abs=1e-7), name


def test_an_epoch_end_all_reduces_what_one_compute_does(tmp_path):
    """Every value, gallery and count of a validation epoch's end comes from one synced copy of each metric's sums:
    the bytes moved between 2 processes stay within 1.25x those of one ``compute()`` of the same metrics."""
    callback = make_callback()
    two_sample = {name: m for name, m in callback.metrics.items() if name in ("vendi", "novelty", "mmd")}
    callback.metrics = two_sample  # FKEAVendi, FINCNovelty and FastMMD, with galleries
    counters = [CollectiveBytes(tmp_path / "bytes", "start", two_sample), CollectiveBytes(tmp_path / "bytes", "end")]
    trainer = quiet_trainer(
        tmp_path, [counters[0], callback, counters[1]], devices=2, strategy="ddp_spawn", num_sanity_val_steps=0,
        limit_train_batches=2, logger=True,
    )
    trainer.fit(Module(), DataLoader(TRAIN, batch_size=100), DataLoader(VAL, batch_size=100))
    for rank in (0, 1):
        record = json.loads((tmp_path / "bytes" / f"rank{rank}.json").read_text())
        width = 2 * 128
        assert record["compute"] >= 8 * 4 * width * width  # the four covariance sums of FKEA and FINC, at least
        assert record["epoch_end"] <= 1.25 * record["compute"], record


class _CountReading:
    """A reading of counts, without ``galleries`` (here misspelt)."""

    def __init__(self, total) -> None:
        self.total = total

    def summary(self):
        return {"": self.total}

    def headline(self, summary=None):
        return {"total": (summary or self.summary())[""]}

    def sample_count(self, real=False):
        return int(self.total)

    def gallery(self, *args, **kwargs):  # a typo: the callback asks for `galleries`
        return {}


class _NoGalleries(torchmetrics.Metric):
    """A metric that keeps the protocol in part: a reading of values and counts, but no ``galleries``."""

    inputs = "one"
    reading_class = _CountReading

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.zeros(()), dist_reduce_fx="sum")

    def update(self, z) -> None:
        self.total += z.shape[0]

    def compute(self):
        return self.total

    def reading(self):
        return _CountReading(self.compute())

    def reset_reference(self) -> None:
        pass


def test_a_metric_lacking_what_the_callback_calls_is_refused_by_name():
    """Checked when the callback is built: a metric that lacks a member the callback will call is named (with the
    argument that asks for it), never skipped at an epoch's end."""
    with pytest.raises(TypeError, match=r"EmbeddingMetrics: `metrics\['counts'\]` \(_NoGalleries\) has no galleries "
                                        r"\(asked for by `images`\)"):
        EmbeddingMetrics({"counts": _NoGalleries()}, index=2, images=digit_image)
    EmbeddingMetrics({"counts": _NoGalleries()})  # no images: no galleries asked for
    from lightning_spectral.callbacks import GeneratedSamples
    from lightning_spectral.encoders import PixelImageFeature

    with pytest.raises(TypeError, match=r"GeneratedSamples: `metrics\['counts'\]` .*galleries"):
        GeneratedSamples({"counts": _NoGalleries()}, feature=PixelImageFeature(size=8))
    with pytest.raises(TypeError, match=r"`galleries` names 'mean', a plain torchmetrics MeanMetric"):
        GeneratedSamples({"mean": torchmetrics.MeanMetric()}, feature=PixelImageFeature(size=8), galleries=["mean"])
    with pytest.raises(ValueError, match=r"`metrics\['cond'\]` \(ConditionalVendi\) takes 'conditional' inputs"):
        EmbeddingMetrics({"cond": ConditionalVendi(sigma=1.0, prompt_sigma=0.1, n_frequencies=16)})


def test_a_plain_torchmetrics_metric_logs_its_compute(tmp_path):
    """A plain torchmetrics metric beside a gallery metric: ``update(z)``, its ``compute()`` logged, no gallery."""
    callback = EmbeddingMetrics(
        {"mean": torchmetrics.MeanMetric(), "vendi": FKEAVendi(sigma=SIGMA, n_frequencies=64)},
        index=2, images=digit_image, gallery_modes=2, gallery_per_mode=2,
    )
    module = Module()
    trainer = make_trainer(tmp_path, callback, limit_train_batches=2)
    trainer.fit(module, DataLoader(TRAIN, batch_size=100), DataLoader(VAL, batch_size=100))
    with torch.no_grad():
        want = float(module.encoder(x[1000:1600]).mean())
    assert float(trainer.callback_metrics["val/mean"]) == pytest.approx(want, rel=1e-5)
    assert "vendi/modes" in callback.last_galleries and not any(k.startswith("mean/") for k in callback.last_galleries)
    assert callback.metrics["mean"].update_count == 0  # reset after logging
