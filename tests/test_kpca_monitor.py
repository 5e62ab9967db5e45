"""KPCAOODMonitor inside real Trainer.fit runs on scikit-learn digits: in-distribution = digits 0-7 (the encoder
is trained to classify them), out-of-distribution = digits 8 and 9. Logged values are checked against a
KernelPCAOOD fitted by hand on the same embeddings."""

import math
import warnings
from collections import defaultdict
from functools import lru_cache

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks.kpca_monitor import KPCAOODMonitor, OODDriftWarning
from lightning_spectral.functional import (
    detection_metrics,
    detection_standard_errors,
    score_standard_errors,
    threshold_at_tpr,
    threshold_standard_error,
)
from lightning_spectral.metrics import KernelPCAOOD
from tests.conftest import DigitsClassifier, digits, quiet_trainer

DETECTOR = dict(sigma=0.5, n_frequencies=128)
TPR = 0.95


@lru_cache
def splits():
    x, y = digits()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    inside, labels, outside = x[y < 8], y[y < 8], x[y >= 8]
    # sizes divisible by 2 x batch size: DistributedSampler neither pads nor drops under 2-process DDP
    return {
        "train": (inside[:800], labels[:800]),
        "val": (inside[800:1200], labels[800:1200]),
        "ood": (outside[:300], torch.zeros(300, dtype=torch.long)),
        "ood_small": (outside[300:340], torch.zeros(40, dtype=torch.long)),  # one batch: rank 1 gets none
    }


def loader(name, batch_size=50):
    return DataLoader(TensorDataset(*splits()[name]), batch_size=batch_size)


class DigitsModule(DigitsClassifier):
    """A linear encoder trained to classify digits 0-7; records the embeddings its training steps compute."""

    def __init__(self, lr=0.3, corrupt_at_epoch=None):
        super().__init__(width=16, classes=8, lr=lr)
        self.corrupt_at_epoch = corrupt_at_epoch
        self.recorded = defaultdict(list)

    def training_step(self, batch, _):
        x, y = batch
        z = self.encoder(x)
        self.recorded[self.current_epoch].append(z.detach().clone())
        return torch.nn.functional.cross_entropy(self.head(z), y)

    def on_train_epoch_start(self):
        if self.current_epoch == self.corrupt_at_epoch:  # a representation collapse / drift
            with torch.no_grad():
                self.encoder.weight.normal_(generator=torch.Generator().manual_seed(1))


def encode(module, batch):
    """An embedding function instead of a hooked submodule (module level: picklable)."""
    return module.encoder(batch[0])


class History(L.Callback):
    """The monitor's logged values after each real validation epoch, and its state after the sanity check."""

    def __init__(self, monitor, prefix="ood/"):
        self.monitor, self.prefix = monitor, prefix
        self.epochs, self.fitted_after_sanity = [], None

    def on_sanity_check_end(self, trainer, pl_module):
        self.fitted_after_sanity = self.monitor.detector.fitted

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            metrics = trainer.callback_metrics
            self.epochs.append(
                {k[len(self.prefix) :]: float(v) for k, v in metrics.items() if k.startswith(self.prefix)}
            )


def make_trainer(tmp_path, callbacks, **kwargs):
    return quiet_trainer(tmp_path, callbacks, **kwargs)


def embed(module, name):
    with torch.no_grad():
        return module.encoder(splits()[name][0])


def expected_metrics(detector, inside, outside):
    """What the monitor must log on its calibration epoch, from a detector and embeddings computed by hand."""
    inside = detector.score(inside)
    threshold = threshold_at_tpr(inside, TPR)
    rate = float((inside > threshold).double().mean())
    metrics = {
        "threshold": float(threshold),
        "threshold_se": float(threshold_standard_error(inside, TPR)),
        "n_components": detector.components_.shape[1],
        "flagged_rate": rate,
        "flagged_rate_se": math.sqrt(rate * (1 - rate) / inside.numel()),
        "score_mean": float(inside.mean()),
        "score_mean_se": float(inside.std() / math.sqrt(inside.numel())),
        "score_std": float(inside.std(correction=0)),
        "score_std_se": float(score_standard_errors(inside)["std_se"]),
    }
    for name, z in outside.items():
        scores = detector.score(z)
        detection = detection_metrics(inside, scores, TPR)
        errors = detection_standard_errors(inside, scores, TPR)
        rate = float((scores > threshold).double().mean())
        metrics[f"{name}/flagged_rate"] = rate
        metrics[f"{name}/flagged_rate_se"] = math.sqrt(rate * (1 - rate) / scores.numel())
        metrics[f"{name}/score_mean"] = float(scores.mean())
        metrics[f"{name}/score_mean_se"] = float(scores.std() / math.sqrt(scores.numel()))
        metrics[f"{name}/auroc"] = float(detection["auroc"])
        metrics[f"{name}/auroc_se"] = float(errors["auroc_se"])
        metrics[f"{name}/fpr95"] = float(detection["fpr"])
        metrics[f"{name}/fpr95_se"] = float(errors["fpr_se"])
    return metrics


def exactly(value):
    """Lightning logs float32: equal up to its rounding (one sample of 400 is 2.5e-3)."""
    return pytest.approx(value, rel=1e-7, abs=1e-9)


def assert_logged(logged, expected, rel=1e-5):
    assert set(logged) == set(expected)
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=rel, abs=1e-6), key


@pytest.mark.parametrize("embedding", ["encoder", encode], ids=["hooked-submodule", "function"])
def test_dataloader_fit_logs_what_a_hand_fitted_detector_gives(tmp_path, embedding):
    torch.manual_seed(0)
    module = DigitsModule()
    monitor = KPCAOODMonitor(
        embedding, fit_on=loader("train", 100), ood_dataloaders={"digits89": loader("ood")},
        ood_val_dataloader_idx={1: "val89"}, tpr=TPR, **DETECTOR,
    )  # fmt: skip
    history = History(monitor)
    trainer = make_trainer(tmp_path, [monitor, history])  # default num_sanity_val_steps=2
    trainer.fit(module, DataLoader(TensorDataset(*splits()["train"]), batch_size=50, shuffle=True),
                [loader("val"), loader("ood")])  # fmt: skip

    assert history.fitted_after_sanity is False  # the sanity pass neither fitted nor logged
    assert monitor.n_fits == 1 and len(history.epochs) == 1
    # one epoch: the encoder at the end of training is the one the monitor embedded with
    val = embed(module, "val")
    oracle = KernelPCAOOD(**DETECTOR).fit(embed(module, "train").split(100))
    expected = expected_metrics(oracle, val, {"digits89": embed(module, "ood"), "val89": embed(module, "ood")})
    logged = history.epochs[0]
    assert_logged(logged, expected)

    assert logged["flagged_rate"] == exactly((400 - math.ceil(TPR * 400)) / 400)  # calibrated on these 400 samples
    assert logged["digits89/auroc"] > 0.85  # trained encoder: ~0.93; the same at random init gives ~0.71
    assert logged["val89/auroc"] == logged["digits89/auroc"]  # the same data through both OOD routes
    assert logged["digits89/fpr95"] == pytest.approx(1 - logged["digits89/flagged_rate"])  # calibration epoch

    z = val[:8]
    torch.testing.assert_close(monitor.detector.score(z), oracle.score(z), rtol=1e-9, atol=1e-12)
    assert float(monitor.detector.threshold_) == pytest.approx(expected["threshold"], rel=1e-12)
    assert int(monitor.detector.predict(val).sum()) == 20


@pytest.mark.parametrize("refit", ["once", "epoch"])
def test_training_batch_fit_equals_a_fit_on_the_recorded_step_embeddings(tmp_path, refit):
    torch.manual_seed(0)
    module = DigitsModule()
    monitor = KPCAOODMonitor(fit_on="train", refit=refit, ood_dataloaders=loader("ood"), tpr=TPR, **DETECTOR)
    history = History(monitor)
    train = DataLoader(TensorDataset(*splits()["train"]), batch_size=50, shuffle=True)
    make_trainer(tmp_path, [monitor, history], max_epochs=3).fit(module, train, loader("val"))

    fitted_epoch = 0 if refit == "once" else 2
    oracle = KernelPCAOOD(**DETECTOR).fit(module.recorded[fitted_epoch])
    other = KernelPCAOOD(**DETECTOR).fit(module.recorded[2 - fitted_epoch])
    z = embed(module, "val")
    torch.testing.assert_close(monitor.detector.score(z), oracle.score(z), rtol=1e-9, atol=1e-12)
    assert not torch.allclose(monitor.detector.score(z), other.score(z), rtol=1e-3)  # (not) refitted
    assert float(monitor.detector.n_fitted_) == 800  # one epoch's embeddings, not an accumulation over epochs
    thresholds = [epoch["threshold"] for epoch in history.epochs]
    rates = [epoch["flagged_rate"] for epoch in history.epochs]
    if refit == "once":
        assert monitor.n_fits == 1 and len(set(thresholds)) == 1
        assert rates[0] == exactly(0.05) and rates[2] != exactly(
            0.05
        )  # calibrated once, then the training moves the embedding
    else:
        assert monitor.n_fits == 3 and len(set(thresholds)) == 3
        assert rates == exactly([0.05] * 3)  # recalibrated every epoch


def test_drift_warns_and_stops_training(tmp_path):
    def run(corrupt_at_epoch, stop_on_drift):
        torch.manual_seed(0)
        module = DigitsModule(lr=0.0, corrupt_at_epoch=corrupt_at_epoch)  # lr=0: no drift but the corruption
        monitor = KPCAOODMonitor(
            fit_on=loader("train", 100), max_flagged_rate=0.2, stop_on_drift=stop_on_drift, tpr=TPR, **DETECTOR
        )
        history = History(monitor)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            make_trainer(tmp_path, [monitor, history], max_epochs=4).fit(module, loader("train"), loader("val"))
        return [epoch["flagged_rate"] for epoch in history.epochs], [w for w in caught if w.category is OODDriftWarning]

    rates, drift = run(corrupt_at_epoch=None, stop_on_drift=True)
    assert rates == exactly([0.05] * 4) and not drift  # nothing moved: the whole run, no warning
    rates, drift = run(corrupt_at_epoch=1, stop_on_drift=True)
    assert len(rates) == 2 and rates[1] > 0.2  # stopped after the epoch that drifted
    assert len(drift) == 1 and "max_flagged_rate=0.2" in str(drift[0].message) and "stopping" in str(drift[0].message)
    rates, drift = run(corrupt_at_epoch=1, stop_on_drift=False)
    assert len(rates) == 4 and all(rate > 0.2 for rate in rates[1:])
    assert len(drift) == 3  # one per drifted epoch, training goes on


def snapshot(detector):
    return {k: v.clone() if torch.is_tensor(v) else v for k, v in detector.state_dict().items()}


def test_resume_restores_the_detector_and_continues_exactly(tmp_path):
    def run(max_epochs, directory):
        torch.manual_seed(0)
        monitor = KPCAOODMonitor(fit_on="train", ood_dataloaders=loader("ood"), tpr=TPR, **DETECTOR)
        history = History(monitor)
        checkpoint = ModelCheckpoint(dirpath=tmp_path / directory, save_last=True)
        trainer = make_trainer(
            tmp_path, [monitor, history, checkpoint], max_epochs=max_epochs, enable_checkpointing=True
        )
        trainer.fit(DigitsModule(), loader("train"), loader("val"))  # no shuffling
        return monitor, history

    first, _ = run(2, "ckpt")
    saved = snapshot(first.detector)
    checkpoint = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert first.state_key in checkpoint["callbacks"]

    class Probe(L.Callback):  # the restored state, before the resumed epoch trains
        def on_train_epoch_start(self, trainer, pl_module):
            self.state = snapshot(resumed.detector)

    torch.manual_seed(5)
    resumed = KPCAOODMonitor(fit_on="train", ood_dataloaders=loader("ood"), tpr=TPR, **DETECTOR)
    probe, history = Probe(), History(resumed)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = make_trainer(tmp_path, [resumed, probe, history, checkpoint], max_epochs=3, enable_checkpointing=True)
    trainer.fit(DigitsModule(), loader("train"), loader("val"), ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert probe.state.keys() == saved.keys()
    for name, value in saved.items():
        same = torch.equal(probe.state[name], value) if torch.is_tensor(value) else str(probe.state[name]) == str(value)
        assert same, name
    assert resumed.n_fits == 1  # not refitted on the resumed epoch

    _, uninterrupted = run(3, "uninterrupted")
    assert_logged(history.epochs[-1], uninterrupted.epochs[-1], rel=1e-6)
    assert uninterrupted.epochs[-1]["threshold"] == uninterrupted.epochs[0]["threshold"]


def test_ddp_logs_the_single_process_values(tmp_path):
    torch.manual_seed(0)
    module = DigitsModule()
    own = KPCAOODMonitor(
        fit_on=loader("train", 100), ood_dataloaders={"digits89": loader("ood"), "small": loader("ood_small", 64)},
        ood_val_dataloader_idx=1, tpr=TPR, **DETECTOR,
    )  # fmt: skip
    on_train = KPCAOODMonitor(fit_on="train", log_prefix="ood_train/", tpr=TPR, **DETECTOR)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = make_trainer(
        tmp_path, [own, on_train, checkpoint], devices=2, strategy="ddp_spawn", enable_checkpointing=True
    )
    trainer.fit(module, loader("train"), [loader("val"), loader("ood")])

    # the module's trained weights come back from rank 0; one epoch, so they are the ones the monitor used
    oracle = KernelPCAOOD(**DETECTOR).fit(embed(module, "train").split(100))
    ood = embed(module, "ood")
    expected = expected_metrics(
        oracle, embed(module, "val"), {"digits89": ood, "small": embed(module, "ood_small"), "val_dataloader_1": ood}
    )
    metrics = trainer.callback_metrics
    assert_logged({k[4:]: float(v) for k, v in metrics.items() if k.startswith("ood/")}, expected)
    assert float(metrics["ood_train/flagged_rate"]) == exactly(0.05)

    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["callbacks"]
    assert float(state[own.state_key]["detector"]["n_fitted_"]) == 800
    assert float(state[on_train.state_key]["detector"]["n_fitted_"]) == 800  # both ranks' training batches
    assert state[on_train.state_key]["world_size"] == 2


def test_validate_fits_on_a_dataloader_and_warns_when_nothing_is_fitted(tmp_path):
    torch.manual_seed(0)
    module = DigitsModule()
    unfitted = KPCAOODMonitor(fit_on="train", ood_dataloaders=loader("ood"), **DETECTOR)
    trainer = make_trainer(tmp_path, [unfitted])
    with pytest.warns(UserWarning, match="not fitted, nothing is logged"):
        trainer.validate(module, loader("val"))
    assert not any(key.startswith("ood/") for key in trainer.callback_metrics)

    standalone = KPCAOODMonitor(fit_on=loader("train"), ood_dataloaders=loader("ood"), **DETECTOR)
    trainer = make_trainer(tmp_path, [standalone])
    trainer.validate(module, loader("val"))
    assert standalone.n_fits == 1 and float(trainer.callback_metrics["ood/flagged_rate"]) == exactly(0.05)


def test_state_keys_tell_monitors_apart():
    assert KPCAOODMonitor("encoder").state_key == KPCAOODMonitor("encoder", sigma=2.0).state_key
    keys = {KPCAOODMonitor("encoder").state_key, KPCAOODMonitor(encode).state_key}
    keys.add(KPCAOODMonitor("encoder", log_prefix="ood2/").state_key)
    assert len(keys) == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(refit="sometimes"), "`refit` must be one of"),
        (dict(tpr=0.0), "`tpr` must be in"),
        (dict(tpr=1.5), "`tpr` must be in"),
        (dict(fit_on=""), "`fit_on` must be 'train', a DataLoader or the name of a datamodule method"),
        (dict(fit_on=torch.zeros(3, 2)), "`fit_on` must be 'train', a DataLoader or the name of a datamodule method"),
        (dict(max_flagged_rate=0.05), "must be in \\(1 - tpr, 1\\]"),
        (dict(max_flagged_rate=1.5), "must be in \\(1 - tpr, 1\\]"),
        (dict(max_flagged_rate=0.2, refit="epoch"), "needs refit='once'"),
        (dict(stop_on_drift=True), "needs a `max_flagged_rate`"),
        (dict(ood_dataloaders=[torch.zeros(3, 2)]), "`ood_dataloaders` must be a DataLoader or a mapping"),
        (dict(ood_val_dataloader_idx=-1), "integers >= 0"),
        (dict(ood_val_dataloader_idx={1: "ood_dataloader_idx_1"}), "without 'dataloader_idx'"),
        (dict(ood_dataloaders={"": DataLoader([])}), "non-empty string"),
        (dict(ood_val_dataloader_idx={1: "ood"}, ood_dataloaders=DataLoader([])), "used twice"),
        (dict(embedding=3), "must be a submodule name"),
        (dict(sigma=-1.0), "`sigma`"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KPCAOODMonitor(**kwargs)


def test_missing_submodule_raises_at_setup(tmp_path):
    trainer = make_trainer(tmp_path, [KPCAOODMonitor("backbone", **DETECTOR)], num_sanity_val_steps=0)
    with pytest.raises(ValueError, match="no submodule 'backbone'"):
        trainer.fit(DigitsModule(), loader("train"), loader("val"))
    # a datamodule method name needs a datamodule
    trainer = make_trainer(tmp_path, [KPCAOODMonitor(fit_on="train_dataloader_for_eval", **DETECTOR)])
    with pytest.raises(ValueError, match="`fit_on`='train_dataloader_for_eval' names an attribute of the trainer's"):
        trainer.fit(DigitsModule(), loader("train"), loader("val"))


@pytest.mark.parametrize("world_size", [1, 2])
def test_pending_sums_survive_a_single_process_checkpoint_and_are_dropped_after_ddp(world_size):
    z = torch.randn(30, 16, generator=torch.Generator().manual_seed(0))
    monitor = KPCAOODMonitor(fit_on="train", **DETECTOR)
    monitor.detector.partial_fit(z)  # a fit still accumulating, as in a mid-epoch checkpoint
    state = {**monitor.state_dict(), "world_size": world_size}
    restored = KPCAOODMonitor(fit_on="train", **DETECTOR)
    if world_size == 1:
        restored.load_state_dict(state)
        torch.testing.assert_close(restored.detector.sums.compute(), monitor.detector.sums.compute(), rtol=0, atol=0)
    else:  # rank 0's partial sums alone would be added on every rank
        with pytest.warns(UserWarning, match="partial sums are dropped"):
            restored.load_state_dict(state)
        assert restored.detector.sums.sample_count() == 0 and restored.detector.in_features == 16


def test_a_checkpoint_from_before_the_underscored_fitted_state_resumes_the_monitor():
    """The detector's fitted state is saved as `mean_`, ..., `threshold_`, `n_fitted_`; a monitor checkpoint
    written with the names without the underscore restores the same detector."""
    g = torch.Generator().manual_seed(0)
    z, val = torch.randn(300, 16, generator=g), torch.randn(100, 16, generator=g)
    monitor = KPCAOODMonitor(fit_on="train", **DETECTOR)
    monitor.detector.fit(z)
    monitor.detector.calibrate(val, tpr=TPR)
    monitor.phase = "monitoring"
    state = monitor.state_dict()
    old = {**state, "detector": {k[:-1] if k.endswith("_") else k: v for k, v in state["detector"].items()}}
    assert {"threshold", "n_fitted", "components"} <= set(old["detector"])
    for saved in (state, old):
        restored = KPCAOODMonitor(fit_on="train", **DETECTOR)
        restored.load_state_dict(saved)
        assert restored.phase == "monitoring" and restored.detector.fitted
        assert float(restored.detector.threshold_) == float(monitor.detector.threshold_)
        torch.testing.assert_close(restored.detector.score(val), monitor.detector.score(val), rtol=0, atol=0)
