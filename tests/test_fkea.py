"""FKEAVendi and fkea_vendi against the exact n x n Vendi and the identities of the FKEA digest (section 9)."""

import math

import pytest
import torch
from torchmetrics import MetricCollection

from lightning_spectral.algebra import covariance, psd_eigenvalues
from lightning_spectral.functional import fkea_vendi, mode_scores, vendi_exact
from lightning_spectral.functional.fkea import vendi_score
from lightning_spectral.kernels import GaussianRFF, gaussian_kernel
from lightning_spectral.metrics import FKEAVendi
from tests.data import mixture_means, sample_mixture

ORDERS = [1, 1.5, 2, "inf"]


def test_metric_equals_functional_and_the_proxy_kernel_matrix():
    x = torch.randn(300, 4, dtype=torch.float64)
    metric = FKEAVendi(sigma=1.0, n_frequencies=100, alpha=ORDERS, seed=2)
    for batch in x.split(77):
        metric.update(batch)
    scores = metric.compute()
    functional = fkea_vendi(x, sigma=1.0, n_frequencies=100, alpha=ORDERS, seed=2)
    phi = GaussianRFF(4, 100, sigma=1.0, seed=2)(x)
    proxy = psd_eigenvalues(phi @ phi.T / 300)  # same non-zero spectrum as the 2r x 2r covariance
    kernel = phi @ phi.T  # the RFF kernel matrix: RKE is 1 / its mean square over pairs i != j (no diagonal)
    pairs = ~torch.eye(300, dtype=torch.bool)
    for order in ORDERS:
        assert float(scores[order]) == pytest.approx(float(functional[order]), rel=1e-12)
        oracle = 1 / kernel[pairs].square().mean() if order == 2 else vendi_score(proxy, order)
        assert float(scores[order]) == pytest.approx(float(oracle), rel=1e-9)
    plug_in = float(vendi_score(proxy, 2))  # 1 / mean over all pairs: low by O(1/n)
    assert plug_in < float(scores[2]) and float(scores[2]) == pytest.approx(plug_in, rel=0.1)


def test_single_order_returns_a_scalar_and_rke_skips_the_eigendecomposition():
    x = torch.randn(200, 3, dtype=torch.float64)
    for order in (1, 2):
        metric = FKEAVendi(sigma=1.0, n_frequencies=64, alpha=order)
        metric.update(x)
        value = metric.compute()
        assert value.ndim == 0
        assert float(value) == pytest.approx(float(fkea_vendi(x, 1.0, 64, alpha=order)), rel=1e-10)


def test_orders_are_ordered_and_bounded():
    x = torch.randn(150, 5, dtype=torch.float64)
    scores = fkea_vendi(x, sigma=2.0, n_frequencies=50, alpha=[0.5, 1, 1.5, 2, 4, "inf"])
    values = [float(v) for v in scores.values()]
    assert all(a >= b - 1e-9 for a, b in zip(values, values[1:], strict=False))
    assert 1 <= values[-1] and values[0] <= min(150, 100)


def test_invariances_of_the_spectrum_with_fixed_frequencies():
    x = torch.randn(120, 4, dtype=torch.float64)
    base = fkea_vendi(x, sigma=1.5, n_frequencies=64, alpha=ORDERS)

    def close(other, orders=ORDERS):
        for order in orders:
            assert float(other[order]) == pytest.approx(float(base[order]), rel=1e-9)

    close(fkea_vendi(x[torch.randperm(120)], sigma=1.5, n_frequencies=64, alpha=ORDERS))  # permutation
    tripled = fkea_vendi(x.repeat(3, 1), sigma=1.5, n_frequencies=64, alpha=ORDERS)  # duplication: the spectrum,
    close(tripled, [1, 1.5, "inf"])  # but RKE counts pairs of distinct samples, and a copy is one more such pair
    purity = (120 / float(base[2]) - 1 / float(base[2]) + 1) / 120  # P from U = (n P - 1) / (n - 1) at n = 120
    assert float(tripled[2]) == pytest.approx((360 - 1) / (360 * purity - 1), rel=1e-9)
    close(fkea_vendi(x + 7.0, sigma=1.5, n_frequencies=64, alpha=ORDERS))  # translation
    close(fkea_vendi(2.5 * x, sigma=1.5 * 2.5, n_frequencies=64, alpha=ORDERS))  # joint scaling of data and sigma


def test_identical_samples_score_exactly_one():
    scores = fkea_vendi(torch.ones(40, 3, dtype=torch.float64), sigma=1.0, n_frequencies=32, alpha=ORDERS)
    for order in ORDERS:
        assert float(scores[order]) == pytest.approx(1.0, abs=1e-9)


def test_close_to_exact_vendi_and_rke_at_n_2000_and_2r_8000():
    """Issue 3: within 2 % of the exact scores on a well-separated mixture (digest section 7A setup)."""
    means = mixture_means(8, d=10, spread=20.0)
    x, _ = sample_mixture(means, 2000, std=0.3)
    sigma = 3.0
    exact = vendi_exact(x, sigma=sigma, alpha=[1, 2])
    approx = fkea_vendi(x.float(), sigma=sigma, n_frequencies=4000, alpha=[1, 2])
    for order in (1, 2):
        assert abs(float(approx[order]) / float(exact[order]) - 1) < 0.02, (order, approx, exact)
    # and it converges: far fewer frequencies are visibly worse for Vendi-1
    coarse = fkea_vendi(x.float(), sigma=sigma, n_frequencies=50, alpha=1)
    assert abs(float(coarse) / float(exact[1]) - 1) > abs(float(approx[1]) / float(exact[1]) - 1)


def test_rke_is_biased_low_on_average():
    """Digest 7B: E[sum lambda~^2] exceeds sum lambda^2 by O(1/r), so FKEA-RKE sits below the exact RKE."""
    x, _ = sample_mixture(mixture_means(8), 800, std=0.3)
    exact = float(1 / gaussian_kernel(x, sigma=3.0).square().mean())
    fkea = [float(fkea_vendi(x, sigma=3.0, n_frequencies=100, alpha=2, seed=s)) for s in range(8)]
    assert sum(fkea) / len(fkea) < exact


@pytest.mark.parametrize("sigma", [10.0])
def test_well_separated_equal_modes_score_about_k_and_weights_give_exp_entropy(sigma):
    means = mixture_means(8)
    x, labels = sample_mixture(means, 3000, std=0.3)
    scores = fkea_vendi(x, sigma=sigma, n_frequencies=1000, alpha=ORDERS)
    for order in ORDERS:
        assert 8 * 0.9 < float(scores[order]) < 8 * 1.1
    weights = torch.tensor([0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05], dtype=torch.float64)
    x, _ = sample_mixture(means, 4000, weights=weights.tolist(), std=0.3)
    for order in (1, 2, "inf"):
        expected = float(vendi_score(weights, order))
        assert float(fkea_vendi(x, sigma=sigma, n_frequencies=1000, alpha=order)) == pytest.approx(expected, rel=0.1)


def test_score_grows_with_the_number_of_modes():
    means = mixture_means(10)
    x, labels = sample_mixture(means, 4000, std=1.0)
    scores = [float(fkea_vendi(x[labels < t], sigma=5.0, n_frequencies=500, alpha=1)) for t in range(1, 11)]
    assert all(b > a for a, b in zip(scores, scores[1:], strict=False)), scores


def test_modes_map_to_components_and_top_samples_are_pure():
    means = mixture_means(5, seed=3)
    weights = [0.35, 0.25, 0.2, 0.12, 0.08]  # distinct weights: distinct eigenvalues
    x, labels = sample_mixture(means, 3000, weights=weights, std=0.3, seed=4)
    metric = FKEAVendi(sigma=5.0, n_frequencies=500)
    for batch in x.split(500):
        metric.update(batch)
    modes = metric.reading().modes(5)
    assert modes.eigenvectors.shape == (1000, 5)
    assert bool(modes.significant.all())
    # eigenvalue ~ weight x within-mode similarity, largest first
    assert torch.all(modes.eigenvalues[:-1] >= modes.eigenvalues[1:])
    ids = torch.arange(3000)
    batches = list(zip(x.split(256), ids.split(256), strict=True))
    found = []
    for mode_ids, scores in metric.reading().top_samples(batches, k=5, per_mode=50):
        assert len(mode_ids) == 50 and torch.all(scores[:-1] >= scores[1:])
        mode_labels = labels[mode_ids]
        purity = float((mode_labels == mode_labels.mode().values).float().mean())
        assert purity >= 0.95
        found.append(int(mode_labels.mode().values))
    assert sorted(found) == [0, 1, 2, 3, 4]  # one mode per component, in order of weight
    assert found == [0, 1, 2, 3, 4]


def test_mode_scores_generalise_to_fresh_samples():
    means = mixture_means(4, seed=5)
    x, labels = sample_mixture(means, 2000, weights=[0.4, 0.3, 0.2, 0.1], std=0.3, seed=6)
    fresh, fresh_labels = sample_mixture(means, 1000, weights=[0.25] * 4, std=0.3, seed=7)
    metric = FKEAVendi(sigma=5.0, n_frequencies=400)
    metric.update(x)
    top = metric.reading().modes(1)
    scores = mode_scores(fresh, metric.feature_map, top.eigenvectors)[:, 0]
    inside, outside = scores[fresh_labels == 0], scores[fresh_labels != 0]
    auc = float((inside[:, None] > outside[None, :]).double().mean())
    assert auc > 0.99


def test_sign_rule_makes_fitting_set_scores_sum_non_negative():
    x = torch.randn(500, 3, dtype=torch.float64)
    metric = FKEAVendi(sigma=1.0, n_frequencies=64)
    metric.update(x)
    modes = metric.reading().modes(10)
    sums = mode_scores(x, metric.feature_map, modes.eigenvectors).sum(0)
    assert bool((sums >= -1e-9).all())


def test_state_survives_a_checkpoint_round_trip(tmp_path):
    x = torch.randn(400, 6)
    metric = FKEAVendi(sigma=2.0, n_frequencies=64, alpha=[1, 2])
    metric.update(x[:200])
    torch.save(metric.state_dict(), tmp_path / "metric.pt")
    restored = FKEAVendi(sigma=2.0, n_frequencies=64, alpha=[1, 2])
    restored.load_state_dict(torch.load(tmp_path / "metric.pt", weights_only=True))
    metric.update(x[200:])
    restored.update(x[200:])
    for order in (1, 2):
        assert float(restored.compute()[order]) == float(metric.compute()[order])


def test_inside_a_metric_collection_with_forward():
    collection = MetricCollection({"vendi": FKEAVendi(sigma=1.0, n_frequencies=32), "rke": FKEAVendi(1.0, 32, alpha=2)})
    x = torch.randn(100, 3)
    batch_values = collection(x[:50])  # forward: value on the batch, states accumulate
    assert set(batch_values) == {"vendi", "rke"}
    collection.update(x[50:])
    values = collection.compute()
    assert float(values["vendi"]) == pytest.approx(float(fkea_vendi(x, 1.0, 32)), rel=1e-5)
    assert float(values["rke"]) == pytest.approx(float(fkea_vendi(x, 1.0, 32, alpha=2)), rel=1e-5)


def test_memory_does_not_grow_with_samples():
    metric = FKEAVendi(sigma=1.0, n_frequencies=16)
    metric.update(torch.randn(10, 3))
    before = metric.samples.state.numel()
    for _ in range(5):
        metric.update(torch.randn(2000, 3))
        assert metric.samples.pending_rows < metric.chunk_size
    assert metric.samples.state.numel() == before


def test_bad_input_errors_name_the_metric_and_the_fix():
    metric = FKEAVendi(sigma=1.0, n_frequencies=8)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="FKEAVendi.compute\\(\\): no samples"):
        metric.compute()
    metric.update(torch.randn(5, 3))
    with pytest.raises(ValueError, match="FKEAVendi: `features` has width 4 but 3"):
        metric.update(torch.randn(5, 4))
    with pytest.raises(ValueError, match="FKEAVendi: `features` contains NaN or Inf"):
        metric.update(torch.tensor([[1.0, math.inf, 0.0]]))
    with pytest.raises(ValueError, match="alpha"):
        FKEAVendi(sigma=1.0, alpha=0)
    with pytest.raises(ValueError, match="alpha"):
        FKEAVendi(sigma=1.0, alpha=[])
    with pytest.raises(ValueError, match="k"):
        metric.reading().modes(0)
    with pytest.raises(ValueError, match="empty"):
        fkea_vendi(torch.empty(0, 3), sigma=1.0)


def test_cached_eigendecomposition_follows_every_state_change():
    x = torch.randn(300, 3, dtype=torch.float64)
    metric = FKEAVendi(sigma=1.0, n_frequencies=32)
    metric.update(x[:100])
    first = metric.reading().modes(2).eigenvalues
    assert torch.equal(metric.reading().modes(2).eigenvalues, first)  # reused
    metric.update(x[100:])
    second = metric.reading().modes(2).eigenvalues
    assert not torch.equal(second, first)
    metric(x[:50])  # forward: batch value, then the global states grow again
    reference = FKEAVendi(sigma=1.0, n_frequencies=32)
    reference.update(torch.cat([x, x[:50]]))
    torch.testing.assert_close(metric.reading().modes(2).eigenvalues, reference.reading().modes(2).eigenvalues)
    metric.reset()
    metric.update(x[:100])
    torch.testing.assert_close(metric.reading().modes(2).eigenvalues, first)


ROUND_OFF_ORDERS = [0.5, 1, 2, "inf"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ten_thousand_identical_vectors_score_one_at_every_order(dtype):
    # issue 13: Vendi-0.5 of 10,000 identical float32 vectors was 1.1 to 1.5 (round-off eigenvalues ~1e-7, p^0.5)
    x = torch.randn(1, 16, generator=torch.Generator().manual_seed(3)).repeat(10_000, 1).to(dtype)
    metric = FKEAVendi(sigma=1.0, n_frequencies=512, alpha=ROUND_OFF_ORDERS)
    for batch in x.split(3000):
        metric.update(batch)
    for scores in (metric.compute(), fkea_vendi(x, sigma=1.0, n_frequencies=512, alpha=ROUND_OFF_ORDERS)):
        for order in ROUND_OFF_ORDERS:
            assert float(scores[order]) == pytest.approx(1.0, abs=1e-6), order
    single = FKEAVendi(sigma=1.0, n_frequencies=512, alpha=0.5)
    single.update(x)
    assert float(single.compute()) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dropping_round_off_leaves_full_rank_spectra_unchanged(dtype):
    x = torch.randn(5000, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(dtype)
    rff = GaussianRFF(16, 512, sigma=3.0, seed=0)
    cov = covariance(x, rff)
    kept, dropped = psd_eigenvalues(cov, drop_round_off=False), psd_eigenvalues(cov)
    for order in ROUND_OFF_ORDERS:
        assert float(vendi_score(dropped, order)) == pytest.approx(float(vendi_score(kept, order)), rel=1e-6)


@pytest.mark.parametrize("n", [100, 300])
def test_dropping_round_off_brings_float32_closer_to_float64_below_full_rank(n):
    # n < 2r: 1024 - n exact zeros, which float32 products turn into +-1e-9 noise; order 0.5 amplifies it
    x = torch.randn(n, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    rff = GaussianRFF(16, 512, sigma=3.0, seed=0)
    exact = psd_eigenvalues(covariance(x, rff), drop_round_off=False)
    cov32 = covariance(x.float(), rff)
    before, after = psd_eigenvalues(cov32, drop_round_off=False), psd_eigenvalues(cov32)
    for order in ROUND_OFF_ORDERS:
        truth = float(vendi_score(exact, order))
        error_after = abs(float(vendi_score(after, order)) / truth - 1)
        assert error_after <= abs(float(vendi_score(before, order)) / truth - 1) + 1e-9
        assert error_after < 1e-6


def test_float32_eigendecomposition_keeps_every_order_within_1e_4(monkeypatch):
    from lightning_spectral.algebra import eigen as linalg

    monkeypatch.setattr(linalg, "FLOAT32_MIN_SIZE", 256)  # "auto" picks float32 at this test's 2r = 256
    assert linalg.eigen_dtype("auto", 256) == torch.float32 and linalg.eigen_dtype("auto", 255) == torch.float64
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(12, 16, generator=g) * 4).repeat(100, 1) + torch.randn(1200, 16, generator=g)
    scores = {}
    for precision in ("auto", "float32", "float64"):
        metric = FKEAVendi(3.0, n_frequencies=128, alpha=[0.5, 1, 2, "inf"], precision=precision)
        metric.update(x)
        scores[precision] = {order: float(value) for order, value in metric.compute().items()}
    assert scores["auto"] == scores["float32"]
    for order, value in scores["float64"].items():
        assert 2 < value < 1000
        assert scores["float32"][order] == pytest.approx(value, rel=1e-4), order
