"""Coverage of the 95 % intervals of every score's standard error, on a Gaussian mixture whose population values are
known from a large-n run.

    python benchmarks/bench_coverage.py [--reps 200] [--n 1000] [--population 50000] [--r 128] [--draws 2 8]
    python benchmarks/bench_coverage.py --cost [--n 20000] [--r 1024] [--repeats 5]

Data: a mixture of 6 Gaussians in d = 8 (means ~ N(0, 3^2 I), unit within-mode std), the reference ("real") with
weights (0.10, 0.25, 0.20, 0.15, 0.15, 0.15), the generated side with (0.30, 0.20, 0.15, 0.15, 0.10, 0.10); kernel
bandwidth sigma = 3; 2r = 2 ``--r`` random features from one fixed frequency seed (the population value is the one of
this random-feature map, the quantity each metric estimates). SPEC-diff compares the generated samples with
``tanh(x P / 3)`` of them (P a fixed Gaussian 8 x 8 matrix), both at sigma = 3.

Population value: each score at n = ``--population`` (default 50,000) per side, one run. Its own noise is about
sqrt(n / population) = 0.14 of a run's at n = 1,000: small beside the intervals, not zero.

Repeated draws: ``--reps`` independent samples of n per side; each run reports the score and its ``se``; the 95 %
interval is ``score +- q se`` with ``q = t_{A, 0.975}`` (Student-t with A = the multiplier draws: FKEAVendi's
``noise_draws``, FINC's ``draws`` = 3) or ``q = 1.96`` (FastMMD's closed-form se; "normal" rows also show what the
normal quantile would give with A draws). Printed per score: the coverage (share of runs whose interval holds the
population value), the mean se over the spread of the scores across runs (``se / sd``: 1 is a correct se), and the
bias of the score over that spread (``bias / sd``: a score whose mean moves with n is not covered by a correct se).
FINC's top eigenvalues also get a "bias-widened" row: the interval ``[top - b - q se, top + q se]`` with ``b`` the
summary's ``novel_top_bias`` / ``missing_top_bias`` (the bootstrap's second-order bias; ``functional.finc.top_bias``).

    python benchmarks/bench_coverage.py --only-finc --rho 2 1 [--reps 200]   # FINC's rows alone, per rho
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi, SPECDivergence

D_IN, SIGMA, T = 8, 3.0, 10
REF_WEIGHTS = [0.10, 0.25, 0.20, 0.15, 0.15, 0.15]
GEN_WEIGHTS = [0.30, 0.20, 0.15, 0.15, 0.10, 0.10]
MEANS = 3.0 * torch.randn(6, D_IN, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
PROJECTION = torch.randn(D_IN, D_IN, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def sample(n: int, weights: list, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.multinomial(torch.tensor(weights, dtype=torch.float64), n, replacement=True, generator=generator)
    return MEANS[labels] + torch.randn(n, D_IN, generator=generator, dtype=torch.float64)


def scores(gen: torch.Tensor, ref: torch.Tensor, r: int, draws: list[int]) -> dict[str, tuple[float, float, int]]:
    """``{score: (value, se, dof)}`` for one sample (dof 0: the normal quantile)."""
    out: dict[str, tuple[float, float, int]] = {}
    for a in draws:
        for name, truncation in (("", None), (f"t{T}-", T)):
            vendi = FKEAVendi(SIGMA, r, alpha=[1, 2, "inf"], truncation=truncation, noise_draws=a, precision="float64")
            vendi.update(gen)
            summary = vendi.summary()
            for order, label in ((1, "Vendi-1"), (2, "RKE"), ("inf", "Vendi-inf")):
                out[f"{name}{label} (A={a})"] = (float(summary[""][order]), float(summary["se"][order]), a)
    mmd = FastMMD(SIGMA, r)
    mmd.update(ref, real=True)
    mmd.update(gen, real=False)
    summary = mmd.summary()
    out["FastMMD MMD^2"] = (float(summary[""]), float(summary["se"]), 0)
    for a in draws:  # SPEC-diff between the samples and a bent copy of them (tanh of a projection)
        spec = SPECDivergence("gaussian", SIGMA, SIGMA, n_frequencies=r, noise_draws=a)
        spec.update(gen, torch.tanh(gen @ PROJECTION / 3))
        summary = spec.summary()
        out[f"SPEC-diff (A={a})"] = (float(summary[""]), float(summary["se"]), a)
    finc = FINCNovelty(SIGMA, r)
    finc.update(ref, real=True)
    finc.update(gen, real=False)
    summary = finc.summary()
    out["FINC top novel eigenvalue (A=3)"] = (float(summary["novel_top"]), float(summary["novel_top_se"]), 3)
    out["FINC top missing eigenvalue (A=3)"] = (float(summary["missing_top"]), float(summary["missing_top_se"]), 3)
    out["FINC novelty (A=3)"] = (float(summary[""]), float(summary["se"]), 3)
    for side in ("novel", "missing"):  # the documented interval [top - bias - q se, top + q se]
        out[f"FINC top {side} eigenvalue, bias-widened (A=3)"] = (
            float(summary[f"{side}_top"]), float(summary[f"{side}_top_se"]), 3, float(summary[f"{side}_top_bias"])
        )
    return out


def finc_scores(gen: torch.Tensor, ref: torch.Tensor, r: int, rho: float) -> dict[str, tuple]:
    """FINC's rows alone (``--only-finc``), at ``rho``."""
    finc = FINCNovelty(SIGMA, r, rho=rho)
    finc.update(ref, real=True)
    finc.update(gen, real=False)
    summary = finc.summary()
    out = {}
    for side in ("novel", "missing"):
        value, se = float(summary[f"{side}_top"]), float(summary[f"{side}_top_se"])
        out[f"FINC top {side} eigenvalue, rho={rho:g} (A=3)"] = (value, se, 3)
        out[f"FINC top {side} eigenvalue, rho={rho:g}, bias-widened (A=3)"] = (
            value, se, 3, float(summary[f"{side}_top_bias"])
        )
    out[f"FINC novelty, rho={rho:g} (A=3)"] = (float(summary[""]), float(summary["se"]), 3)
    return out


def cost(n: int, r: int, repeats: int) -> None:
    """Seconds of ``update`` (n rows) and of the first ``summary()`` with ``noise_draws`` 0 and 2, interleaved."""
    x = sample(n, GEN_WEIGHTS, 5).float()
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(repeats):
        for draws in (0, 2):
            metric = FKEAVendi(SIGMA, r, alpha=[1, 2], noise_draws=draws)
            start = time.perf_counter()
            metric.update(x)
            metric.flush()
            middle = time.perf_counter()
            metric.summary()
            times.setdefault((draws, "update"), []).append(middle - start)
            times.setdefault((draws, "summary"), []).append(time.perf_counter() - middle)
    print(f"# FKEAVendi, n = {n}, 2r = {2 * r}, float32 rows, {repeats} interleaved repeats (median seconds)")
    print("| noise_draws | update | summary() (score + se) | state (float64 (2r)^2 sums) |")
    print("|---|---|---|---|")
    median = {key: sorted(values)[len(values) // 2] for key, values in times.items()}
    for draws in (0, 2):
        print(f"| {draws} | {median[(draws, 'update')]:.3f} ({median[(draws, 'update')] / median[(0, 'update')]:.2f}x)"
              f" | {median[(draws, 'summary')]:.3f} ({median[(draws, 'summary')] / median[(0, 'summary')]:.2f}x) |"
              f" {1 + draws} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cost", action="store_true", help="time noise_draws 0 against 2 instead (--n, --r)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--population", type=int, default=50_000)
    parser.add_argument("--r", type=int, default=128)
    parser.add_argument("--draws", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--only-finc", action="store_true", help="FINC's rows alone, at each --rho")
    parser.add_argument("--rho", type=float, nargs="+", default=[2.0], help="with --only-finc")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.cost:
        cost(args.n, args.r, args.repeats)
        return
    start = time.perf_counter()
    def every(gen: torch.Tensor, ref: torch.Tensor) -> dict[str, tuple]:
        if not args.only_finc:
            return scores(gen, ref, args.r, args.draws)
        return {name: value for rho in args.rho for name, value in finc_scores(gen, ref, args.r, rho).items()}

    population = every(sample(args.population, GEN_WEIGHTS, 1), sample(args.population, REF_WEIGHTS, 2))
    runs: dict[str, list[tuple]] = {name: [] for name in population}
    for rep in range(args.reps):
        for name, value in every(sample(args.n, GEN_WEIGHTS, 1000 + 2 * rep),
                                 sample(args.n, REF_WEIGHTS, 1001 + 2 * rep)).items():
            runs[name].append(value)
    seconds = time.perf_counter() - start
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} "
          f"threads; n = {args.n} per side, 2r = {2 * args.r}, population n = {args.population}, {args.reps} runs, "
          f"{seconds:.0f} s")
    print("| score | population | mean | coverage (t, A dof) | coverage (1.96) | se / sd | bias / sd |")
    print("|---|---|---|---|---|---|---|")
    for name, values in runs.items():
        value = torch.tensor([v[0] for v in values], dtype=torch.float64)
        se = torch.tensor([v[1] for v in values], dtype=torch.float64)
        # a fourth entry: the upward bias b of a top eigenvalue: the interval [value - b - q se, value + q se]
        bias = torch.tensor([v[3] if len(v) > 3 else 0.0 for v in values], dtype=torch.float64)
        dof = values[0][2]
        truth = population[name][0]
        quantile = student_t_isf(0.025, dof) if dof else 1.959964

        def share(q: float) -> float:
            return float(((truth >= value - bias - q * se) & (truth <= value + q * se)).double().mean())

        covered, normal = share(quantile), share(1.959964)
        sd = float(value.std())
        t_cell = f"{covered:.1%} (q = {quantile:.2f})" if dof else "-"
        print(f"| {name} | {truth:.5g} | {float(value.mean()):.5g} | {t_cell} | {normal:.1%} | "
              f"{float(se.pow(2).mean().sqrt()) / sd:.2f} | {(float(value.mean()) - truth) / sd:+.2f} |")


if __name__ == "__main__":
    main()
