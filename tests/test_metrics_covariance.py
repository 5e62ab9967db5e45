import pytest
import torch

from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import RFFCovariance


def test_covariance_equals_explicit_formula_and_has_trace_one():
    x = torch.randn(250, 5, dtype=torch.float64)
    metric = RFFCovariance(sigma=1.3, n_frequencies=40, seed=7, chunk_size=32)
    for batch in torch.split(x, 60):
        metric.update(batch)
    cov = metric.compute()
    phi = GaussianRFF(5, 40, sigma=1.3, seed=7)(x)
    torch.testing.assert_close(cov, phi.T @ phi / 250)
    assert float(cov.trace()) == pytest.approx(1.0, abs=1e-12)
    assert cov.dtype == torch.float64


def test_state_size_is_independent_of_the_number_of_samples():
    metric = RFFCovariance(sigma=1.0, n_frequencies=8, chunk_size=256)
    metric.update(torch.randn(10, 3))
    size = metric.samples.state.numel()
    for batch in torch.randn(5000, 3).split(100):
        metric.update(batch)
        assert metric.samples.pending_rows < 256  # the row buffer is bounded by chunk_size
    assert metric.samples.state.numel() == size == 1 + 16 + 256  # count, feature sum, outer-product sum


def test_feature_map_is_built_lazily_or_eagerly_with_the_same_frequencies():
    lazy, eager = RFFCovariance(1.0, 8, seed=3), RFFCovariance(1.0, 8, seed=3, in_features=4)
    assert lazy.in_features is None and not lazy.feature_map.built and eager.feature_map.built
    x = torch.randn(20, 4)
    lazy.update(x)
    eager.update(x)
    assert torch.equal(lazy.feature_map.omega, eager.feature_map.omega)
    torch.testing.assert_close(lazy.compute(), eager.compute())


def test_state_round_trips_through_state_dict_into_a_fresh_metric():
    x = torch.randn(100, 6)
    metric = RFFCovariance(sigma=2.0, n_frequencies=16, seed=1)
    metric.update(x[:50])
    restored = RFFCovariance(sigma=2.0, n_frequencies=16, seed=1)
    restored.load_state_dict(metric.state_dict())
    assert torch.equal(restored.feature_map.omega, metric.feature_map.omega)  # redrawn from the seed
    assert "feature_map.omega" not in metric.state_dict()  # the checkpoint carries the sums, not the draws
    metric.update(x[50:])
    restored.update(x[50:])
    assert torch.equal(restored.compute(), metric.compute())


def test_reset_clears_sums_but_keeps_frequencies():
    metric = RFFCovariance(sigma=1.0, n_frequencies=8)
    metric.update(torch.randn(10, 3))
    omega = metric.feature_map.omega.clone()
    metric.reset()
    assert metric.sample_count() == 0 and float(metric.samples.state.abs().sum()) == 0
    assert torch.equal(metric.feature_map.omega, omega)


def test_dtype_casts_keep_float64_states():
    metric = RFFCovariance(sigma=1.0, n_frequencies=8)
    metric.update(torch.randn(10, 3))
    holder = torch.nn.ModuleDict({"m": metric}).to(torch.bfloat16)
    assert holder["m"].samples.state.dtype == torch.float64
    assert holder["m"].feature_map.omega.dtype == torch.float64
    holder["m"].update(torch.randn(10, 3, dtype=torch.bfloat16))
    assert float(holder["m"].compute().trace()) == pytest.approx(1.0, abs=1e-6)


def test_bad_input_errors_name_the_metric_and_fix():
    metric = RFFCovariance(sigma=1.0, n_frequencies=8)
    with pytest.raises(RuntimeError, match="RFFCovariance.compute\\(\\): no samples"):
        metric.compute()
    metric.update(torch.randn(4, 3))
    with pytest.raises(ValueError, match="RFFCovariance: `features` has width 5 but 3"):
        metric.update(torch.randn(4, 5))
    with pytest.raises(ValueError, match="RFFCovariance: `features` contains NaN"):
        metric.update(torch.tensor([[0.0, float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="sigma"):
        RFFCovariance(sigma=0, n_frequencies=8)
    with pytest.raises(ValueError, match="n_frequencies"):
        RFFCovariance(sigma=1.0, n_frequencies=-2)


def test_empty_batches_are_accepted():
    metric = RFFCovariance(sigma=1.0, n_frequencies=8)
    metric.update(torch.empty(0, 3))
    metric.update(torch.randn(5, 3))
    assert metric.sample_count() == 5
