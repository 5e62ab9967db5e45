"""Coverage of the 95 % intervals of every score's standard error, on a Gaussian mixture whose population values are
known from a large-n run.

    python benchmarks/bench_coverage.py [--reps 200] [--n 1000] [--population 50000] [--r 128] [--draws 2 8]
        [--only fkea mmd spec finc conditional covariance ood]
    python benchmarks/bench_coverage.py --cost [--n 20000] [--r 1024] [--repeats 5] [--only conditional [--labels]]
    python benchmarks/bench_coverage.py --cost --only finc [--n 10000] [--r 1024]   # the mode shares' se in summary()

Data: a mixture of 6 Gaussians in d = 8 (means ~ N(0, 3^2 I), unit within-mode std), the reference ("real") with
weights (0.10, 0.25, 0.20, 0.15, 0.15, 0.15), the generated side with (0.30, 0.20, 0.15, 0.15, 0.10, 0.10); kernel
bandwidth sigma = 3; 2r = 2 ``--r`` random features from one fixed frequency seed (the population value is the one of
this random-feature map, the quantity each metric estimates). SPEC-diff compares the generated samples with
``tanh(x P / 3)`` of them (P a fixed Gaussian 8 x 8 matrix), both at sigma = 3.

ConditionalVendi (orders 1 and 2, and the prompt-agnostic share with ridge 0.01): the generated side's samples with
their mode as a one-hot prompt (prompt_sigma 0.5), and the mode as the label (``num_classes`` = 6: labels 0 and 5's
Vendi-1 and RKE, and the minimum over labels with the minimising label's se). RFFCovariance: three entries of C of
the generated side.
KernelPCAOOD: one CoRP detector (sigma 0.5 on the sphere, 16 components) fitted once on 5,000 reference rows (its
readings' se are for the scores of a fixed detector), scoring the reference draw (in-distribution) against the
generated draw plus N(0, 1.5^2 I) noise (out of distribution; AUROC about 0.87): AUROC, FPR at 95 % TPR, the
threshold, the OOD flagged rate at a fixed threshold, the in-distribution scores' mean and standard deviation
(closed forms: the 1.96 column).

Population value: each score at n = ``--population`` (default 50,000) per side, one run. Its own noise is about
sqrt(n / population) = 0.14 of a run's at n = 1,000: small beside the intervals, not zero.

Repeated draws: ``--reps`` independent samples of n per side; each run reports the score and its ``se``; the 95 %
interval is ``score +- q se`` with ``q = t_{A, 0.975}`` (Student-t with A = the multiplier draws: FKEAVendi's
``noise_draws``, FINC's ``draws`` = 3) or ``q = 1.96`` (FastMMD's closed-form se; "normal" rows also show what the
normal quantile would give with A draws). Printed per score: the coverage (share of runs whose interval holds the
population value), the mean se over the spread of the scores across runs (``se / sd``: 1 is a correct se), and the
bias of the score over that spread (``bias / sd``: a score whose mean moves with n is not covered by a correct se).
Vendi-1 also gets a "bias taken out" row: the interval ``value - b +- q se`` of ``FKEAVendi``'s ``interval()``
(``b`` its second-order bias from the draws, ``functional.fkea.vendi_bias``). FINC's top eigenvalues also get a
"bias-widened" row: the interval ``[top - b - q se, top + q se]`` with ``b`` the
reading's ``top_interval()`` (its ``bias``: the bootstrap's second-order bias; ``functional.finc.top_bias``).
FINC's mode shares: the top novel mode's share (``mode_shares(1)``, mode 1 of the mixture: 0.30 of the generated side
against 0.10) and, with the sides swapped, the same mode as the top missing mode (held by the reference, which keeps
no draws), each with ``mode_share_standard_errors``.

    python benchmarks/bench_coverage.py --only finc --rho 2 1 [--reps 200]   # FINC's rows alone, per rho
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from lightning_spectral.functional.ood import (
    detection_metrics,
    detection_standard_errors,
    rate_standard_error,
    score_standard_errors,
    threshold_at_tpr,
)
from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.metrics import (
    ConditionalVendi,
    FastMMD,
    FINCNovelty,
    FKEAVendi,
    KernelPCAOOD,
    RFFCovariance,
    SPECDivergence,
)

D_IN, SIGMA, T = 8, 3.0, 10
REF_WEIGHTS = [0.10, 0.25, 0.20, 0.15, 0.15, 0.15]
GEN_WEIGHTS = [0.30, 0.20, 0.15, 0.15, 0.10, 0.10]
MEANS = 3.0 * torch.randn(6, D_IN, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
PROJECTION = torch.randn(D_IN, D_IN, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def sample(n: int, weights: list, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.multinomial(torch.tensor(weights, dtype=torch.float64), n, replacement=True, generator=generator)
    return MEANS[labels] + torch.randn(n, D_IN, generator=generator, dtype=torch.float64)


GROUPS = ("fkea", "mmd", "spec", "finc", "conditional", "covariance", "ood")
PROMPT_SIGMA = 0.5  # one-hot prompts sqrt(2) apart: k_T = exp(-4) between distinct labels
ENTRIES = ((0, 0), (0, 1), (3, 40))  # RFFCovariance entries whose se is checked
_detector: dict[int, tuple[KernelPCAOOD, float]] = {}


def sample_labelled(n: int, weights: list, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``sample`` with each row's mode as a one-hot prompt (n, 6)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.multinomial(torch.tensor(weights, dtype=torch.float64), n, replacement=True, generator=generator)
    x = MEANS[labels] + torch.randn(n, D_IN, generator=generator, dtype=torch.float64)
    return x, torch.nn.functional.one_hot(labels, len(weights)).double()


def detector(r: int) -> tuple[KernelPCAOOD, float]:
    """One CoRP detector fitted on 5,000 reference rows (its fit is not the noise measured: the readings' se are
    for the scores of a fixed detector), and a fixed threshold (its 95 % in-distribution quantile there)."""
    if r not in _detector:
        fitted = sample(5000, REF_WEIGHTS, 7)
        model = KernelPCAOOD("corp", sigma=0.5, n_frequencies=r, n_components=16).fit(fitted)
        _detector[r] = (model, float(threshold_at_tpr(model.score(fitted), 0.95)))
    return _detector[r]


def scores(
    gen: torch.Tensor, ref: torch.Tensor, r: int, draws: list[int], groups=GROUPS, seed: int = 0, rhos=(2.0,)
) -> dict[str, tuple]:
    """``{score: (value, se, dof[, bias[, open]]})`` for one sample (dof 0: the normal quantile; a bias widens the
    interval downwards: ``[value - bias - q se, value + q se]``; ``open``: the interval as returned has no upper end,
    a lower bound only)."""
    out: dict[str, tuple[float, float, int]] = {}
    if "conditional" in groups:
        x, prompts = sample_labelled(gen.shape[0], GEN_WEIGHTS, seed)
        for a in draws:
            metric = ConditionalVendi(SIGMA, PROMPT_SIGMA, r, alpha=[1, 2], noise_draws=a, precision="float64",
                                      prompt_agnostic=True, ridge=1e-2, num_classes=6)
            metric.update(x, prompts, labels=prompts.argmax(1))
            summary, intervals = metric.reading().summary(), metric.reading().interval()
            labelled = metric.reading().per_prompt_interval()
            for label in (0, 5):  # per-label Vendi (r_p = min(128, r)): the largest and a small label
                out[f"CondVendi prompt {label} Vendi-1 (A={a})"] = (
                    float(summary["prompt"][label]), float(summary["prompt_se"][label]), a)
                out[f"CondVendi prompt {label} Vendi-1, bias taken out (A={a})"] = (
                    float(labelled.value[label] - labelled.bias[label]), float(labelled.se[label]), a, 0.0,
                    bool(labelled.high[label].isinf()))
            out[f"CondVendi min prompt Vendi-1 (A={a})"] = (
                float(summary["min_prompt_vendi"]), float(summary["min_prompt_vendi_se"]), a)
            rke, rke_se = metric.reading().per_prompt(2), metric.reading().per_prompt_standard_errors(2)  # order 2: little n-bias
            for label in (0, 5):
                out[f"CondVendi prompt {label} RKE (A={a})"] = (float(rke[label]), float(rke_se[label]), a)
            lowest = int(torch.argmin(rke))
            out[f"CondVendi min prompt RKE (A={a})"] = (float(rke[lowest]), float(rke_se[lowest]), a)
            for key, label in (("", "Conditional"), ("information", "Information"), ("vendi", "Vendi"),
                               ("prompt_vendi", "prompt Vendi")):
                for order in (1, 2):
                    se = summary["se" if key == "" else f"{key}_se"][order]
                    out[f"CondVendi {label}-{order} (A={a})"] = (float(summary[key][order]), float(se), a)
                interval = intervals[key][1]  # the documented interval: value - bias +- q se (or a lower bound)
                out[f"CondVendi {label}-1, bias taken out (A={a})"] = (
                    float(interval.value - interval.bias), float(interval.se), a, 0.0, bool(interval.high.isinf()))
            out[f"CondVendi prompt-agnostic share (A={a})"] = (
                float(summary["prompt_agnostic_share"]), float(summary["prompt_agnostic_share_se"]), a)
    if "covariance" in groups:
        for a in draws:
            covariance = RFFCovariance(SIGMA, r, noise_draws=a)
            covariance.update(gen)
            summary = covariance.reading().summary()
            for i, j in ENTRIES:
                out[f"RFFCovariance C[{i},{j}] (A={a})"] = (float(summary[""][i, j]), float(summary["se"][i, j]), a)
    if "ood" in groups:
        model, fixed = detector(r)
        inside = model.score(ref)
        blur = torch.randn(gen.shape, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64)
        outside = model.score(gen + 1.5 * blur)  # the generated mixture, blurred: out of distribution
        detection, errors = detection_metrics(inside, outside), detection_standard_errors(inside, outside)
        spread = score_standard_errors(inside)
        rate = (outside > fixed).double().mean()
        out["KernelPCAOOD AUROC"] = (float(detection["auroc"]), float(errors["auroc_se"]), 0)
        out["KernelPCAOOD FPR@95"] = (float(detection["fpr"]), float(errors["fpr_se"]), 0)
        out["KernelPCAOOD threshold"] = (float(detection["threshold"]), float(errors["threshold_se"]), 0)
        rate_se = rate_standard_error(rate, outside.numel())
        out["KernelPCAOOD OOD flagged rate (fixed threshold)"] = (float(rate), float(rate_se), 0)
        out["KernelPCAOOD score mean"] = (float(inside.mean()), float(spread["mean_se"]), 0)
        out["KernelPCAOOD score std"] = (float(inside.std(correction=0)), float(spread["std_se"]), 0)
    draws_of = {group: draws if group in groups else [] for group in ("fkea", "spec")}
    for a in draws_of["fkea"]:
        for name, truncation in (("", None), (f"t{T}-", T)):
            vendi = FKEAVendi(SIGMA, r, alpha=[1, 2, "inf"], truncation=truncation, noise_draws=a, precision="float64")
            vendi.update(gen)
            summary = vendi.reading().summary()
            for order, label in ((1, "Vendi-1"), (2, "RKE"), ("inf", "Vendi-inf")):
                out[f"{name}{label} (A={a})"] = (float(summary[""][order]), float(summary["se"][order]), a)
            if truncation is None:  # the documented interval: value - bias +- q se (`VendiReading.interval`)
                interval = vendi.reading().interval()[1]
                out[f"Vendi-1, bias taken out (A={a})"] = (float(interval.value - interval.bias), float(interval.se), a,
                                                           0.0, bool(interval.high.isinf()))
    if "mmd" in groups:
        mmd = FastMMD(SIGMA, r)
        mmd.update(ref, real=True)
        mmd.update(gen, real=False)
        summary = mmd.reading().summary()
        out["FastMMD MMD^2"] = (float(summary[""]), float(summary["se"]), 0)
    for a in draws_of["spec"]:  # SPEC-diff between the samples and a bent copy of them (tanh of a projection)
        spec = SPECDivergence("gaussian", SIGMA, SIGMA, n_frequencies=r, noise_draws=a)
        spec.update(gen, torch.tanh(gen @ PROJECTION / 3))
        summary = spec.reading().summary()
        out[f"SPEC-diff (A={a})"] = (float(summary[""]), float(summary["se"]), a)
        for sign, side in ((1, "+"), (-1, "-")):  # DriftMonitor's lost / new eigenvalues: clusters_standard_error
            values, errors = spec.reading().clusters(2, sign).eigenvalues.abs(), spec.reading().clusters_standard_error(2, sign)
            for i in range(min(2, values.numel())):
                out[f"SPEC eigenvalue {side}{i + 1} (A={a})"] = (float(values[i]), float(errors[i]), a)
    for rho in rhos if "finc" in groups else []:
        finc = FINCNovelty(SIGMA, r, rho=rho)
        finc.update(ref, real=True)
        finc.update(gen, real=False)
        summary = finc.reading().summary()
        for side in ("novel", "missing"):  # the documented interval [top - bias - q se, top + q se] beside +- q se
            interval = finc.reading().top_interval(missing=side == "missing")
            value, se = float(interval.value), float(interval.se)
            out[f"FINC top {side} eigenvalue, rho={rho:g} (A=3)"] = (value, se, 3)
            out[f"FINC top {side} eigenvalue, rho={rho:g}, bias-widened (A=3)"] = (value, se, 3, float(interval.bias))
        out[f"FINC novelty, rho={rho:g} (A=3)"] = (float(summary[""]), float(summary["se"]), 3)
        # the top novel mode's share (mode 1 of the mixture, 0.30 against 0.10: the side with draws holds it)
        share, share_se = finc.reading().mode_shares(1), finc.reading().mode_share_standard_errors(1)
        out[f"FINC top novel mode's share, rho={rho:g} (A=3)"] = (float(share[0]), float(share_se[0]), 3)
        # sides swapped: the same mode is now missing, held by the reference, which keeps no draws
        swapped = FINCNovelty(SIGMA, r, rho=rho)
        swapped.update(gen, real=True)
        swapped.update(ref, real=False)
        share, share_se = swapped.reading().mode_shares(1, missing=True), swapped.reading().mode_share_standard_errors(1, missing=True)
        out[f"FINC top missing mode's share (sides swapped), rho={rho:g} (A=3)"] = (
            float(share[0]), float(share_se[0]), 3)
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
            metric._flush()
            middle = time.perf_counter()
            metric.reading().summary()
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


def cost_conditional(n: int, r: int, repeats: int, labels: bool = False) -> None:
    """``ConditionalVendi`` (orders 1 and 2): seconds of ``update`` and of the first ``summary()`` with
    ``noise_draws`` 0 and 2, interleaved; with ``labels``, each also without and with the per-label sums
    (``num_classes`` = 6, the prompts' labels; r_p = min(128, r)), which keep ``noise_draws`` draws per label."""
    x, prompts = sample_labelled(n, GEN_WEIGHTS, 5)
    classes_of = (None, 6) if labels else (None,)
    times: dict[tuple, list[float]] = {}
    for _ in range(repeats):
        for draws in (0, 2):
            for classes in classes_of:
                metric = ConditionalVendi(SIGMA, PROMPT_SIGMA, r, alpha=[1, 2], noise_draws=draws, num_classes=classes)
                start = time.perf_counter()
                metric.update(x.float(), prompts.float(), **({"labels": prompts.argmax(1)} if classes else {}))
                metric._flush()
                middle = time.perf_counter()
                metric.reading().summary()
                times.setdefault((draws, classes, "update"), []).append(middle - start)
                times.setdefault((draws, classes, "summary"), []).append(time.perf_counter() - middle)
    print(f"# ConditionalVendi, n = {n}, 2r = {2 * r}, {repeats} interleaved repeats (median seconds)")
    print("| noise_draws | num_classes | update | summary() (scores + se) | state (float64 sums) |")
    print("|---|---|---|---|---|")
    median = {key: sorted(values)[len(values) // 2] for key, values in times.items()}
    for draws in (0, 2):
        for classes in classes_of:
            update, summary = median[(draws, classes, "update")], median[(draws, classes, "summary")]
            base_update, base_summary = median[(0, None, "update")], median[(0, None, "summary")]
            state = f"{3 * (1 + draws)} of (2r)^2" + (f" + {classes} x {1 + draws} of (2 r_p)^2" if classes else "")
            print(f"| {draws} | {classes or 'none'} | {update:.3f} ({update / base_update:.2f}x) | "
                  f"{summary:.3f} ({summary / base_summary:.2f}x) | {state} |")


def cost_finc(n: int, r: int, repeats: int) -> None:
    """``FINCNovelty`` (rho = 2): seconds of the first ``summary()`` and, on the same sums, of the significant modes'
    shares' standard errors (`two_sided_share_errors` for both sides; the summary holds none since 2026-11-29), in one
    process."""
    from lightning_spectral.functional.mode_shares import two_sided_share_errors

    gen, ref = sample(n, GEN_WEIGHTS, 5).float(), sample(n, REF_WEIGHTS, 6).float()
    rows = []
    for _ in range(repeats):
        finc = FINCNovelty(SIGMA, r)
        finc.update(ref, real=True)
        finc.update(gen, real=False)
        start = time.perf_counter()
        summary = finc.reading().summary()
        middle = time.perf_counter()
        counts = [int(summary["novel_modes"]), int(summary["missing_modes"])]
        for missing, count in ((False, counts[0]), (True, counts[1])):
            if count:
                modes = finc.reading().missing_modes(count) if missing else finc.reading().novel_modes(count)
                x, y = finc.reading().pooled(real=missing), finc.reading().pooled(real=not missing)
                two_sided_share_errors(modes.eigenvectors, x.mean(), x.second_moment(), y.mean(), y.second_moment(),
                                       finc.rho, finc.gen[0].noise_sums(), not missing, float(finc.ref[0].count))
        rows.append((middle - start, time.perf_counter() - middle, counts))
    print(f"# FINCNovelty, n = {n} per side, 2r = {2 * r}, {repeats} repeats (seconds)")
    print("| summary() | the share se | share se / summary() | modes (novel, missing) |")
    print("|---|---|---|---|")
    for whole, shares, counts in rows:
        print(f"| {whole:.2f} | {shares:.2f} | {shares / whole:.0%} | {counts[0]}, {counts[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cost", action="store_true", help="time noise_draws 0 against 2 instead (--n, --r)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--population", type=int, default=50_000)
    parser.add_argument("--r", type=int, default=128)
    parser.add_argument("--draws", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS),
                        help="the metrics to measure (default: all)")
    parser.add_argument("--rho", type=float, nargs="+", default=[2.0], help="FINC's rho values (default: 2)")
    parser.add_argument("--labels", action="store_true",
                        help="with --cost --only conditional: each also with the per-label sums (num_classes = 6)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.cost:
        if args.only == ["finc"]:
            cost_finc(args.n, args.r, args.repeats)
        elif "conditional" in args.only and "fkea" not in args.only:
            cost_conditional(args.n, args.r, args.repeats, args.labels)
        else:
            cost(args.n, args.r, args.repeats)
        return
    start = time.perf_counter()
    population = scores(sample(args.population, GEN_WEIGHTS, 1), sample(args.population, REF_WEIGHTS, 2), args.r,
                        args.draws, args.only, seed=3, rhos=args.rho)
    runs: dict[str, list[tuple]] = {name: [] for name in population}
    for rep in range(args.reps):
        for name, value in scores(sample(args.n, GEN_WEIGHTS, 1000 + 2 * rep),
                                  sample(args.n, REF_WEIGHTS, 1001 + 2 * rep), args.r, args.draws, args.only,
                                  seed=100_000 + rep, rhos=args.rho).items():
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
        # a fifth: the interval is a lower bound only (`metrics.reading.bias_corrected`): no upper end to miss
        open_above = torch.tensor([bool(v[4]) if len(v) > 4 else False for v in values])
        dof = values[0][2]
        truth = population[name][0]
        quantile = student_t_isf(0.025, dof) if dof else 1.959964

        def share(q: float, truth=truth, value=value, bias=bias, se=se, open_above=open_above) -> float:
            below = truth <= value + q * se
            return float(((truth >= value - bias - q * se) & (below | open_above)).double().mean())

        covered, normal = share(quantile), share(1.959964)
        sd = float(value.std())
        t_cell = f"{covered:.1%} (q = {quantile:.2f})" if dof else "-"
        bound = f" ({int(open_above.sum())} of {len(values)} lower bounds)" if bool(open_above.any()) else ""
        print(f"| {name}{bound} | {truth:.5g} | {float(value.mean()):.5g} | {t_cell} | {normal:.1%} | "
              f"{float(se.pow(2).mean().sqrt()) / sd:.2f} | {(float(value.mean()) - truth) / sd:+.2f} |")


if __name__ == "__main__":
    main()
