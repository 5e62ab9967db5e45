"""Vendi's bias at this n (`functional.fkea.vendi_bias`) and the interval that takes it out (`VendiReading.interval`):
the second-order formula against a finite second difference of the exact score, and the corrected score against
a large-n value."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_spectral.algebra import psd_eigh
from lightning_spectral.functional.fkea import entropy_bias, renyi_entropy, vendi_bias, vendi_replicates, vendi_score
from lightning_spectral.functional.sampling_noise import Multipliers, NoiseSums
from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import ConditionalVendi, FKEAVendi
from lightning_spectral.metrics.reading import BIAS_SHARE_WARNING
from tests.data import mixture_means, sample_mixture

MEANS = mixture_means(8, d=4, spread=2.0, seed=3)


@pytest.mark.parametrize("order", [0.5, 1.0, 1.5, 3.0])
def test_one_draw_gives_half_the_second_difference_of_the_exact_score(order):
    """With one draw ``E`` the bias is ``(1/2) V''[E, E]`` exactly: the central second difference of the score of
    ``C +- eps E`` (a fresh ``eigvalsh``) is that to O(eps^2)."""
    x, _ = sample_mixture(MEANS, 400, std=0.5, seed=1)
    noise = NoiseSums.of(x, GaussianRFF(4, 24, sigma=1.0, seed=0).double(), Multipliers(1, 1.0, seed=2))
    moment, draw = noise.moment().double(), noise.draw(0).double()
    assert abs(float(draw.trace())) < 1e-12  # Gaussian random features: every row of norm 1, tr E = 0

    def score(matrix: torch.Tensor) -> float:
        return float(vendi_score(torch.linalg.eigvalsh(matrix).clamp_min(0), order))

    eps = 1e-2
    second = (score(moment + eps * draw) + score(moment - eps * draw) - 2 * score(moment)) / eps**2
    got = float(vendi_bias(noise, order))
    assert abs(second) > 1e-3  # not vacuous
    assert got == pytest.approx(second / 2, rel=1e-3)


def test_orders_two_and_inf_get_no_bias_and_several_orders_a_dict():
    x, _ = sample_mixture(MEANS, 300, std=0.5, seed=1)
    noise = NoiseSums.of(x, GaussianRFF(4, 16, sigma=1.0, seed=0).double(), Multipliers(2, 1.0, seed=2))
    biases = vendi_bias(noise, [1, 2, "inf"])
    assert float(biases[1]) < 0 and float(biases[2]) == 0 and float(biases["inf"]) == 0


def test_the_interval_takes_out_the_bias_and_covers_the_large_n_value():
    """Vendi-1 on a mixture at n = 600, 2r = 64, 40 draws: the plug-in sits spreads below the n = 30,000 value, the
    bias-corrected mean within half a spread (its own se: 0.16 spread), and the interval covers it more often
    than ``value +- q se``."""
    metric = FKEAVendi(1.0, 32, noise_draws=2, precision="float64")
    metric.update(sample_mixture(MEANS, 30_000, std=0.5, seed=100)[0])
    truth = float(metric.compute())
    values, centres, covered, covered_plain = [], [], 0, 0
    for seed in range(40):
        metric = FKEAVendi(1.0, 32, noise_draws=2, precision="float64", seed=0)
        metric.update(sample_mixture(MEANS, 600, std=0.5, seed=seed)[0])
        interval = metric.reading().interval()
        assert float(interval.bias) < 0 and interval.level == 0.95
        half = student_t_isf(0.025, 2) * float(interval.se)
        assert float(interval.high - interval.low) == pytest.approx(2 * half)
        values.append(float(interval.value))
        centres.append(float(interval.value - interval.bias))
        covered += float(interval.low) <= truth <= float(interval.high)
        covered_plain += abs(float(interval.value) - truth) <= half  # value +- q se, the bias left in
    values, centres = torch.tensor(values), torch.tensor(centres)
    spread = float(values.std())
    assert float(values.mean()) < truth - 1.0 * spread  # the plug-in reads low
    assert abs(float(centres.mean()) - truth) < 0.5 * spread
    assert covered >= 34 and covered_plain < covered  # measured 36 of 40 against 32


def test_interval_refuses_a_metric_without_draws_and_a_bad_level():
    metric = FKEAVendi(1.0, 16, noise_draws=0)
    metric.update(sample_mixture(MEANS, 100, seed=1)[0].float())
    with pytest.raises(RuntimeError, match="noise_draws"):
        metric.reading().interval()
    metric = FKEAVendi(1.0, 16)
    metric.update(sample_mixture(MEANS, 100, seed=1)[0].float())
    with pytest.raises(ValueError, match="level"):
        metric.reading().interval(level=1.5)


def test_below_full_rank_the_leading_pairs_give_the_full_eigh_s_bias():
    """n = 300 < 2r = 512: the reading decomposes only the samples' span (`psd_eigh` with ``rank``); the same bias."""
    metric = FKEAVendi(4.0, 256, noise_draws=2, precision="float64")
    metric.update(torch.randn(300, 16, generator=torch.Generator().manual_seed(0)))
    noise = metric.reading().samples.noise_sums()
    full = vendi_bias(noise, 1, "float64", psd_eigh(noise.moment().double(), precision="float64"))
    with pytest.warns(UserWarning, match="bias"):  # 300 samples of a 16-d Gaussian: Vendi-1 a large share of n
        interval = metric.reading().interval()
    assert float(interval.bias) == pytest.approx(float(full), rel=1e-6)
    assert float(full) < 0


def test_a_bias_the_formula_cannot_take_out_is_said():
    """n = 60 samples of a spread-out cloud at 2r = 256: Vendi-1 is a large share of n, the bias taken out far above
    `BIAS_SHARE_WARNING` of the score; the interval warns, naming what to do instead."""
    metric = FKEAVendi(1.0, 128, noise_draws=2, precision="float64")
    metric.update(torch.randn(60, 16, generator=torch.Generator().manual_seed(0)))
    with pytest.warns(UserWarning, match="lower bound only"):
        interval = metric.reading().interval()
    assert float(-interval.bias / interval.value) > BIAS_SHARE_WARNING
    assert math.isinf(float(interval.high)) and math.isfinite(float(interval.low))


def test_where_the_bias_cannot_be_taken_out_the_lower_bound_holds():
    """Vendi-1 a large share of n (60 samples at 2r = 256): the two-sided interval would miss the large-n value in most
    samples (the corrected score still reads low); the lower bound it gives instead holds in every one of 20."""
    truth_metric = FKEAVendi(1.0, 128, noise_draws=0, precision="float64")
    truth_metric.update(torch.randn(20_000, 16, generator=torch.Generator().manual_seed(99)))
    truth = float(truth_metric.compute())
    held, two_sided = 0, 0
    for seed in range(20):
        metric = FKEAVendi(1.0, 128, noise_draws=2, precision="float64")
        metric.update(torch.randn(60, 16, generator=torch.Generator().manual_seed(seed)))
        with pytest.warns(UserWarning, match="lower bound only"):
            interval = metric.reading().interval()
        half = student_t_isf(0.025, 2) * float(interval.se)
        held += float(interval.low) <= truth
        two_sided += float(interval.low) <= truth <= float(interval.value - interval.bias) + half
    assert held == 20 and two_sided <= 10


def test_entropy_replicates_are_the_vendi_replicates_over_the_score():
    x, _ = sample_mixture(MEANS, 400, std=0.5, seed=1)
    noise = NoiseSums.of(x, GaussianRFF(4, 24, sigma=1.0, seed=0).double(), Multipliers(3, 1.0, seed=2))
    values = torch.linalg.eigvalsh(noise.moment().double()).flip(0).clamp_min(0)
    found, moves = entropy_bias(noise, [0.5, 1, 2, "inf"]), vendi_replicates(noise, [0.5, 1, 2, "inf"])
    for order in (0.5, 1, "inf"):  # order 2's are those of RKE from pairs of distinct samples, not the plug-in's
        score = vendi_score(values, order)
        torch.testing.assert_close(found[order].replicates * score, moves[order], rtol=1e-6, atol=1e-9)


def test_conditional_vendi_bias_with_one_draw_is_half_the_second_difference():
    """Conditional-Vendi-1 = exp(H_joint - H_prompts), the draws shared by both sides: with one draw its bias is
    ``(1/2) d^2/de^2`` of that score along ``(E_joint, E_prompts)``."""
    x, labels = sample_mixture(MEANS, 400, std=0.5, seed=1)
    prompts = torch.nn.functional.one_hot(labels, 8).double()
    metric = ConditionalVendi(1.0, 0.5, 24, alpha=1, noise_draws=1, precision="float64")
    metric.update(x, prompts)
    reading = metric.reading()
    joint, side = (reading.streams[name].noise_sums() for name in ("joint", "prompts"))

    def score(eps: float) -> float:
        entropy = [renyi_entropy(torch.linalg.eigvalsh(part.moment().double() + eps * part.draw(0).double())
                                 .clamp_min(0), 1) for part in (joint, side)]
        return float(torch.exp(entropy[0] - entropy[1]))

    eps = 1e-2
    second = (score(eps) + score(-eps) - 2 * score(0.0)) / eps**2
    interval = reading.interval()[""]
    assert abs(second) > 1e-3
    assert float(interval.bias) == pytest.approx(second / 2, rel=1e-3)
    assert float(interval.high + interval.low) / 2 == pytest.approx(float(interval.value - interval.bias))


def test_per_label_intervals_take_out_each_label_s_own_bias():
    x, labels = sample_mixture(MEANS, 600, std=0.5, seed=1)
    labels = labels.clamp_max(5)  # labels 6 and 7 join 5; label 6 and 7 are never seen
    prompts = torch.nn.functional.one_hot(labels, 8).double()
    metric = ConditionalVendi(1.0, 0.5, 24, alpha=1, noise_draws=2, precision="float64", num_classes=8)
    metric.update(x, prompts, labels=labels)
    reading = metric.reading()
    with pytest.warns(UserWarning, match="label"):  # ~75 samples a label: a bias above 5 % of the score
        interval = reading.per_prompt_interval()
    torch.testing.assert_close(interval.value, reading.per_prompt(), equal_nan=True)
    torch.testing.assert_close(interval.se, reading.per_prompt_standard_errors(), equal_nan=True)
    assert bool(interval.value[6:].isnan().all()) and bool(interval.bias[6:].isnan().all())
    lane = reading._per_prompt_accumulator().lane_noise_sums(2)
    assert float(interval.bias[2]) == pytest.approx(float(vendi_bias(lane, 1)), rel=1e-9)
    assert bool((interval.bias[:6] < 0).all())
    half = student_t_isf(0.025, 2) * interval.se[:6]
    torch.testing.assert_close(interval.low[:6], interval.value[:6] - interval.bias[:6] - half)
    large = interval.bias[:6].abs() > BIAS_SHARE_WARNING * interval.value[:6]  # a lower bound only there
    assert bool(large.any())
    torch.testing.assert_close(interval.high[:6][~large], (interval.value[:6] - interval.bias[:6] + half)[~large])
    assert bool(interval.high[:6][large].isinf().all()) and bool(interval.high[6:].isnan().all())
