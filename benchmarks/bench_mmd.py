"""Issue 4 benchmarks: FastMMD calibration and power, speed against exact MMD, streaming throughput.

    python benchmarks/bench_mmd.py calibration [--trials 1000]  # blobs: type-I error of the streaming test
    python benchmarks/bench_mmd.py digits [--trials 400]        # real digit images: type-I error, random halves
    python benchmarks/bench_mmd.py moments [--trials 400]       # bias of the null traces vs their plug-ins
    python benchmarks/bench_mmd.py power [--trials 200]         # blobs: FastMMD vs exact-MMD permutation
    python benchmarks/bench_mmd.py exact                        # n = 10k, 20k per side: speed-up, rel. error
    python benchmarks/bench_mmd.py stream [--n 1000000]         # update throughput

The streaming test's p-value rules are compared side by side on the same pooled sums: the two-moment scaled
chi-square FastMMD used before (``asymptotic_p_value``) and the three-moment rule it uses now
(``streaming_p_value``, which ``FastMMD.test()`` calls).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

from lightning_spectral.functional import fast_mmd, fast_mmd_test, mmd_exact, mmd_exact_test
from lightning_spectral.functional.mmd import (
    asymptotic_p_value,
    null_moments,
    null_trace_cube,
    pearson3_p_value,
    streaming_p_value,
)
from lightning_spectral.kernels import GaussianRFF, median_bandwidth
from lightning_spectral.metrics import FastMMD

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.data import blobs  # noqa: E402  (the test suite's blob generator, shared)

RULES = ("two-moment (old)", "three-moment (new)")
LEVELS = (0.05, 0.01)


def streaming_p_values(x: torch.Tensor, y: torch.Tensor, sigma: float, n_frequencies: int, seed: int) -> list[float]:
    """p-values of both streaming rules (``RULES``) from the pooled sums of one feature map: what FastMMD keeps."""
    rff = GaussianRFF(x.shape[1], n_frequencies, sigma, seed)
    z_x, z_y = rff(x).double(), rff(y).double()
    m, n = z_x.shape[0], z_y.shape[0]
    pooled = torch.cat([z_x, z_y])
    feature_sum, cov_sum = pooled.sum(0), pooled.T @ pooled
    statistic = (z_x.mean(0) - z_y.mean(0)).square().sum()
    old = asymptotic_p_value(statistic, *null_moments(feature_sum, cov_sum, m + n), m, n)
    new = streaming_p_value(statistic, feature_sum, cov_sum, m + n, m, n)
    return [float(old), float(new)]


def report_null(p_values: list[list[float]], seconds: tuple[float, float]) -> None:
    """Rejection rates of each rule at ``LEVELS`` with binomial 2-sigma bands, and a few points of the p CDF."""
    trials = len(p_values)
    bands = {level: 2 * math.sqrt(level * (1 - level) / trials) for level in LEVELS}
    print("    bands: " + "; ".join(f"{level} +- {band:.3f}" for level, band in bands.items()) + f" ({trials} trials)")
    for index, rule in enumerate(RULES):
        column = [row[index] for row in p_values]
        rates = {level: sum(p <= level for p in column) / trials for level in (0.005, *LEVELS, 0.1, 0.5)}
        flags = ["" if abs(rates[level] - level) <= bands[level] else " (outside)" for level in LEVELS]
        print(f"    {rule:<19} rate at 0.05: {rates[0.05]:.3f}{flags[0]}; at 0.01: {rates[0.01]:.3f}{flags[1]}; "
              f"P(p <= 0.005 / 0.1 / 0.5) = {rates[0.005]:.3f} / {rates[0.1]:.3f} / {rates[0.5]:.3f}")
    print(f"    wall {seconds[0]:.0f} s, CPU {seconds[1]:.0f} s", flush=True)


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds: the machine is shared, so the CPU time is the cost, the wall time the wait."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    now = clocks()
    return now[0] - start[0], now[1] - start[1]


def calibration(args: argparse.Namespace) -> None:
    print(f"type-I error on blobs (epsilon = 1) vs blobs, 250 + 250 samples, sigma = 1, {args.trials} null trials "
          f"(from trial {args.first_trial}), "
          f"streaming FastMMD (pooled sums), both p-value rules on the same sums")
    for r in args.frequencies:
        start, p_values = clocks(), []
        for trial in range(args.first_trial, args.first_trial + args.trials):
            x, y = blobs(250, 1.0, seed=10_000 + 2 * trial), blobs(250, 1.0, seed=10_001 + 2 * trial)
            p_values.append(streaming_p_values(x, y, 1.0, r, trial))
        print(f"  r = {r}:")
        report_null(p_values, since(start))


def load_digit_images() -> torch.Tensor:
    from sklearn.datasets import load_digits  # scikit-learn ships the 1797 8 x 8 images; no download

    return torch.tensor(load_digits().data / 16.0, dtype=torch.float64)


def digits(args: argparse.Namespace) -> None:
    images = load_digit_images()
    held_out = images.shape[0] - 2 * args.per_side
    if held_out < 2:
        raise ValueError(
            f"--per-side {args.per_side}: two disjoint sides need {2 * args.per_side + 2} of the {images.shape[0]} "
            f"images (2 kept for the bandwidth); use at most {images.shape[0] // 2 - 1}."
        )
    print(f"type-I error on real data: scikit-learn digits ({images.shape[0]} images, 64 pixels / 16); per trial a "
          f"random permutation gives sigma (median heuristic on {held_out} held-out images) and two disjoint sides "
          f"of {args.per_side}; r = {args.frequencies[-1]}, {args.trials} trials")
    start, p_values, sigmas = clocks(), [], []
    for trial in range(args.trials):
        order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(20_000 + trial))
        sigma = median_bandwidth(images[order[:held_out]])
        x, y = images[order[held_out : held_out + args.per_side]], images[order[held_out + args.per_side :]]
        p_values.append(streaming_p_values(x, y, sigma, args.frequencies[-1], trial))
        sigmas.append(sigma)
    print(f"    sigma {min(sigmas):.2f} - {max(sigmas):.2f}")
    report_null(p_values, since(start))
    pool, sigma = images[held_out:], median_bandwidth(images[:held_out])
    print(f"  one pool, many splits: the last {pool.shape[0]} images, sigma = {sigma:.2f} from the first {held_out}, "
          f"{args.splits} random halves of {pool.shape[0] // 2} (the null given the pool, finely resolved)")
    for r in args.frequencies:
        start = clocks()
        features = GaussianRFF(pool.shape[1], r, sigma, seed=0)(pool).double()
        print(f"  r = {r}:")
        report_null(split_p_values(features, args.splits), since(start))


def split_p_values(features: torch.Tensor, splits: int) -> list[list[float]]:
    """p-values of both rules for random equal splits of one pooled sample: its sums, and so the null traces,
    are computed once; only the statistic changes."""
    count = features.shape[0]
    m, n = count // 2, count - count // 2
    feature_sum, cov_sum = features.sum(0), features.T @ features
    trace, trace_sq = null_moments(feature_sum, cov_sum, count)
    trace_cube = null_trace_cube(feature_sum, cov_sum, count)
    generator, rows = torch.Generator().manual_seed(0), []
    for start in range(0, splits, 1000):
        order = torch.argsort(torch.rand(min(1000, splits - start), count, generator=generator), dim=1)
        weights = torch.where(order < m, 1.0 / m, -1.0 / n).double().T  # (count, batch)
        statistics = (features.T @ weights).square().sum(0)
        old = asymptotic_p_value(statistics, trace, trace_sq, m, n)
        new = pearson3_p_value(statistics / (1.0 / m + 1.0 / n), trace, trace_sq, trace_cube)
        rows += torch.stack([old, new], dim=1).tolist()
    return rows


def moments(args: argparse.Namespace) -> None:
    """Bias of the null's trace estimates, drawing samples with replacement from a fixed set of feature vectors
    (the truth is then the set's own covariance, exactly)."""
    images = load_digit_images()
    digit_map = GaussianRFF(64, 256, median_bandwidth(images[:197]), seed=0)
    populations = {
        "digits, r = 256": (digit_map(images).double(), (1600, 400, 100)),
        "blobs, r = 128": (GaussianRFF(2, 128, 1.0, seed=0)(blobs(20_000, 1.0, seed=1)).double(), (500, 100)),
    }
    print(f"mean estimate / truth (+- 1 standard error), {args.trials} draws with replacement per size")
    for name, (population, sizes) in populations.items():
        centred = population - population.mean(0)
        covariance = centred.T @ centred / population.shape[0]
        square = covariance @ covariance
        truth = [float(covariance.trace()), float(square.trace()), float((square * covariance).sum())]
        print(f"  {name}: tr S {truth[0]:.4f}, tr S^2 {truth[1]:.3e}, tr S^3 {truth[2]:.3e}, "
              f"(tr S)^2 / tr S^2 = {truth[0] ** 2 / truth[1]:.1f}")
        generator = torch.Generator().manual_seed(0)
        for size in sizes:
            rows = []
            for _ in range(args.trials):
                z = population[torch.randint(population.shape[0], (size,), generator=generator)]
                feature_sum, cov_sum = z.sum(0), z.T @ z
                sample_cov = (cov_sum - torch.outer(feature_sum, feature_sum) / size) / (size - 1)
                plug_in = float(((sample_cov @ sample_cov) * sample_cov).sum())
                trace_sq = float(null_moments(feature_sum, cov_sum, size)[1])
                rows.append([trace_sq / truth[1], float(null_trace_cube(feature_sum, cov_sum, size)) / truth[2],
                             plug_in / truth[2]])
            table = torch.tensor(rows, dtype=torch.float64)
            mean, error = table.mean(0), table.std(0) / math.sqrt(args.trials)
            print(f"    N = {size:>4}: tr S^2 (null_moments) {mean[0]:.3f} +- {error[0]:.3f}; tr S^3 (null_trace_cube) "
                  f"{mean[1]:.3f} +- {error[1]:.3f}; plug-in tr(S_hat^3) {mean[2]:.3f} +- {error[2]:.3f}", flush=True)


def power(args: argparse.Namespace) -> None:
    n, epsilon = 250, 4.0
    print(f"power on blobs (FastMMD section 4.5): P = unit blobs, Q = blobs with eigenvalue ratio {epsilon}, "
          f"{n} + {n} samples, sigma = 1, alpha = 0.05, {args.trials} trials, 500 permutations")
    names = ["exact MMD, permutation", "FastMMD r=1024, permutation"]
    names += [f"FastMMD r=1024, streaming {rule}" for rule in RULES]
    counts = dict.fromkeys(names, 0)
    start = time.perf_counter()
    for trial in range(args.trials):
        x, y = blobs(n, 1.0, seed=2 * trial), blobs(n, epsilon, seed=2 * trial + 1)
        counts[names[0]] += bool(mmd_exact_test(x, y, 1.0, n_permutations=500, seed=trial).reject)
        counts[names[1]] += bool(fast_mmd_test(x, y, 1.0, n_frequencies=1024, seed=trial, n_permutations=500).reject)
        for name, p_value in zip(names[2:], streaming_p_values(x, y, 1.0, 1024, trial), strict=True):
            counts[name] += p_value <= 0.05
    exact = counts[names[0]] / args.trials
    for name, count in counts.items():
        print(f"  {name:<44} power {count / args.trials:.3f} (difference to exact {count / args.trials - exact:+.3f})")
    print(f"  {time.perf_counter() - start:.0f} s")


def exact(args: argparse.Namespace) -> None:
    d = 64
    print(f"exact MMD (chunked torch, float64) vs FastMMD: d = {d}, P = N(0, I), Q = N(0.1, I), sigma = 8")
    for n in args.sizes:
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
    value, result = metric.compute(), metric.reading().test()
    test_s = time.perf_counter() - begin
    print(f"streaming FastMMD: n = {args.n:,} samples (half per side), d = {d}, r = {r}, batches of {batch}: "
          f"update {update_s:.1f} s ({args.n / update_s:,.0f} samples/s), compute + test {test_s:.1f} s; "
          f"MMD^2 {float(value):.2e}, p = {float(result.p_value):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["calibration", "digits", "moments", "power", "exact", "stream"])
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 20_000], help="exact: samples per side")
    parser.add_argument("--frequencies", type=int, nargs="+", default=[128, 1024], help="calibration: r (digits: last)")
    parser.add_argument("--per-side", type=int, default=800, help="digits: images per side")
    parser.add_argument("--splits", type=int, default=20_000, help="digits: random halves of one pool")
    parser.add_argument("--first-trial", type=int, default=0, help="calibration: seed index of the first trial")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.which == "calibration":
        args.trials = args.trials or 1000
        calibration(args)
    elif args.which in ("digits", "moments"):
        args.trials = args.trials or 400
        {"digits": digits, "moments": moments}[args.which](args)
    elif args.which == "power":
        args.trials = args.trials or 200
        power(args)
    else:
        {"exact": exact, "stream": stream}[args.which](args)


if __name__ == "__main__":
    main()
