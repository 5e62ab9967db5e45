"""Coverage of RKE's interval against a large-n value: the plug-in 1 / ||C_n||_F^2 beside the estimate over pairs of
distinct samples that FKEAVendi reports (`functional.fkea.unbiased_purity`), side by side on the same draws.

    python benchmarks/bench_rke_coverage.py [--reps 100] [--r 1024] [--draws 2]

Two cases, each ``--reps`` independent samples, FKEAVendi(alpha=2) at 2r = 2 ``--r`` from one frequency seed (the
value it estimates is the one of this random-feature map):

- ``mixture``: 20 equally likely Gaussians in d = 16 (means ~ N(0, 4^2 I), unit spread), sigma = 4, n = 1,000 per
  sample; the large-n value is FKEAVendi's at n = 20,000 (one run: its own noise is about sqrt(1/20) = 0.22 of a
  run's at n = 1,000).
- ``digits``: real embeddings, the 1,797 digits' 64 pixels (scikit-learn's, shipped), sigma = 2, n = 300 drawn with
  replacement: the population is the 1,797 digits themselves, whose value is exact (``1 / ||C_pop||_F^2``, C_pop the
  mean of the 1,797 rows' phi phi^T: two independent draws are one digit with probability 1/1,797, which
  ``||C_pop||_F^2`` counts).

Then Vendi-1 on the same two cases: ``FKEAVendi(alpha=1).interval()``'s ``value - bias +- q se`` beside the plug-in's
``value +- q se`` (the mixture's large-n value with its own bias taken out; the digits' exact, from ``C_pop``).

Printed per case and estimator: the mean over samples, the large-n value, the bias and the spread (sd) of the
samples' values, the mean reported se over sd (1: a right se), and the coverage of ``value +- q se`` with
``q = t_{A, 0.975}`` (the documented interval, A = ``--draws``) and with the normal 1.96 (what ``+- 2 se`` gives).
The plug-in row uses the same draws' se, scaled to the plug-in's gradient.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
import warnings

import torch

from lightning_spectral.data import load_digit_images
from lightning_spectral.functional.fkea import vendi_score
from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import FKEAVendi

MODES, D = 20, 16
MEANS = 4.0 * torch.randn(MODES, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def mixture(n: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(MODES, (n,), generator=generator)
    return MEANS[labels] + torch.randn(n, D, generator=generator, dtype=torch.float64)


def digits() -> torch.Tensor:
    images, _ = load_digit_images()
    return images.flatten(1).double()


def reading(x: torch.Tensor, sigma: float, r: int, draws: int) -> tuple[float, float, float, float]:
    """(unbiased RKE, its se, plug-in RKE, the plug-in's se) of one sample."""
    metric = FKEAVendi(sigma, r, alpha=2, noise_draws=draws, precision="float64")
    metric.update(x)
    got = metric.reading()
    n = float(x.shape[0])
    moment = got.samples.second_moment()
    purity = float(moment.square().sum() / moment.trace().square())
    value, se = float(got.value), float(got.standard_error())
    unbiased = 1.0 / value  # U; the reported se is the plug-in's times n / (n - 1) (P / U)^2
    plug_in_se = se * (n - 1) / n * (unbiased / purity) ** 2
    return value, se, 1.0 / purity, plug_in_se


def vendi_1(x: torch.Tensor, sigma: float, r: int, draws: int) -> tuple[float, ...]:
    """(Vendi-1 less its bias, its se, the plug-in Vendi-1, the same se, and the interval as returned: low, high) of
    one sample (`FKEAVendi.interval`; ``high`` is +inf where it is a lower bound only)."""
    metric = FKEAVendi(sigma, r, alpha=1, noise_draws=draws, precision="float64")
    metric.update(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the large bias it warns about is what this measures
        interval = metric.reading().interval()
    return (float(interval.value - interval.bias), float(interval.se), float(interval.value), float(interval.se),
            float(interval.low), float(interval.high))


def returned(name: str, rows: list, truth: float) -> None:
    """How often ``interval()`` as returned holds the large-n value, and how many were lower bounds only."""
    held = sum(row[4] <= truth <= row[5] for row in rows)
    bounds = sum(math.isinf(row[5]) for row in rows)
    print(f"| {name} | `interval()` as returned ({bounds} of {len(rows)} lower bounds only) | | {truth:.3f} | | | | "
          f"{held / len(rows):.0%} | |")


def report(
    name: str, rows: list, truth: float, q: float, labels=("pairs i != j (reported)", "plug-in 1/||C_n||^2")
) -> None:
    for label, column in ((labels[0], 0), (labels[1], 2)):
        values = torch.tensor([row[column] for row in rows], dtype=torch.float64)
        errors = torch.tensor([row[column + 1] for row in rows], dtype=torch.float64)
        sd = float(values.std())
        cover_t = float(((values - truth).abs() <= q * errors).double().mean())
        cover_n = float(((values - truth).abs() <= 1.96 * errors).double().mean())
        print(f"| {name} | {label} | {float(values.mean()):.3f} | {truth:.3f} | {float(values.mean()) - truth:+.3f} | "
              f"{sd:.3f} | {float(errors.mean()) / sd:.2f} | {cover_t:.0%} | {cover_n:.0%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--r", type=int, default=1024)
    parser.add_argument("--draws", type=int, default=2, help="noise_draws (FKEAVendi's default: 2)")
    args = parser.parse_args()
    began = time.perf_counter()
    q = student_t_isf(0.025, args.draws)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}; 2r = {2 * args.r}, "
          f"A = {args.draws} (q = {q:.2f}), {args.reps} samples per case")
    print("| case | estimator | mean | large-n value | bias | sd | se / sd | covered (t) | covered (1.96) |")
    print("|---|---|---|---|---|---|---|---|---|")
    large = FKEAVendi(4.0, args.r, alpha=2, noise_draws=0, precision="float64")
    large.update(mixture(20000, seed=10**6))
    rows = [reading(mixture(1000, seed), 4.0, args.r, args.draws) for seed in range(args.reps)]
    report("20-mode mixture, n = 1,000", rows, float(large.compute()), q)
    population = digits()
    phi = GaussianRFF(64, args.r, sigma=2.0, seed=0).double()(population)
    truth = float(1.0 / (phi.T @ phi / len(phi)).square().sum())
    rows = []
    for seed in range(args.reps):
        pick = torch.randint(len(population), (300,), generator=torch.Generator().manual_seed(seed))
        rows.append(reading(population[pick], 2.0, args.r, args.draws))
    report("digits (real), n = 300", rows, truth, q)
    vendi_labels = ("Vendi-1 less its bias, interval()", "Vendi-1 plug-in +- q se")
    large = FKEAVendi(4.0, args.r, alpha=1, noise_draws=2, precision="float64")
    large.update(mixture(20000, seed=10**6))
    centre = large.reading().interval()  # its own bias at n = 20,000 taken out too (1/20 of n = 1,000's)
    rows = [vendi_1(mixture(1000, seed), 4.0, args.r, args.draws) for seed in range(args.reps)]
    report("20-mode mixture, n = 1,000", rows, float(centre.value - centre.bias), q, vendi_labels)
    returned("20-mode mixture, n = 1,000", rows, float(centre.value - centre.bias))
    truth = float(vendi_score(torch.linalg.eigvalsh(phi.T @ phi / len(phi)).clamp_min(0), 1))
    rows = []
    for seed in range(args.reps):
        pick = torch.randint(len(population), (300,), generator=torch.Generator().manual_seed(seed))
        rows.append(vendi_1(population[pick], 2.0, args.r, args.draws))
    report("digits (real), n = 300", rows, truth, q, vendi_labels)
    returned("digits (real), n = 300", rows, truth)
    print(f"{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
