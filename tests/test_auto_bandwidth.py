"""sigma="auto": one rule (AUTO_FACTOR x the median distance of the reference rows of smallest content hash), fixed
at the first read, reported in summary() and kept by checkpoints."""

import pytest
import torch

from lightning_spectral.functional import content_hash
from lightning_spectral.kernels import AUTO_FACTOR, AUTO_SAMPLES, GaussianRFF, auto_bandwidth, median_bandwidth
from lightning_spectral.metrics import ConditionalVendi, FastMMD, FINCNovelty, FKEAVendi, KernelPCAOOD, SPECDivergence
from lightning_spectral.metrics.auto_bandwidth import reference_bandwidth, smallest_hashes


def sides(n=700, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, 4, generator=g, dtype=torch.float64)
    gen = torch.randn(n, 4, generator=g, dtype=torch.float64) * 1.5
    return gen, ref


def test_the_rule_is_the_factor_times_the_median_of_the_reference():
    _, ref = sides()
    assert auto_bandwidth(ref) == pytest.approx(AUTO_FACTOR * median_bandwidth(ref, max_samples=len(ref)))
    assert reference_bandwidth(ref, "test") == pytest.approx(auto_bandwidth(ref))  # fewer rows than AUTO_SAMPLES


def test_the_subsample_is_chosen_by_content_not_by_order():
    x = torch.randn(3 * AUTO_SAMPLES, 3, dtype=torch.float64)
    chosen = smallest_hashes(x)
    assert chosen.shape[0] == AUTO_SAMPLES
    torch.testing.assert_close(smallest_hashes(x.flip(0)), chosen)
    halves = torch.cat([smallest_hashes(x[::2]), smallest_hashes(x[1::2])])  # two ranks' sketches, merged
    torch.testing.assert_close(smallest_hashes(halves), chosen)
    assert torch.equal(content_hash(x.float()), content_hash(x))


def test_finc_auto_equals_finc_at_the_reported_sigma():
    gen, ref = sides()
    auto = FINCNovelty("auto", n_frequencies=64)
    auto.update(gen, real=False)  # generated rows may come first: they wait for the reference
    auto.update(ref, real=True)
    summary = auto.reading().summary()
    assert float(summary["sigma"]) == pytest.approx(reference_bandwidth(ref, "test")) == auto.sigma
    fixed = FINCNovelty(float(summary["sigma"]), n_frequencies=64)
    fixed.update(ref, real=True)
    fixed.update(gen, real=False)
    torch.testing.assert_close(fixed.reading().summary(), summary, rtol=1e-12, atol=1e-14)


def test_auto_without_reference_rows_is_refused_by_name():
    gen, _ = sides()
    metric = FINCNovelty("auto", n_frequencies=32)
    metric.update(gen, real=False)
    with pytest.raises(RuntimeError, match=r"sigma='auto'.*real=True"):
        metric.compute()


def test_sigma_stays_after_reset_and_travels_in_checkpoints():
    gen, ref = sides()
    metric = FastMMD("auto", n_frequencies=32)
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    sigma = metric.fit_bandwidth()
    assert metric.sigma == sigma == float(metric.reading().summary()["sigma"])
    state = metric.state_dict()
    metric.reset()
    assert metric.sigma == sigma
    restored = FastMMD("auto", n_frequencies=32)
    restored.load_state_dict(state)
    assert restored.sigma == sigma


def test_one_sample_metrics_fit_on_all_their_rows():
    gen, ref = sides()
    vendi = FKEAVendi("auto", n_frequencies=32)
    vendi.update(gen)
    assert float(vendi.reading().summary()["sigma"]) == pytest.approx(auto_bandwidth(smallest_hashes(gen)))
    detector = KernelPCAOOD("corp", sigma="auto", n_frequencies=32).fit(ref)
    unit = torch.nn.functional.normalize(ref, dim=1)
    assert detector.sigma == pytest.approx(reference_bandwidth(unit, "test"), rel=1e-6)


def test_a_map_with_auto_sigma_refuses_rows_until_fixed():
    rff = GaussianRFF(3, 8, "auto")
    with pytest.raises(RuntimeError, match="set_bandwidth"):
        rff(torch.randn(2, 3))
    rff.set_bandwidth(2.0)
    torch.testing.assert_close(rff(torch.ones(2, 3)), GaussianRFF(3, 8, 2.0)(torch.ones(2, 3)))
    with pytest.raises(ValueError, match="`sigma` must be a positive number, got the string 'median'"):
        GaussianRFF(3, 8, "median")


def test_spec_auto_gives_each_embedding_its_own_sigma():
    gen, ref = sides()
    second = gen[:, :3] @ torch.randn(3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    auto = SPECDivergence("gaussian", "auto", "auto", n_frequencies=48)
    for part in range(0, len(gen), 250):
        auto.update(gen[part : part + 250], second[part : part + 250])
    summary = auto.reading().summary()
    want = (reference_bandwidth(gen, "test"), reference_bandwidth(second, "test"))
    assert (float(summary["sigma_a"]), float(summary["sigma_b"])) == pytest.approx(want)  # FKEAVendi's rule on each
    assert want[0] != pytest.approx(want[1])
    fixed = SPECDivergence("gaussian", *want, n_frequencies=48)
    fixed.update(gen, second)
    torch.testing.assert_close(fixed.reading().summary(), summary, rtol=1e-12, atol=1e-14)
    half = SPECDivergence("gaussian", 2.0, "auto", n_frequencies=48)  # one side fixed, the other fitted
    half.update(gen, second)
    assert (half.sigmas[0], float(half.reading().summary()["sigma_b"])) == (2.0, pytest.approx(want[1]))
    restored = SPECDivergence("gaussian", "auto", "auto", n_frequencies=48)
    restored.load_state_dict(auto.state_dict())
    assert restored.sigmas == auto.sigmas
    torch.testing.assert_close(restored.compute(), summary[""])


def test_conditional_auto_reads_the_samples_not_the_prompts():
    gen, _ = sides()
    labels = torch.arange(len(gen)) % 4
    auto = ConditionalVendi("auto", 0.1, 48, alpha=[1, 2], num_classes=4, per_prompt_frequencies=8)
    auto.update(gen[:300], labels[:300])
    auto.update(gen[300:], labels[300:])
    summary = auto.reading().summary()
    assert float(summary["sigma"]) == pytest.approx(reference_bandwidth(gen, "test")) == auto.sigma
    fixed = ConditionalVendi(auto.sigma, 0.1, 48, alpha=[1, 2], num_classes=4, per_prompt_frequencies=8)
    fixed.update(gen, labels)
    torch.testing.assert_close(fixed.reading().summary(), summary, rtol=1e-12, atol=1e-14)
    restored = ConditionalVendi("auto", 0.1, 48, alpha=[1, 2], num_classes=4, per_prompt_frequencies=8)
    restored.load_state_dict(auto.state_dict())
    assert restored.sigma == auto.sigma
    torch.testing.assert_close(restored.reading().summary(), summary)
    with pytest.raises(RuntimeError, match=r"sigma='auto'"):
        ConditionalVendi("auto", 0.1, 16).compute()
