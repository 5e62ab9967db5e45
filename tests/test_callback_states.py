"""Callback states checked whole before they load (a refused state leaves the callback as it was), and the
checkpoint of ``Trainer.fit(ckpt_path=...)`` checked before Lightning reads it when a callback of this library runs."""

import copy
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import (
    CheckedCheckpointIO,
    EmbeddingMetrics,
    GeneratedSamples,
    KPCAOODMonitor,
    SPECAlign,
)
from lightning_spectral.io import CheckpointError
from lightning_spectral.metrics import FastMMD, FKEAVendi
from tests.conftest import LinearModule


class Tiny(LinearModule):
    """The shared linear module, with a ``sample`` for GeneratedSamples."""

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:  # for GeneratedSamples
        return torch.rand(n, 1, 2, 2, generator=generator)


def loader(n: int = 16) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=torch.Generator().manual_seed(0))), batch_size=8)


def trainer(tmp_path, callback, **kwargs) -> L.Trainer:
    options = dict(
        max_epochs=1, limit_train_batches=2, limit_val_batches=2, num_sanity_val_steps=0, logger=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path,
        callbacks=[callback],
    )
    return L.Trainer(**{**options, **kwargs})


def embedding_metrics() -> EmbeddingMetrics:
    return EmbeddingMetrics(
        {"vendi": FKEAVendi(sigma=1.0, n_frequencies=8), "mmd": FastMMD(1.0, n_frequencies=8)},
        reference_features=torch.randn(8, 3, generator=torch.Generator().manual_seed(1)),
    )


def generated() -> GeneratedSamples:
    metrics = {"v": FKEAVendi(sigma=1.0, n_frequencies=8), "w": FKEAVendi(sigma=2.0, n_frequencies=8)}
    return GeneratedSamples(metrics, nn.Flatten(), n_samples=16, sample_batch_size=8, galleries=False)


def fitted(callback, tmp_path):
    """``callback`` after one short fit (its sums and values non-trivial)."""
    trainer(tmp_path, callback).fit(Tiny(), loader(), loader())
    return callback


def snapshot(callback) -> dict[str, Any]:
    return copy.deepcopy(callback.state_dict())


def assert_same(first: Any, second: Any) -> None:
    if isinstance(first, dict):
        assert first.keys() == second.keys()
        for key in first:
            assert_same(first[key], second[key])
    elif isinstance(first, torch.Tensor):
        assert torch.equal(first, second)
    else:
        assert first == second or (first != first and second != second)  # NaN == NaN here


MAKERS = {
    "EmbeddingMetrics": embedding_metrics,
    "GeneratedSamples": generated,
    "KPCAOODMonitor": lambda: KPCAOODMonitor(embedding="encoder", n_components=2, n_frequencies=8),
    "SPECAlign": lambda: SPECAlign(nn.Linear(4, 2), n_frequencies=8),
}


@pytest.mark.parametrize("name", MAKERS)
def test_a_state_without_a_key_is_refused_by_name_and_changes_nothing(name, tmp_path):
    callback = fitted(MAKERS[name](), tmp_path)
    saved, before = callback.state_dict(), snapshot(callback)
    for key in list(saved):
        if name == "SPECAlign" and key in ("solver", "epoch_means"):  # older states without them still load
            continue
        partial = {k: v for k, v in copy.deepcopy(saved).items() if k != key}
        with pytest.raises(ValueError, match=rf"{name}(\(student\))?\.load_state_dict: the saved state lacks '{key}'.*deleting "
                                             r"`checkpoint\['callbacks'\]"):
            callback.load_state_dict(partial)
        assert_same(snapshot(callback), before)
    callback.load_state_dict(copy.deepcopy(saved))  # the whole state still loads
    assert_same(snapshot(callback), before)


@pytest.mark.parametrize("name", ["EmbeddingMetrics", "GeneratedSamples"])
def test_a_damaged_second_metric_leaves_the_first_as_it_was(name, tmp_path):
    callback = fitted(MAKERS[name](), tmp_path)
    before = snapshot(callback)
    damaged = copy.deepcopy(callback.state_dict())
    first, second = list(callback.metrics)
    damaged["metrics"][first] = copy.deepcopy(MAKERS[name]().metrics[first].state_dict())  # would load (fresh sums)
    damaged["metrics"][second] = {"bogus": torch.zeros(1)}
    with pytest.raises(ValueError, match=rf"{name}\.load_state_dict: the saved state of '{second}' does not load"):
        callback.load_state_dict(damaged)
    assert_same(snapshot(callback), before)
    del damaged["metrics"][second]
    with pytest.raises(ValueError, match=rf"the saved `metrics` lack '{second}'"):
        callback.load_state_dict(damaged)
    assert_same(snapshot(callback), before)


def test_damaged_values_are_refused_before_anything_loads(tmp_path):
    monitor = fitted(MAKERS["KPCAOODMonitor"](), tmp_path)
    before = snapshot(monitor)
    for key, value in (("phase", "done"), ("n_fits", -1), ("world_size", 0), ("fit_epoch", "3")):
        with pytest.raises(ValueError, match=rf"KPCAOODMonitor\.load_state_dict: the saved `{key}` must be"):
            monitor.load_state_dict({**copy.deepcopy(monitor.state_dict()), key: value})
        assert_same(snapshot(monitor), before)
    samples = fitted(generated(), tmp_path)
    with pytest.raises(ValueError, match=r"GeneratedSamples\.load_state_dict: the saved `history` must"):
        samples.load_state_dict({**samples.state_dict(), "history": {"x": {}}})
    with pytest.raises(ValueError, match=r"EmbeddingMetrics\.load_state_dict: the saved state must be the dict"):
        embedding_metrics().load_state_dict([1, 2])


@pytest.mark.parametrize("name", MAKERS)
def test_fit_from_a_cut_off_checkpoint_is_refused_by_name(name, tmp_path):
    first = trainer(tmp_path, MAKERS[name]())
    first.fit(Tiny(), loader(), loader())
    whole = tmp_path / "whole.ckpt"
    first.save_checkpoint(whole)
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(whole.read_bytes()[:1000])
    resumed = trainer(tmp_path, MAKERS[name](), max_epochs=2)
    with pytest.raises(CheckpointError, match=r"`ckpt_path`: '.*cut\.ckpt' is not a complete checkpoint \(1000 bytes"):
        resumed.fit(Tiny(), loader(), loader(), ckpt_path=cut)
    assert type(resumed.strategy.checkpoint_io) is TorchCheckpointIO  # the plugin is put back after the failure
    with pytest.raises(CheckpointError, match=r"no checkpoint file at '.*missing\.ckpt'"):
        trainer(tmp_path, MAKERS[name](), max_epochs=2).fit(Tiny(), loader(), loader(),
                                                            ckpt_path=tmp_path / "missing.ckpt")
    again = trainer(tmp_path, MAKERS[name](), max_epochs=2)
    again.fit(Tiny(), loader(), loader(), ckpt_path=whole)  # a whole one resumes
    assert again.current_epoch == 2 and type(again.strategy.checkpoint_io) is TorchCheckpointIO


def test_the_plugin_checks_without_the_callbacks_and_delegates(tmp_path):
    whole, cut = tmp_path / "whole.ckpt", tmp_path / "cut.ckpt"
    torch.save({"state_dict": {}}, whole)
    cut.write_bytes(whole.read_bytes()[:50])
    checked = CheckedCheckpointIO()
    assert checked.load_checkpoint(whole) == {"state_dict": {}}
    with pytest.raises(CheckpointError, match="is not a complete checkpoint"):
        checked.load_checkpoint(cut)
    plain = L.Trainer(plugins=[CheckedCheckpointIO()], max_epochs=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path)
    with pytest.raises(CheckpointError, match="`ckpt_path`"):
        plain.fit(Tiny(), loader(), ckpt_path=cut)
