"""The t-truncated Vendi score (Ospanov and Farnia, arXiv 2410.21719): its identities, FKEA against the exact n x n
oracle, the metric against the functional form, checkpoints and the summary's n and 2r."""

import math

import pytest
import torch

from lightning_spectral.functional import fkea_vendi, vendi_exact
from lightning_spectral.functional.fkea import truncate_spectrum, truncated_vendi, vendi_score
from lightning_spectral.kernels import GaussianRFF, median_bandwidth
from lightning_spectral.metrics import FKEAVendi
from tests.conftest import digits

ORDERS = [0.5, 1, 2, "inf"]


def test_the_truncated_spectrum_keeps_the_top_t_and_shares_the_rest_evenly():
    values = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64)  # any order, normalised inside
    kept = truncate_spectrum(2 * values, 2)
    torch.testing.assert_close(kept, torch.tensor([0.4 + 0.15, 0.3 + 0.15], dtype=torch.float64))
    assert float(truncate_spectrum(values, 3).sum()) == pytest.approx(1.0, abs=1e-15)
    torch.testing.assert_close(truncate_spectrum(values, 4), torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64))
    torch.testing.assert_close(truncate_spectrum(values, 9), truncate_spectrum(values, 4))
    h = -(0.55 * math.log(0.55) + 0.45 * math.log(0.45))
    assert float(truncated_vendi(values, 2)) == pytest.approx(math.exp(h), rel=1e-12)


def test_identities_t_1_is_one_and_t_at_the_rank_is_the_vendi_score():
    spectrum = torch.tensor([0.5, 0.25, 0.125, 0.125, 0.0, 0.0], dtype=torch.float64)  # rank 4
    for order in ORDERS:
        assert float(truncated_vendi(spectrum, 1, order)) == pytest.approx(1.0, abs=1e-12)
        for t in (4, 5, 6, 100):
            assert float(truncated_vendi(spectrum, t, order)) == pytest.approx(
                float(vendi_score(spectrum, order)), rel=1e-12
            )
    # the exact oracle: 5 far-apart points, each 30 times (K/n has rank 5; its other eigenvalues are round-off)
    x = (torch.eye(5, dtype=torch.float64) * 100).repeat(30, 1)
    plain = vendi_exact(x, sigma=1.0, alpha=[1, 2])
    for t in (5, 20, 150):
        truncated = vendi_exact(x, sigma=1.0, alpha=[1, 2], truncation=t)
        assert float(truncated[1]) == pytest.approx(float(plain[1]), rel=1e-9)
        for order in (1, 2):  # the truncated scores are the plug-in's: 5 at the rank
            assert float(truncated[order]) == pytest.approx(5.0, rel=1e-9)
    # the plain RKE counts pairs of distinct samples: 30 x 29 equal pairs per point of 150 x 149, U = 29 / 149
    assert float(plain[2]) == pytest.approx(149 / 29, rel=1e-9)


def test_monotone_in_t_and_bounded_by_t_and_by_the_vendi_score():
    """The t-truncated spectrum, padded with a zero, majorizes the (t+1)-truncated one: every Renyi order rises."""
    spectrum = torch.rand(60, generator=torch.Generator().manual_seed(0), dtype=torch.float64) ** 4
    for order in ORDERS:
        plain = float(vendi_score(spectrum, order))
        scores = [float(truncated_vendi(spectrum, t, order)) for t in range(1, 61)]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(scores, scores[1:], strict=False)), order
        assert all(1 - 1e-12 <= s <= t * (1 + 1e-12) for t, s in zip(range(1, 61), scores, strict=True))
        assert max(scores) <= plain * (1 + 1e-12) and scores[-1] == pytest.approx(plain, rel=1e-12)


def digits_subset(n: int = 400) -> tuple[torch.Tensor, float]:
    x, _ = digits()
    x = x.double()[:n]
    return x, 0.5 * median_bandwidth(x)


def test_fkea_converges_to_the_exact_truncated_score():
    """400 digits, sigma = half the median distance (plain Vendi-1 74, flat spectrum), t = 10.

    Measured: FKEA's relative error against the exact n x n score, 5 frequency seeds, max |error| 1.3 % (order 1)
    and 3.1 % (order 2) at 2r = 256, 0.9 % and 2.3 % at 2r = 1024; the tolerances are about 2.5x the latter.
    """
    x, sigma = digits_subset()
    exact = vendi_exact(x, sigma, alpha=[1, 2], truncation=10)
    assert float(exact[1]) == pytest.approx(9.268, abs=1e-3)  # far below the plain score (74): the tail is cut
    for seed in range(3):
        approx = fkea_vendi(x, sigma, n_frequencies=512, alpha=[1, 2], seed=seed, truncation=10)
        assert abs(float(approx[1]) / float(exact[1]) - 1) < 0.025, (seed, approx, exact)
        assert abs(float(approx[2]) / float(exact[2]) - 1) < 0.05, (seed, approx, exact)


def test_metric_equals_functional_in_batches_and_order_2_is_truncated_too():
    x = torch.randn(300, 4, dtype=torch.float64)
    metric = FKEAVendi(sigma=1.0, n_frequencies=100, alpha=ORDERS, seed=2, truncation=12)
    for batch in x.split(77):
        metric.update(batch)
    scores = metric.compute()
    functional = fkea_vendi(x, sigma=1.0, n_frequencies=100, alpha=ORDERS, seed=2, truncation=12)
    phi = GaussianRFF(4, 100, sigma=1.0, seed=2)(x)
    proxy = torch.linalg.eigvalsh(phi @ phi.T / 300).clamp(min=0)  # the same non-zero spectrum, n x n
    for order in ORDERS:
        assert float(scores[order]) == pytest.approx(float(functional[order]), rel=1e-12)
        assert float(scores[order]) == pytest.approx(float(truncated_vendi(proxy, 12, order)), rel=1e-9)
    rke = FKEAVendi(sigma=1.0, n_frequencies=100, alpha=2, seed=2, truncation=12)
    rke.update(x)
    assert float(rke.compute()) == pytest.approx(float(functional[2]), rel=1e-12)  # not the plain RKE shortcut
    assert float(rke.compute()) < float(fkea_vendi(x, sigma=1.0, n_frequencies=100, alpha=2, seed=2))


def test_summary_names_n_and_2r():
    metric = FKEAVendi(sigma=1.0, n_frequencies=48, truncation=5)
    metric.update(torch.randn(123, 3))
    summary = metric.reading().summary()
    assert set(summary) == {"", "se", "n", "n_features", "sigma"}  # the bandwidth too, so a run can be repeated
    assert float(summary["n"]) == 123 and float(summary["n_features"]) == 96
    assert float(summary[""]) == pytest.approx(float(metric.compute()), rel=1e-12)


def test_a_checkpoint_resumes_the_truncated_score():
    x = torch.randn(500, 5, dtype=torch.float64)
    metric = FKEAVendi(sigma=2.0, n_frequencies=32, chunk_size=128, truncation=8)
    metric.update(x[:300])
    restored = FKEAVendi(sigma=2.0, n_frequencies=32, chunk_size=128, truncation=8)
    restored.load_state_dict(metric.state_dict())
    for m in (metric, restored):
        m.update(x[300:])
    assert float(restored.compute()) == pytest.approx(float(metric.compute()), rel=1e-12)


@pytest.mark.parametrize("bad", [0, -3, 2.5, 10.0, True, "10", torch.tensor(10)])
def test_truncation_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="`truncation`"):
        FKEAVendi(1.0, n_frequencies=8, truncation=bad)
    with pytest.raises(ValueError, match="`truncation`"):
        fkea_vendi(torch.randn(10, 2), 1.0, 8, truncation=bad)
    with pytest.raises(ValueError, match="`truncation`"):
        vendi_exact(torch.randn(10, 2), 1.0, truncation=bad)
    with pytest.raises(ValueError, match="`t`"):
        truncated_vendi(torch.tensor([0.5, 0.5]), bad)
