"""The sampling-noise estimate (smooth random multipliers) and FINC's significance on it."""

import math

import pytest
import torch

from lightning_spectral.functional import finc_spectrum
from lightning_spectral.functional.sampling_noise import (
    Multipliers,
    NoiseSums,
    draws_exact,
    mean_draws_exact,
    standard_error,
)
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import FINCNovelty
from tests.data import mixture_means, sample_mixture


def test_streamed_sums_equal_the_n_by_n_oracle():
    x = torch.randn(150, 4, dtype=torch.float64)
    rff, multipliers = GaussianRFF(4, 10, sigma=1.3), Multipliers(3, 1.3, seed=5)
    sums = NoiseSums.of(x, rff, multipliers, chunk_size=17)
    moment, draws = draws_exact(x, rff, multipliers)
    torch.testing.assert_close(sums.moment(), moment, rtol=0, atol=1e-13)
    for a in range(3):
        torch.testing.assert_close(sums.draw(a), draws[a], rtol=0, atol=1e-13)


def test_draws_have_the_variance_of_the_sampling_noise():
    """Over many seeds, Var(E_a[0, 0]) matches Var(C[0, 0]) over fresh samples (the bootstrap's promise)."""
    rff = GaussianRFF(2, 4, sigma=1.0)
    truth, boot = [], []
    for seed in range(300):
        x = torch.randn(200, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        sums = NoiseSums.of(x, rff, Multipliers(2, 1.0, seed=seed))
        truth.append(float(sums.moment()[0, 1]))
        boot += [float(sums.draw(a)[0, 1]) for a in range(2)]
    ratio = torch.tensor(boot).var() / torch.tensor(truth).var()
    assert 0.8 < float(ratio) < 1.25, float(ratio)


def test_streamed_metric_sums_equal_the_functional_ones():
    gen, ref = torch.randn(101, 3), torch.randn(157, 3)
    metric = FINCNovelty(sigma=1.0, n_frequencies=16)
    for batch in ref.split(13):
        metric.update(batch, real=True)
    for batch in gen.flip(0).split(29):
        metric.update(batch, real=False)
    functional = finc_spectrum(gen, ref, sigma=1.0, n_frequencies=16)
    torch.testing.assert_close(metric.reading().novel_modes(5).p_values, functional.p_values[:5], rtol=1e-6, atol=1e-10)
    assert metric.reading().threshold() == pytest.approx(functional.threshold, rel=1e-6)


def mixture_pair(n=600, seed=0):
    means = mixture_means(6, d=8, spread=6.0, seed=seed)
    gen, _ = sample_mixture(means, n, weights=[0.25, 0.15, 0.15, 0.15, 0.15, 0.15], std=0.7, seed=seed + 1)
    ref, _ = sample_mixture(means, n, std=0.7, seed=seed + 2)
    return gen.float(), ref.float()


@pytest.mark.parametrize("perturb", ["nextafter", "jitter"])
def test_last_bits_of_the_embeddings_change_no_decision(perturb):
    """One ulp (torch.nextafter) or a 1e-6 relative jitter on every embedding: p-values within 5 %, same decisions
    (the hashed content groups moved top p-values up to 7x)."""
    for seed in range(4):
        gen, ref = mixture_pair(seed=10 * seed)
        if perturb == "nextafter":
            moved = [torch.nextafter(v, torch.full_like(v, math.inf)) for v in (gen, ref)]
        else:
            g = torch.Generator().manual_seed(seed)
            moved = [v * (1 + 1e-6 * torch.randn(v.shape, generator=g)) for v in (gen, ref)]
        for missing in (False, True):
            pair = (ref, gen) if missing else (gen, ref)
            moved_pair = (moved[1], moved[0]) if missing else tuple(moved)
            before = finc_spectrum(*pair, sigma=3.0, n_frequencies=64, seed=seed)
            after = finc_spectrum(*moved_pair, sigma=3.0, n_frequencies=64, seed=seed)
            top = before.p_values[:10]
            assert float(((after.p_values[:10] - top).abs() / top).max()) < 0.05
            assert torch.equal(after.significant, before.significant)


def test_collapsed_generator_reports_its_missing_modes():
    """A generator collapsed onto one point: no refusal; the reference's other modes are significant missing modes."""
    means = mixture_mean = mixture_means(4, d=5, spread=8.0, seed=3)
    ref, _ = sample_mixture(mixture_mean, 800, std=0.5, seed=4)
    gen = means[:1].expand(400, -1).clone()
    metric = FINCNovelty(sigma=3.0, n_frequencies=128)
    metric.update(gen, real=False)
    metric.update(ref, real=True)
    missing = metric.reading().missing_modes(5)
    assert int(missing.significant.sum()) >= 3, missing
    assert float(missing.p_values[0]) < 1e-3
    summary = metric.reading().summary()
    assert int(summary["missing_modes"]) >= 3


def test_noise_draws_is_checked_and_the_old_names_are_gone():
    assert FINCNovelty(sigma=1.0, n_frequencies=8, noise_draws=4).noise_draws == 4
    with pytest.raises(ValueError, match="`noise_draws` must be an integer in \\[1, 64\\]"):
        FINCNovelty(sigma=1.0, noise_draws=0)
    for removed in ("groups", "draws"):  # one name across metrics: `noise_draws`
        with pytest.raises(ValueError, match=f"Unexpected keyword arguments: `?{removed}"):  # torchmetrics' message
            FINCNovelty(sigma=1.0, **{removed: 3})


def test_standard_error_is_the_root_mean_square_of_the_replicates():
    assert float(standard_error(torch.tensor([3.0, -4.0]))) == pytest.approx(math.sqrt(12.5))


def test_summary_standard_errors_equal_the_replicates_of_the_oracle():
    """se of the top eigenvalue: the RMS over draws of u_1^T c E_gen(a) u_1 (c = sqrt(n_gen (1/n_gen + 1/n_ref))
    at rho = 1), built sample by sample."""
    from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO

    gen, ref = mixture_pair(n=300)
    gen, ref = gen.double(), ref.double()
    gen = gen[:250]
    metric = FINCNovelty(sigma=3.0, n_frequencies=32, noise_draws=3, rho=1.0)  # the oracle below is at rho = 1
    metric.update(gen, real=False)
    metric.update(ref, real=True)
    summary = metric.reading().summary()
    rff, multipliers = GaussianRFF(8, 32, sigma=3.0, seed=0), Multipliers(3, 3.0, 0, DEFAULT_RATIO)
    (c_gen, d_gen), (c_ref, _) = draws_exact(gen, rff, multipliers), draws_exact(ref, rff, multipliers)
    values, vectors = torch.linalg.eigh(c_gen - c_ref)
    top = vectors[:, -1]
    scale = math.sqrt(250 * (1 / 250 + 1 / 300))
    replicates = torch.stack([top @ (scale * d_gen[a]) @ top for a in range(3)])
    interval = metric.reading().top_interval()
    assert float(interval.se) == pytest.approx(float(replicates.pow(2).mean().sqrt()), rel=1e-6)
    assert float(summary["novel_top"]) == pytest.approx(float(values[-1]), rel=1e-9) == float(interval.value)
    assert {"se", "missing_se"} <= set(summary)


def test_mean_draws_equal_the_n_by_n_oracle():
    x = torch.randn(150, 4, dtype=torch.float64)
    rff, multipliers = GaussianRFF(4, 10, sigma=1.3), Multipliers(3, 1.3, seed=5)
    sums = NoiseSums.of(x, rff, multipliers, chunk_size=17)
    exact = mean_draws_exact(x, rff, multipliers)
    assert float(exact.abs().max()) > 1e-3  # not vacuous
    for a in range(3):
        torch.testing.assert_close(sums.mean_draw(a), exact[a], rtol=0, atol=1e-13)


def test_the_metric_keeps_the_generated_sides_mean_draws():
    gen, ref = torch.randn(101, 3, dtype=torch.float64), torch.randn(57, 3, dtype=torch.float64)
    metric = FINCNovelty(sigma=1.0, n_frequencies=16, noise_draws=2, chunk_size=32)
    for batch in gen.split(29):
        metric.update(batch, real=False)
    metric.update(ref, real=True)
    multipliers = Multipliers(2, 1.0, seed=0)
    exact = mean_draws_exact(gen, metric.feature_map, multipliers)
    noise = metric.gen[0].noise_sums()
    for a in range(2):
        torch.testing.assert_close(noise.mean_draw(a), exact[a], rtol=0, atol=1e-12)
    assert metric.ref[0].multipliers is None  # the reference keeps no draws
