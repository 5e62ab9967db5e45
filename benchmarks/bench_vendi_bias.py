"""How much of Vendi-1's bias at n `FKEAVendi.interval()` takes out, against the share of the score it takes out: the
measurements behind `BIAS_SHARE_WARNING`.

    python benchmarks/bench_vendi_bias.py [--cases 128:400 256:1000 256:500] [--reps 40]

The 6-mode mixture of ``bench_coverage.py`` (d = 8, sigma = 3, generated weights). Per case ``r:n`` (2r = 2 r
random features, n samples): the population value from 50,000 samples (the exact Vendi-1 of their covariance), then
``--reps`` independent samples, each ``FKEAVendi(noise_draws=2, precision="float64").reading().interval()``.
Printed: the plug-in's mean, the mean with the bias taken out, the bias taken out as a share of the score (the
warning's quantity), what stays (as a share of the population value), and how many intervals hold the population
value.
"""

from __future__ import annotations

import argparse
import warnings

import torch
from bench_coverage import GEN_WEIGHTS, SIGMA, sample

from lightning_spectral.functional.fkea import vendi_score
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import FKEAVendi


def case(r: int, n: int, reps: int) -> str:
    feature_map = GaussianRFF(8, r, sigma=SIGMA, seed=0).double()
    features = feature_map(sample(50_000, GEN_WEIGHTS, 1))
    truth = float(vendi_score(torch.linalg.eigvalsh(features.T @ features / len(features)).clamp_min(0), 1))
    values, centres, shares, covered = [], [], [], 0
    for rep in range(reps):
        metric = FKEAVendi(SIGMA, r, noise_draws=2, precision="float64", seed=0)
        metric.update(sample(n, GEN_WEIGHTS, 1000 + 2 * rep))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the warning this measures
            interval = metric.reading().interval()
        values.append(float(interval.value))
        centres.append(float(interval.value - interval.bias))
        shares.append(float(-interval.bias / interval.value))
        covered += float(interval.low) <= truth <= float(interval.high)
    centre = sum(centres) / reps
    return (f"| {2 * r} | {n} | {truth:.2f} | {sum(values) / reps:.2f} | {centre:.2f} | {sum(shares) / reps:.1%} | "
            f"{(truth - centre) / truth:.1%} | {covered} of {reps} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["128:400", "256:1000", "256:500"], help="r:n pairs")
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    print("| 2r | n | population | plug-in mean | bias taken out, mean | taken out / score | left / population | "
          "covered |")
    print("|---|---|---|---|---|---|---|---|")
    for pair in args.cases:
        r, n = (int(part) for part in pair.split(":"))
        print(case(r, n, args.reps))


if __name__ == "__main__":
    main()
