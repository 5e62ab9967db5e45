"""FINC's false-positive rate on same-distribution data: how often one distribution against itself (disjoint
samples) reports a significant novel or missing mode, with the reference split into halves by sample content
(now) and by arrival order (alternate samples, the previous rule), side by side on the same trials.

    python benchmarks/bench_finc_fpr.py [--trials 100] [--rho 1 2] [--n-frequencies 512]

Data: scikit-learn's digits (pixels / 16; a random 40 % as "generated", a disjoint 40 % as reference; sigma =
0.5 x the median pairwise distance of a held-out 20 %, the rule of the digits recipes), and a 10-component
Gaussian mixture in 16 dimensions (n = 2000 per side). A trial is a false positive when any eigenvalue passes
the threshold; the rate's binomial standard error is printed beside it.
"""

from __future__ import annotations

import argparse
import math
import os
import platform

import torch
from sklearn.datasets import load_digits

from lightning_spectral.features import GaussianRFF, median_bandwidth
from lightning_spectral.functional.finc import (
    DEFAULT_MIN_EIGENVALUE,
    DEFAULT_SIGNIFICANCE,
    Moment,
    NoiseSplit,
    differential_spectrum,
    reference_halves,
)


def digits_trial(trial: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    x = torch.tensor(load_digits().data / 16.0, dtype=torch.float64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(trial))
    n = int(0.4 * len(x))
    held_out = x[order[2 * n :]]
    return x[order[:n]], x[order[n : 2 * n]], 0.5 * median_bandwidth(held_out)


def mixture_trial(trial: int, n: int = 2000, d: int = 16, k: int = 10) -> tuple[torch.Tensor, torch.Tensor, float]:
    means = 4.0 * torch.randn(k, d, generator=torch.Generator().manual_seed(1000), dtype=torch.float64)
    g = torch.Generator().manual_seed(trial)

    def draw() -> torch.Tensor:
        labels = torch.randint(k, (n,), generator=g)
        return means[labels] + torch.randn(n, d, generator=g, dtype=torch.float64)

    return draw(), draw(), 3.0


def significant(
    gen: torch.Tensor, ref: torch.Tensor, sigma: float, r: int, rho: float, by_content: bool, rule: dict
) -> tuple[int, int]:
    """(significant novel modes, significant missing modes) under ``rule`` (significance, min_eigenvalue)."""
    rff = GaussianRFF(gen.shape[1], r, sigma, seed=0)
    in_a = reference_halves(ref) if by_content else torch.arange(len(ref)) % 2 == 0
    split = NoiseSplit(Moment.of(ref[in_a], rff), Moment.of(ref[~in_a], rff))
    reference = Moment(split.a.sums + split.b.sums, len(ref))
    generated = Moment.of(gen, rff)
    novel = differential_spectrum(generated, reference, split, rho, vectors=False, **rule)
    missing = differential_spectrum(reference, generated, split, rho, vectors=False, **rule)
    return int(novel.significant.sum()), int(missing.significant.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--rho", type=float, nargs="+", default=[1.0, 2.0])
    parser.add_argument("--n-frequencies", type=int, default=512)
    parser.add_argument("--significance", type=float, default=DEFAULT_SIGNIFICANCE, help="multiple of the floor")
    parser.add_argument("--min-eigenvalue", type=float, default=DEFAULT_MIN_EIGENVALUE, help="absolute minimum")
    args = parser.parse_args()
    rule = {"significance": args.significance, "min_eigenvalue": args.min_eigenvalue}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}")
    print(f"{args.trials} trials per row, 2r = {2 * args.n_frequencies}, significance {args.significance:g} x floor, "
          f"min_eigenvalue {args.min_eigenvalue:g}; rate of trials with >= 1 significant mode")
    print("| data | rho | halves | novel FP rate | missing FP rate |")
    print("|---|---|---|---|---|")
    for name, trial_fn in (("digits", digits_trial), ("mixture", mixture_trial)):
        for rho in args.rho:
            counts = {True: [0, 0], False: [0, 0]}
            for trial in range(args.trials):
                gen, ref, sigma = trial_fn(trial)
                for by_content in (True, False):
                    novel, missing = significant(gen, ref, sigma, args.n_frequencies, rho, by_content, rule)
                    counts[by_content][0] += novel > 0
                    counts[by_content][1] += missing > 0
            for by_content, label in ((True, "by content (now)"), (False, "alternate (previous)")):
                rates = [c / args.trials for c in counts[by_content]]
                cells = " | ".join(f"{p:.3f} +- {math.sqrt(max(p * (1 - p), 1e-12) / args.trials):.3f}" for p in rates)
                print(f"| {name} | {rho:g} | {label} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
