"""Closed-form standard errors of an OOD detector's readings (`functional.ood`): DeLong's AUROC se against the
explicit m x n placement matrix, and every se against the spread over fresh samples of scores; order-free."""

import math

import pytest
import torch

from lightning_spectral.functional import (
    detection_metrics,
    detection_standard_errors,
    rate_standard_error,
    score_standard_errors,
    threshold_at_tpr,
    threshold_standard_error,
)


def scores(n, shift, seed):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + shift


def test_auroc_se_equals_delong_from_the_explicit_placement_matrix():
    inside, outside = scores(120, 0.0, 1).round(decimals=1), scores(90, 1.0, 2).round(decimals=1)  # with ties
    psi = (outside[None, :] > inside[:, None]).double() + 0.5 * (outside[None, :] == inside[:, None]).double()
    variance = psi.mean(0).var() / outside.numel() + psi.mean(1).var() / inside.numel()
    errors = detection_standard_errors(inside, outside, 0.9)
    assert float(psi.mean()) == pytest.approx(float(detection_metrics(inside, outside, 0.9)["auroc"]), rel=1e-6)
    assert float(errors["auroc_se"]) == pytest.approx(math.sqrt(float(variance)), rel=1e-12)


def test_the_standard_errors_do_not_depend_on_the_order_of_the_scores():
    inside, outside = scores(300, 0.0, 3), scores(200, 1.5, 4)
    want = detection_standard_errors(inside, outside)
    got = detection_standard_errors(inside.flip(0), outside[torch.randperm(200)])
    assert all(float(got[key]) == float(value) for key, value in want.items())
    assert float(threshold_standard_error(inside.flip(0))) == float(threshold_standard_error(inside))


def test_threshold_se_approaches_the_asymptotic_quantile_se():
    n, p = 20_000, 0.95
    z = 1.6448536269514722
    density = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    assert float(threshold_standard_error(scores(n, 0.0, 5), p)) == pytest.approx(
        math.sqrt(p * (1 - p) / n) / density, rel=0.2
    )


def test_every_se_matches_the_spread_over_fresh_samples():
    """300 fresh draws of 800 in- and 600 out-of-distribution scores: the mean se^2 over the variance of each
    reading is near 1 (the threshold's from a density estimate is the noisiest)."""
    readings, squares = {}, {}
    for seed in range(300):
        inside, outside = scores(800, 0.0, 100 + 2 * seed), scores(600, 1.5, 101 + 2 * seed)
        detection, errors = detection_metrics(inside, outside), detection_standard_errors(inside, outside)
        spread = score_standard_errors(inside)
        rate = (outside > 1.0).double().mean()  # a flagged rate at a fixed threshold
        for key, value, se in (
            ("auroc", detection["auroc"], errors["auroc_se"]),
            ("fpr", detection["fpr"], errors["fpr_se"]),
            ("threshold", threshold_at_tpr(inside), errors["threshold_se"]),
            ("rate", rate, rate_standard_error(rate, 600)),
            ("mean", inside.mean(), spread["mean_se"]),
            ("std", inside.std(correction=0), spread["std_se"]),
        ):
            readings.setdefault(key, []).append(float(value))
            squares.setdefault(key, []).append(float(se) ** 2)
    for key, values in readings.items():
        ratio = sum(squares[key]) / len(squares[key]) / torch.tensor(values).var().item()
        assert 0.75 < ratio < 1.35, (key, ratio)
