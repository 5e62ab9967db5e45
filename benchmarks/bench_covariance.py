"""Covariance accumulation throughput against this machine's float32 matmul rate, measured in one run.

FLOP per sample counted as 2*d*r (projection) + 2*(2r)^2 (the full Gram update), as issue 2 specifies;
the accumulator does less work than that (it mirrors the lower tiles), which is the point.

    python benchmarks/bench_covariance.py [--d 768] [--n-frequencies 2048] [--n 32768]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from lightning_spectral.algebra import add_covariance_
from lightning_spectral.kernels import GaussianRFF


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--n-frequencies", type=int, default=2048)
    parser.add_argument("--n", type=int, default=32768, help="samples per timed pass")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    d, r, n = args.d, args.n_frequencies, args.n

    size = 4096
    a, b = torch.randn(size, size), torch.randn(size, size)
    matmul_rate = 2 * size**3 / best_time(lambda: a @ b, args.repeats)

    rff = GaussianRFF(d, r, sigma=10.0)
    x = torch.randn(n, d)
    total = torch.zeros(2 * r, 2 * r, dtype=torch.float64)
    seconds = best_time(lambda: add_covariance_(total, x, rff), args.repeats)
    flop_per_sample = 2 * d * r + 2 * (2 * r) ** 2
    samples_per_s = n / seconds

    def full_gram() -> None:  # baseline: the same chunks, one full Phi^T Phi product each, no symmetry
        for chunk in torch.split(x, 4096):
            phi = rff(chunk)
            total.add_(phi.T @ phi)

    baseline_per_s = n / best_time(full_gram, args.repeats)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}")
    print(f"float32 matmul ({size}^3): {matmul_rate / 1e9:.1f} GFLOP/s")
    print(f"covariance accumulation d={d}, 2r={2 * r}, n={n}: {seconds:.3f} s, {samples_per_s:,.0f} samples/s, "
          f"{samples_per_s * flop_per_sample / 1e9:.1f} counted GFLOP/s = "
          f"{samples_per_s * flop_per_sample / matmul_rate:.0%} of the matmul rate (target >= 75%)")
    print(f"baseline full Gram per chunk (no symmetry): {baseline_per_s:,.0f} samples/s = "
          f"{baseline_per_s * flop_per_sample / matmul_rate:.0%} of the matmul rate; "
          f"tiled accumulator is {samples_per_s / baseline_per_s:.2f}x faster")


if __name__ == "__main__":
    main()
