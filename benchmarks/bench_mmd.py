"""Issue 4 benchmarks: FastMMD calibration and power, speed against exact MMD, streaming throughput.

    python benchmarks/bench_mmd.py calibration [--trials 300]   # type-I error of the streaming test
    python benchmarks/bench_mmd.py power [--trials 200]         # blobs: FastMMD vs exact-MMD permutation
    python benchmarks/bench_mmd.py exact                        # n = 10k, 20k per side: speed-up, rel. error
    python benchmarks/bench_mmd.py stream [--n 1000000]         # update throughput
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from pathlib import Path

import torch

from lightning_spectral.functional import fast_mmd, fast_mmd_test, mmd_exact, mmd_exact_test
from lightning_spectral.metrics import FastMMD

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.data import blobs  # noqa: E402  (the test suite's blob generator, shared)


def streaming_test(x: torch.Tensor, y: torch.Tensor, n_frequencies: int, seed: int):
    metric = FastMMD(sigma=1.0, n_frequencies=n_frequencies, seed=seed)
    metric.update(x, real=True)
    metric.update(y, real=False)
    result = metric.test(alpha=0.05)
    # torchmetrics metrics sit in reference cycles: free the (2r)^2 states now, not at the next GC pass
    del metric
    gc.collect()
    return result


def calibration(args: argparse.Namespace) -> None:
    print(f"type-I error at alpha = 0.05: {args.trials} null trials, blobs (epsilon = 1) vs blobs, 250 + 250 "
          f"samples, sigma = 1, streaming FastMMD (asymptotic null, moment-matched)")
    for r in args.frequencies:
        start, rejections, p_values = time.perf_counter(), 0, []
        for trial in range(args.trials):
            x, y = blobs(250, 1.0, seed=10_000 + 2 * trial), blobs(250, 1.0, seed=10_001 + 2 * trial)
            result = streaming_test(x, y, r, trial)
            rejections += bool(result.reject)
            p_values.append(float(result.p_value))
        rate = rejections / args.trials
        half_width = 2 * math.sqrt(0.05 * 0.95 / args.trials)
        below = [sum(p <= q for p in p_values) / args.trials for q in (0.01, 0.1, 0.5)]
        print(f"  r = {r:>4}: rejection rate {rate:.3f} (binomial 2-sigma band 0.05 +- {half_width:.3f}; target "
              f"[0.02, 0.08]); P(p <= 0.01 / 0.1 / 0.5) = {below[0]:.3f} / {below[1]:.3f} / {below[2]:.3f}; "
              f"{time.perf_counter() - start:.0f} s", flush=True)


def power(args: argparse.Namespace) -> None:
    n, epsilon = 250, 4.0
    print(f"power on blobs (FastMMD section 4.5): P = unit blobs, Q = blobs with eigenvalue ratio {epsilon}, "
          f"{n} + {n} samples, sigma = 1, alpha = 0.05, {args.trials} trials, 500 permutations")
    counts = {"exact MMD, permutation": 0}
    start = time.perf_counter()
    for trial in range(args.trials):
        x, y = blobs(n, 1.0, seed=2 * trial), blobs(n, epsilon, seed=2 * trial + 1)
        counts["exact MMD, permutation"] += bool(mmd_exact_test(x, y, 1.0, n_permutations=500, seed=trial).reject)
        streaming = "FastMMD r=1024, streaming asymptotic"
        counts[streaming] = counts.get(streaming, 0) + bool(streaming_test(x, y, 1024, trial).reject)
        permutation = "FastMMD r=1024, permutation"
        counts[permutation] = counts.get(permutation, 0) + bool(
            fast_mmd_test(x, y, 1.0, n_frequencies=1024, seed=trial, n_permutations=500).reject
        )
    exact = counts["exact MMD, permutation"] / args.trials
    for name, count in counts.items():
        print(f"  {name:<38} power {count / args.trials:.3f} (difference to exact {count / args.trials - exact:+.3f})")
    print(f"  {time.perf_counter() - start:.0f} s")


def exact(args: argparse.Namespace) -> None:
    d = 64
    print(f"exact MMD (chunked torch, float64) vs FastMMD: d = {d}, P = N(0, I), Q = N(0.1, I), sigma = 8")
    for n in (10_000, 20_000):
        generator = torch.Generator().manual_seed(n)
        x = torch.randn(n, d, generator=generator)
        y = torch.randn(n, d, generator=generator) + 0.1
        start = time.perf_counter()
        reference = float(mmd_exact(x, y, sigma=8.0))
        exact_s = time.perf_counter() - start
        for r in (1024, 4096):
            start = time.perf_counter()
            value = float(fast_mmd(x, y, sigma=8.0, n_frequencies=r))
            fast_s = time.perf_counter() - start
            errors = [abs(float(fast_mmd(x, y, 8.0, r, seed=s)) / reference - 1) for s in range(1, 4)]
            print(f"  n = {n:>6} per side, r = {r:>4}: exact {exact_s:6.1f} s, FastMMD {fast_s:5.2f} s "
                  f"({exact_s / fast_s:5.0f}x); MMD^2 exact {reference:.6f}, FastMMD {value:.6f} "
                  f"(rel. error {abs(value / reference - 1):.2%}; mean over 4 seeds "
                  f"{(abs(value / reference - 1) + sum(errors)) / 4:.2%})", flush=True)


def stream(args: argparse.Namespace) -> None:
    d, r, batch = 768, 1024, 4096
    metric = FastMMD(sigma=40.0, n_frequencies=r)
    generator = torch.Generator().manual_seed(0)
    update_s = 0.0
    for start in range(0, args.n, batch):
        x = torch.randn(min(batch, args.n - start), d, generator=generator)
        begin = time.perf_counter()
        metric.update(x, real=start % (2 * batch) == 0)
        update_s += time.perf_counter() - begin
    begin = time.perf_counter()
    value, result = metric.compute(), metric.test()
    test_s = time.perf_counter() - begin
    print(f"streaming FastMMD: n = {args.n:,} samples (half per side), d = {d}, r = {r}, batches of {batch}: "
          f"update {update_s:.1f} s ({args.n / update_s:,.0f} samples/s), compute + test {test_s:.1f} s; "
          f"MMD^2 {float(value):.2e}, p = {float(result.p_value):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["calibration", "power", "exact", "stream"])
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--frequencies", type=int, nargs="+", default=[128, 1024], help="calibration: r")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.which == "calibration":
        args.trials = args.trials or 300
        calibration(args)
    elif args.which == "power":
        args.trials = args.trials or 200
        power(args)
    else:
        {"exact": exact, "stream": stream}[args.which](args)


if __name__ == "__main__":
    main()
