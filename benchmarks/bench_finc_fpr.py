"""FINC's significance rule, measured (issue 23): false-positive rate on same-distribution data, and power and
purity on a class that only one side holds.

    python benchmarks/bench_finc_fpr.py fpr [--trials 100] [--rho 1 2] [--n 500 2000 10000] [--data mixture ...]
    python benchmarks/bench_finc_fpr.py power [--trials 100] [--prevalence 0.02 0.05 0.1 0.2] [--n 2000] [--data ...]

Every trial runs ``FINCNovelty`` (default ``significance`` 0.05, ``draws`` 3 or ``--draws``, ``min_eigenvalue``
1e-3) as a user would: ``update`` of both sides, ``summary()``, ``novel_modes`` / ``missing_modes`` and ``top_samples``.

Data (nothing here was tuned on: the rule was designed on a Gaussian mixture and the digits, its constants fixed
before these runs):

- ``mixture``: a 10-component Gaussian mixture in 16 dimensions (means ~ N(0, 16 I), unit spread), sigma 3.
- ``digits``: scikit-learn's 1,797 digits (pixels / 16, 64-d), the data of ``lightning_spectral.data.digits``;
  n <= 800 per side (disjoint random subsets).
- ``fashion``: Fashion-MNIST's 70,000 images (784 pixels / 255) projected on 32 principal axes fitted on its
  10,000 test images; trials draw from the 60,000 training images. Read from ``--fashion`` (the directory of
  the four ``*-ubyte.gz`` files; Debian's ``dataset-fashion-mnist`` package installs them in
  /usr/share/datasets/fashion-mnist).

Digits and fashion use sigma = 0.5 x the median pairwise distance of 1,000 held-out samples (the digits recipes'
rule). fpr: two disjoint samples of one distribution, n per side; a trial is a false positive when any novel (or
any missing) mode is significant; the rate's binomial standard error beside it. power: trial t holds class t mod
10 out of the reference (novel) or out of the generated side (missing); the other side holds it at the given
prevalence, n per side. Power = share of trials with a significant mode; purity = the novel class's share of
the top-50 samples of the top mode (over the trials that found one).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

from lightning_spectral.kernels import median_bandwidth
from lightning_spectral.metrics import FINCNovelty

SOURCES: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}



sys.path.insert(0, str(Path(__file__).resolve().parent))
from idx_files import read_idx  # noqa: E402


def mixture(n: int, k: int = 10, d: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    means = 4.0 * torch.randn(k, d, generator=torch.Generator().manual_seed(1000), dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(k, (n,), generator=g)
    return means[labels] + torch.randn(n, d, generator=g, dtype=torch.float64), labels



def source(name: str, fashion: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(pool of samples, their classes, sigma) of a real data set."""
    if name in SOURCES:
        return SOURCES[name]
    if name == "digits":
        digits = load_digits()
        x, y = torch.tensor(digits.data / 16.0), torch.tensor(digits.target)
        held = torch.randperm(len(x), generator=torch.Generator().manual_seed(99))[:1000]
        SOURCES[name] = (x, y, 0.5 * median_bandwidth(x[held]))
    else:
        root = Path(fashion)
        train = torch.tensor(read_idx(root / "train-images-idx3-ubyte.gz").reshape(60000, -1) / 255.0)
        labels = torch.tensor(read_idx(root / "train-labels-idx1-ubyte.gz").astype(np.int64))
        test = torch.tensor(read_idx(root / "t10k-images-idx3-ubyte.gz").reshape(10000, -1) / 255.0)
        mean = test.mean(0)
        _, _, axes = torch.linalg.svd(test - mean, full_matrices=False)
        project = axes[:32].T
        x = (train - mean) @ project
        SOURCES[name] = (x, labels, 0.5 * median_bandwidth((test[:1000] - mean) @ project))
    return SOURCES[name]


DRAWS = [3]  # FINCNovelty's `draws` (`--draws`)


def run(gen: torch.Tensor, ref: torch.Tensor, sigma: float, r: int, rho: float, seed: int) -> FINCNovelty:
    metric = FINCNovelty(sigma=sigma, n_frequencies=r, rho=rho, seed=seed, noise_draws=DRAWS[0])
    for part in gen.split(1000):
        metric.update(part, real=False)
    for part in ref.split(1000):
        metric.update(part, real=True)
    return metric


def same_distribution(data: str, n: int, trial: int, fashion: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    if data == "mixture":
        return mixture(n, seed=2 * trial)[0], mixture(n, seed=2 * trial + 1)[0], 3.0
    x, _, sigma = source(data, fashion)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(trial))
    if 2 * n > len(x):
        raise SystemExit(f"{data}: n = {n} per side needs {2 * n} samples, the data set has {len(x)}")
    return x[order[:n]], x[order[n : 2 * n]], sigma


def rate(count: int, trials: int) -> str:
    p = count / trials
    return f"{p:.3f} +- {math.sqrt(p * (1 - p) / trials):.3f}"


def bench_fpr(args: argparse.Namespace) -> None:
    print(f"fpr: {args.trials} trials per row, 2r = {2 * args.r}, level 0.05 (95 % upper limit at 100 trials: "
          f"0.05 + 2 x 0.022 = 0.094)")
    print("| data | n per side | rho | novel FP rate | missing FP rate | either | novel p-values: median | s / trial |")
    print("|---|---|---|---|---|---|---|---|")
    for data in args.data:
        for n in args.n:
            if data == "digits" and n > 800:
                continue
            for rho in args.rho:
                novel = missing = either = 0
                p_values = []
                start = time.perf_counter()
                for trial in range(args.trials):
                    gen, ref, sigma = same_distribution(data, n, trial, args.fashion)
                    summary = run(gen, ref, sigma, args.r, rho, seed=trial).reading().summary()
                    found = (int(summary["novel_modes"]) > 0, int(summary["missing_modes"]) > 0)
                    novel, missing, either = novel + found[0], missing + found[1], either + any(found)
                    p_values.append(float(summary["novel_top_p_value"]))
                seconds = (time.perf_counter() - start) / args.trials
                print(f"| {data} | {n} | {rho:g} | {rate(novel, args.trials)} | {rate(missing, args.trials)} | "
                      f"{rate(either, args.trials)} | {float(np.median(p_values)):.2f} | {seconds:.2f} |", flush=True)


def with_class(data: str, n: int, prevalence: float, trial: int, fashion: str, missing: bool):
    """(generated, reference, generated labels, reference labels, held-out class, sigma)."""
    held = trial % 10
    if data == "mixture":
        x, y = mixture(40 * n, seed=trial + 500 * missing)
        sigma = 3.0
    else:
        x, y, sigma = source(data, fashion)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1000 + trial + 500 * missing))
    x, y = x[order], y[order]
    shared, novel = (y != held).nonzero().flatten(), (y == held).nonzero().flatten()
    k = int(round(prevalence * n))
    if len(shared) < 2 * n - k or len(novel) < k:
        raise SystemExit(f"{data}: not enough samples for n = {n} per side")
    with_novel = torch.cat([shared[: n - k], novel[:k]])
    without = shared[n - k : 2 * n - k]
    gen_rows, ref_rows = (without, with_novel) if missing else (with_novel, without)
    return x[gen_rows], x[ref_rows], y[gen_rows], y[ref_rows], held, sigma


def bench_power(args: argparse.Namespace) -> None:
    print(f"power: {args.trials} trials per row (held-out class = trial mod 10), 2r = {2 * args.r}, level 0.05; "
          "purity: the held-out class's share of the top mode's 50 best samples (trials with a significant mode)")
    print("| data | n per side | rho | side | prevalence | power | top eigenvalue: median | p-value: median | "
          "purity: mean (min) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for data in args.data:
        for n in args.n:
            for rho in args.rho:
                for missing in (False, True):
                    for prevalence in args.prevalence:
                        found, tops, p_values, purities = 0, [], [], []
                        for trial in range(args.trials):
                            gen, ref, gen_y, ref_y, held, sigma = with_class(
                                data, n, prevalence, trial, args.fashion, missing
                            )
                            metric = run(gen, ref, sigma, args.r, rho, seed=trial)
                            modes = metric.reading().missing_modes(1) if missing else metric.reading().novel_modes(1)
                            tops.append(float(modes.eigenvalues[0]))
                            p_values.append(float(modes.p_values[0]))
                            if not bool(modes.significant[0]):
                                continue
                            found += 1
                            side, labels = (ref, ref_y) if missing else (gen, gen_y)
                            (ids, _), = metric.reading().top_samples([(side, torch.arange(len(side)))], k=1, per_mode=50,
                                                           missing=missing)
                            purities.append(float((labels[ids] == held).double().mean()))
                        purity = f"{np.mean(purities):.3f} ({min(purities):.2f})" if purities else "-"
                        print(f"| {data} | {n} | {rho:g} | {'missing' if missing else 'novel'} | {prevalence:.0%} | "
                              f"{rate(found, args.trials)} | {float(np.median(tops)):.4f} | "
                              f"{float(np.median(p_values)):.2g} | {purity} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["fpr", "power"])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--rho", type=float, nargs="+", default=None)
    parser.add_argument("--n", type=int, nargs="+", default=None, help="samples per side")
    parser.add_argument("--data", nargs="+", default=None, choices=["mixture", "digits", "fashion"])
    parser.add_argument("--prevalence", type=float, nargs="+", default=[0.02, 0.05, 0.1, 0.2])
    parser.add_argument("--r", type=int, default=256, help="n_frequencies (2r features)")
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--draws", type=int, default=3, help="FINCNovelty's `draws` (default 3)")
    args = parser.parse_args()
    DRAWS[0] = args.draws
    if args.which == "fpr":
        args.rho = args.rho or [1.0, 2.0]
        args.n = args.n or [500, 2000, 10000]
        args.data = args.data or ["mixture", "digits", "fashion"]
    else:
        args.rho = args.rho or [1.0]
        args.n = args.n or [2000]
        args.data = args.data or ["fashion"]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, draws {args.draws}")
    (bench_fpr if args.which == "fpr" else bench_power)(args)


if __name__ == "__main__":
    main()
