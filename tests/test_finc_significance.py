"""FINC's significance rule as a statistical procedure (issue 23): on two samples of one distribution at most the
level's share of runs names a mode, and a class held by one side only at 10 % prevalence is named, purely.

A small setting (a 10-component Gaussian mixture in 16 dimensions, 2r = 128, 1,000 samples per side) with fixed
seeds; the full measurement is benchmarks/bench_finc_fpr.py (docs/benchmarks/finc-significance.md)."""

import pytest
import torch

from lightning_spectral.metrics import FINCNovelty

MEANS = 4.0 * torch.randn(10, 16, generator=torch.Generator().manual_seed(1000), dtype=torch.float64)


def draw(n: int, seed: int, classes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor(classes)[torch.randint(len(classes), (n,), generator=g)]
    return MEANS[labels] + torch.randn(n, 16, generator=g, dtype=torch.float64), labels


def metric_of(gen: torch.Tensor, ref: torch.Tensor, rho: float, seed: int) -> FINCNovelty:
    metric = FINCNovelty(sigma=3.0, n_frequencies=64, rho=rho, seed=seed)
    metric.update(gen, real=False)
    metric.update(ref, real=True)
    return metric


@pytest.mark.slow
@pytest.mark.parametrize("rho", [1.0, 2.0])
def test_one_distribution_names_a_mode_in_at_most_the_levels_share_of_runs(rho):
    trials, novel, missing = 80, 0, 0
    for trial in range(trials):
        gen, _ = draw(1000, 2 * trial, list(range(10)))
        ref, _ = draw(1000, 2 * trial + 1, list(range(10)))
        summary = metric_of(gen, ref, rho, trial).reading().summary()
        novel += int(summary["novel_modes"]) > 0
        missing += int(summary["missing_modes"]) > 0
    # level 0.05: 4 expected of 80; P(Binomial(80, 0.05) >= 10) = 0.006. The previous noise floor at margin 1
    # was passed in 26 % of such runs (docs/benchmarks/finc-significance.md, issue 13)
    assert novel <= 9 and missing <= 9, (novel, missing)


@pytest.mark.slow
def test_a_class_held_by_one_side_at_ten_percent_is_named_purely():
    trials, found, purities = 20, {False: 0, True: 0}, []
    for trial in range(trials):
        held = trial % 10
        shared = [c for c in range(10) if c != held]
        base, base_labels = draw(900, 100 + trial, shared)
        extra, _ = draw(100, 200 + trial, [held])
        with_class = torch.cat([base, extra])
        with_labels = torch.cat([base_labels, torch.full((100,), held)])
        without, _ = draw(1000, 300 + trial, shared)
        for missing in (False, True):
            gen, ref = (without, with_class) if missing else (with_class, without)
            metric = metric_of(gen, ref, 1.0, trial)
            modes = metric.reading().missing_modes(1) if missing else metric.reading().novel_modes(1)
            if not bool(modes.significant[0]):
                continue
            found[missing] += 1
            (ids, _), = metric.reading().top_samples([(with_class, torch.arange(1000))], k=1, per_mode=50, missing=missing)
            purities.append(float((with_labels[ids] == held).double().mean()))
    assert found[False] >= 18 and found[True] >= 18, found
    assert sum(purities) / len(purities) >= 0.95 and min(purities) >= 0.8, purities
