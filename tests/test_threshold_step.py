"""FINC's counts and masses above the threshold: their standard errors include which modes pass."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_spectral.functional.finc_null import NullModel
from lightning_spectral.functional.mode_shares import eigenvalue_gradients, two_sided_errors
from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, NoiseSums, draws_exact
from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.functional.threshold_step import threshold_step
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import FINCNovelty
from tests.data import mixture_means, sample_mixture


def test_the_step_variances_match_a_simulation_of_their_model():
    """Normal eigenvalues around a threshold that is itself normal: the formula's count and mass variances against
    200,000 simulated sample sets (the first-order term in the threshold's se is the only approximation)."""
    values = torch.tensor([0.05, 0.012, 0.0105, 0.0098, 0.009, 0.006], dtype=torch.float64)
    errors = torch.tensor([0.002, 0.0008, 0.0007, 0.0007, 0.0006, 0.0005], dtype=torch.float64)
    threshold, threshold_se = 0.01, 0.0003
    step = threshold_step(values, errors, threshold, threshold_se)
    g = torch.Generator().manual_seed(0)
    draws = values + errors * torch.randn(200_000, 6, generator=g, dtype=torch.float64)
    levels = threshold + threshold_se * torch.randn(200_000, 1, generator=g, dtype=torch.float64)
    passing = draws > levels
    count, mass = passing.double().sum(1), (torch.where(passing, values, 0.0)).sum(1)  # the step: the means pass
    assert float(step.count_variance) == pytest.approx(float(count.var()), rel=0.05)
    assert float(step.mass_variance) == pytest.approx(float(mass.var()), rel=0.05)
    sure = threshold_step(values, torch.zeros(6, dtype=torch.float64), threshold, 0.0)
    assert float(sure.count_variance) == 0.0 == float(sure.mass_variance)  # no noise, no step


def test_the_thresholds_standard_error_matches_its_draws():
    """``threshold_se`` against the spread of ``threshold`` over independent sets of ``nu`` normal draws."""
    g = torch.Generator().manual_seed(1)
    draws = 0.01 + 0.002 * torch.randn(20_000, 3, generator=g, dtype=torch.float64)
    q = student_t_isf(0.05, 3)
    thresholds = draws.mean(1) + draws.std(1) * math.sqrt(1 + 1 / 3) * q  # NullModel.threshold, for every set at once
    assert float(thresholds[0]) == pytest.approx(NullModel(draws[0], 3).threshold(0.05), rel=1e-12)
    model = NullModel(torch.tensor([0.008, 0.01, 0.012], dtype=torch.float64), 3)  # spread 0.002, as drawn
    assert model.threshold_se(0.05) == pytest.approx(0.002 * math.sqrt(1 / 3 + q * q * (4 / 3) / 6), rel=1e-12)
    spread = float(thresholds.std())
    assert 0.7 < model.threshold_se(0.05) / spread < 1.3  # first order in the draws' spread


def test_eigenvalue_replicates_are_the_draws_of_the_n_by_n_oracle():
    """The generated side's part of an eigenvalue's se: ``-rho v^T E_gen(a) v`` on the missing side, exactly the
    replicates built sample by sample."""
    x, labels = sample_mixture(mixture_means(4, d=3, spread=3.0), 700)
    gen, ref = x[:300][labels[:300] != 0].double(), x[300:].double()
    rff, multipliers = GaussianRFF(3, 24, sigma=1.0), Multipliers(3, 1.0, 0, DEFAULT_RATIO)
    noise = NoiseSums.of(gen, rff, multipliers)
    moment_gen, draws = draws_exact(gen, rff, multipliers)
    moment_ref = rff(ref).double().T @ rff(ref).double() / len(ref)
    values, vectors = torch.linalg.eigh(moment_ref - 2.0 * moment_gen)
    top = vectors[:, -2:]
    errors = two_sided_errors(
        eigenvalue_gradients(top, 2.0), rff(ref).double().mean(0), moment_ref, rff(gen).double().mean(0), moment_gen,
        noise, noise_is_x=False, count_other=float(len(ref)),
    )
    want = torch.stack([-2.0 * (top * (draws[a] @ top)).sum(0) for a in range(3)])
    torch.testing.assert_close(errors.replicates, want, rtol=1e-9, atol=1e-12)
    assert bool((errors.other > 0).all())  # the reference's part: the mode lives there, its noise with it


def test_a_score_of_zero_has_an_se_and_every_count_has_one():
    """One distribution on both sides, no mode passes: the score is 0, its se not (a mode could pass); the summary
    and the headline carry the counts' se."""
    x, _ = sample_mixture(mixture_means(4, d=3, spread=3.0), 2000)
    metric = FINCNovelty(sigma=1.0, n_frequencies=128)
    metric.update(x[:1000], real=True)
    metric.update(x[1000:], real=False)
    reading = metric.reading()
    summary, headline = reading.summary(), reading.headline()
    assert float(summary[""]) == 0.0 and float(summary["se"]) > 0
    assert float(summary["novel_modes"]) == 0.0 < float(summary["novel_modes_se"]) < 1.0
    assert float(headline["novel_modes_se"]) == float(reading.mode_count_standard_error())
    assert float(reading.standard_errors()) == float(summary["se"])


def test_a_side_without_a_significant_mode_reads_its_top_modes_as_below_a_significant_one():
    """No mode passes: the score's and the count's se are the threshold step over the top `STEP_MARGIN` modes, each
    eigenvalue with its own first-order se (as the modes below a last significant one), not the top eigenvalue alone."""
    from lightning_spectral.metrics.finc_reading import STEP_MARGIN

    x, _ = sample_mixture(mixture_means(4, d=3, spread=3.0), 2000)
    metric = FINCNovelty(sigma=1.0, n_frequencies=128)
    metric.update(x[:1000], real=True)
    metric.update(x[1000:], real=False)
    reading = metric.reading()
    spectrum = reading._spectrum(False, vectors=False)
    assert not bool(spectrum.significant.any())
    modes = reading.novel_modes(STEP_MARGIN)
    assert len(modes.eigenvalues) == STEP_MARGIN
    errors = reading._eigenvalue_errors(False, modes.eigenvectors)
    null = spectrum.null
    step = threshold_step(modes.eigenvalues, errors.se, spectrum.threshold, null.threshold_se(reading.significance))
    assert float(reading.standard_errors()) == pytest.approx(float(step.mass_variance.sqrt()), rel=1e-12)
    assert float(reading.mode_count_standard_error()) == pytest.approx(float(step.count_variance.sqrt()), rel=1e-12)
