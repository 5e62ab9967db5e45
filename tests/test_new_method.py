"""A new method is a small function and a small metric, and nothing else: a toy kernel-covariance overlap.

``overlap(X, Y) = tr(C_X C_Y) / sqrt(tr(C_X^2) tr(C_Y^2))``: the cosine between two distributions' kernel
covariances (1 for one distribution against itself). Its exact form, through the kernel matrices, is
``mean_ij k(x_i, y_j)^2 / sqrt(mean_ij k(x_i, x_j)^2 mean_ij k(y_i, y_j)^2)``. The function below would live in
``functional/overlap.py``, the metric in ``metrics/overlap.py`` and its reading in ``metrics/overlap_reading.py``; the accumulators, the sync, checkpoints,
images in, DDP and the callbacks come from the library, unedited.
"""

import pytest
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import EmbeddingMetrics
from lightning_spectral.kernels import GaussianRFF, gaussian_kernel
from lightning_spectral.metrics import Reading, SpectralMetric
from tests.conftest import DigitsClassifier, digits, quiet_trainer
from tests.ddp import run_ddp


def overlap(c_x: Tensor, c_y: Tensor) -> Tensor:
    """``tr(C_X C_Y) / sqrt(tr(C_X^2) tr(C_Y^2))`` of two (D, D) covariances (the "functional/" file)."""
    return (c_x * c_y).sum() / ((c_x * c_x).sum() * (c_y * c_y).sum()).sqrt()


class OverlapReading(Reading):
    """What the sums say (the "metrics/overlap_reading.py" file): the overlap of the two sides' covariances."""

    def _value(self) -> Tensor:
        return overlap(self.streams["gen"].second_moment(), self.streams["ref"].second_moment())


class CovarianceOverlap(SpectralMetric):
    """The overlap of the generated and reference kernel covariances (the "metrics/" file)."""

    inputs = "two"
    higher_is_better = True
    reading_class = OverlapReading

    def __init__(self, sigma: float, n_frequencies: int = 256, **kwargs) -> None:
        super().__init__(GaussianRFF(None, n_frequencies, sigma, persistent=False), **kwargs)
        self.gen = self._add_accumulator("gen")
        self.ref = self._add_accumulator("ref", reference=True)

    def update(self, features: Tensor, real: bool) -> None:
        (self.ref if real else self.gen).add(self._embeddings(features))


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(300, 3, generator=g, dtype=torch.float64)
    y = torch.randn(300, 3, generator=g, dtype=torch.float64) + torch.tensor([1.5, 0.0, 0.0], dtype=torch.float64)
    return x, y


def exact(x, y, sigma):
    kxy, kxx, kyy = gaussian_kernel(x, y, sigma), gaussian_kernel(x, sigma=sigma), gaussian_kernel(y, sigma=sigma)
    return kxy.square().mean() / (kxx.square().mean() * kyy.square().mean()).sqrt()


def test_the_toy_metric_streams_to_its_exact_form():
    x, y = data()
    metric = CovarianceOverlap(sigma=2.0, n_frequencies=2048)
    for part in x.split(64):
        metric.update(part, real=False)
    for part in y.split(50):
        metric.update(part, real=True)
    value = float(metric.compute())
    assert value == pytest.approx(float(exact(x, y, 2.0)), rel=0.02)
    assert 0.2 < value < 0.95  # two different distributions: neither 0 nor 1
    restored = CovarianceOverlap(sigma=2.0, n_frequencies=2048)
    restored.load_state_dict(metric.state_dict())  # checkpoints from the base, packed
    assert float(restored.compute()) == value


def sharded(rank, world_size):
    x, y = data()
    metric = CovarianceOverlap(sigma=2.0, n_frequencies=128)
    metric.update(x[rank::world_size], real=False)
    metric.update(y[rank::world_size], real=True)
    return float(metric.compute())


def test_the_toy_metric_under_ddp_equals_one_process(tmp_path):
    want = sharded(0, 1)
    for status, *value in run_ddp(sharded, tmp_path=tmp_path):
        assert status == "ok", value
        assert value[0] == pytest.approx(want, rel=1e-12)


def test_the_toy_metric_runs_in_a_callback_unedited(tmp_path):
    x, y = digits()
    ids = torch.arange(len(x))
    train, val = TensorDataset(x[:1000], y[:1000], ids[:1000]), TensorDataset(x[1000:1400], y[1000:1400], ids[1000:1400])
    callback = EmbeddingMetrics(
        {"overlap": CovarianceOverlap(sigma=2.0)}, embedding="encoder", reference_dataloader=DataLoader(train, 100)
    )
    trainer = quiet_trainer(tmp_path, [callback], num_sanity_val_steps=0)
    trainer.fit(DigitsClassifier(), DataLoader(train, batch_size=100), DataLoader(val, batch_size=64))
    assert 0.5 < trainer.callback_metrics["val/overlap/value"] <= 1.0  # train and validation digits overlap well
