"""FastMMD speed when no p-value is asked, and over several bandwidths, measured side by side in one process.

    python benchmarks/bench_mmd_speed.py statistic [--n 20000] [--d 64] [--seeds 4]
    python benchmarks/bench_mmd_speed.py bandwidths [--n 2500] [--matlab-dir DIR]

``statistic``: ``FastMMD(statistic_only=True)`` (feature means only, the FastMMD paper's algorithm) against the
exact MMD (``mmd_exact``) and against the metric that also keeps the covariance for its p-value, at n samples
per side; mean relative error of the statistic over seeds (targets: >= 100x faster than exact, <= 2 % error).

``bandwidths``: MMD^2 at 3 bandwidths, r = 1024: one projection rescaled per bandwidth (``MultiBandwidthRFF``,
as ``FastMMD`` and ``fast_mmd`` do now) against one full feature map per bandwidth (the previous code path);
with ``--matlab-dir`` pointing at a checkout of the authors' code (github.com/jizhaox/FastMMD) and ``octave``
on the PATH, also their ``MMDFourierFeature.m``, timed inside Octave (tic / toc, start-up excluded).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lightning_spectral.functional import mmd_exact
from lightning_spectral.functional.mmd import mmd_from_means
from lightning_spectral.kernels import GaussianRFF, MultiBandwidthRFF
from lightning_spectral.metrics import FastMMD


def best(fn, repeats: int = 3) -> tuple[float, object]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def streamed(x: torch.Tensor, y: torch.Tensor, sigma, r: int, seed: int, statistic_only: bool) -> torch.Tensor:
    metric = FastMMD(sigma=sigma, n_frequencies=r, seed=seed, statistic_only=statistic_only, unbiased=True)
    metric = metric.to(x.device)
    for part in x.split(4096):
        metric.update(part, real=True)
    for part in y.split(4096):
        metric.update(part, real=False)
    return metric.compute()


def statistic(args: argparse.Namespace) -> None:
    n, d, r = args.n, args.d, args.n_frequencies
    print(f"n = {n} per side, d = {d}, r = {r}, sigma = median heuristic; unbiased MMD^2; seconds are best of 3")
    print("| seed | exact s | statistic-only s | speed-up | with covariance s | speed-up | rel. error |")
    print("|---|---|---|---|---|---|---|")
    errors, exact_times, fast_times = [], [], []
    for seed in range(args.seeds):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, d, generator=g).to(args.device)
        y = (torch.randn(n, d, generator=g) * 1.1 + 0.05).to(args.device)  # a small difference
        sigma = float(torch.cdist(x[:1000], y[:1000]).median())
        exact_s, exact = best(lambda: mmd_exact(x, y, sigma), repeats=1)
        fast_s, fast = best(lambda: streamed(x, y, sigma, r, seed, True))
        full_s, _ = best(lambda: streamed(x, y, sigma, r, seed, False), repeats=1)
        gc.collect()  # torchmetrics metrics sit in reference cycles: free the (2r)^2 sums outside the timing
        error = abs(float(fast) / float(exact) - 1)
        errors.append(error)
        exact_times.append(exact_s)
        fast_times.append(fast_s)
        print(f"| {seed} | {exact_s:.1f} | {fast_s:.3f} | {exact_s / fast_s:,.0f}x | {full_s:.2f} | "
              f"{exact_s / full_s:.0f}x | {error:.2%} |", flush=True)
    print(f"mean relative error {np.mean(errors):.2%}; median speed-up {np.median(np.array(exact_times) / fast_times):,.0f}x")


def previous_path(x: torch.Tensor, y: torch.Tensor, sigmas, r: int) -> torch.Tensor:
    """One full feature map per bandwidth: x W_s computed anew for each s."""
    values = []
    for sigma in sigmas:
        rff = GaussianRFF(x.shape[1], r, sigma, seed=0).to(x.device)
        values.append(mmd_from_means(rff(x).double().mean(0), rff(y).double().mean(0), len(x), len(y), True))
    return torch.stack(values)


def one_projection(x: torch.Tensor, y: torch.Tensor, sigmas, r: int) -> torch.Tensor:
    rff = MultiBandwidthRFF(x.shape[1], r, sigmas, seed=0).to(x.device)
    return mmd_from_means(rff(x).double().mean(1), rff(y).double().mean(1), len(x), len(y), True)


def octave_time(matlab_dir: Path, x: np.ndarray, y: np.ndarray, sigmas, r: int) -> float:
    """Best of 3 of the authors' MMDFourierFeature.m inside Octave (start-up and loading excluded)."""
    from scipy.io import savemat

    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "xy.mat"
        savemat(data, {"X": x.astype(np.float64), "Y": y.astype(np.float64)})
        sigma_list = " ".join(f"{s:.10g}" for s in sigmas)
        script = (
            f"addpath('{matlab_dir}'); load('{data}'); best = inf; "
            f"for k = 1:4, tic; [d1, d2] = MMDFourierFeature(X, Y, [{sigma_list}], {r}); t = toc; "
            "if k > 1, best = min(best, t); end; end; printf('%.6f\\n', best);"
        )
        out = subprocess.run(["octave", "--no-gui", "--quiet", "--eval", script], capture_output=True, text=True,
                             check=True)
    return float(out.stdout.strip().splitlines()[-1])


def bandwidths(args: argparse.Namespace) -> None:
    n, d, r = args.n, args.d, args.n_frequencies
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g, dtype=torch.float64).to(args.device)
    y = (torch.randn(n, d, generator=g, dtype=torch.float64) + 0.1).to(args.device)
    sigmas = (2.0, 5.0, 10.0)
    before_s, before = best(lambda: previous_path(x, y, sigmas, r))
    now_s, now = best(lambda: one_projection(x, y, sigmas, r))
    print(f"n = {n} per side, d = {d}, r = {r}, bandwidths {sigmas}, float64; best of 3")
    print("| path | seconds | vs one projection |")
    print("|---|---|---|")
    print(f"| one projection, rescaled per bandwidth (now) | {now_s:.4f} | 1.00x |")
    print(f"| one feature map per bandwidth (previous) | {before_s:.4f} | {before_s / now_s:.2f}x |")
    torch.testing.assert_close(now, before, rtol=1e-8, atol=1e-12)  # the same numbers
    if args.matlab_dir:
        if shutil.which("octave") is None:
            print("octave not found: the authors' MATLAB code was not timed")
        else:
            seconds = octave_time(Path(args.matlab_dir).resolve(), x.cpu().numpy(), y.cpu().numpy(), sigmas, r)
            print(f"| MMDFourierFeature.m under Octave | {seconds:.4f} | {seconds / now_s:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("statistic", "bandwidths"))
    parser.add_argument("--n", type=int)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--n-frequencies", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--matlab-dir")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {args.device}")
    if args.mode == "statistic":
        args.n = args.n or 20000
        statistic(args)
    else:
        args.n = args.n or 2500
        bandwidths(args)


if __name__ == "__main__":
    main()
