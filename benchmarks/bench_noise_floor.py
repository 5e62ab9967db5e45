"""Which dropped classes can a level-0.05 test of FINC's eigenvalues name at all? The noise floor, measured.

FINC calls a missing mode significant when its eigenvalue of ``C_ref - rho C_gen`` beats the null's threshold
(``FINCNovelty.threshold(missing=True)``, from the generated side's multiplier draws). This compares, on the
protocols of ``bench_dropped_modes.py`` (``drop3``: 2,000 reference images of all ten Fashion-MNIST classes, 2,000
generated of seven; ``drop5``: 1,000 + 1,000, five classes dropped; ``--data digits``: 900 of scikit-learn's digits
against the other ~630 of seven; every ``FINCNovelty`` default but ``n_frequencies`` (``--r``), ``sigma="auto"``'s
rule):

- each dropped class's best missing mode among the top ``--modes`` (significant or not; first ends, as
  ``top_samples``): the largest eigenvalue whose 20 best reference samples are >= 80 % that class (drop3; a
  majority for drop5), its p-value, and whether the library calls it significant;
- the library's threshold in that trial;
- the **oracle floor**: the top eigenvalue of ``C_a - rho C_b`` over ``--splits`` same-distribution splits (disjoint
  samples of all ten classes, of the protocol's two sizes, the same sigma rule), its mean, standard deviation and
  ``mean + 1.645 sd`` (the 95 % point of a normal fit; a test at level 0.05 cannot name an eigenvalue below it),
  and how many of those splits the library flags (a significant missing mode: its false positives).

A class whose best eigenvalue is below the oracle floor is out of reach of any level-0.05 test of this statistic
at this n; one between the floor and the library's threshold is lost to the null's conservativeness.

    python benchmarks/bench_noise_floor.py --embedding pixels resnet clip --trials 6 --splits 10
    python benchmarks/bench_noise_floor.py --target drop5 --embedding pixels resnet clip --trials 6 --splits 10
    python benchmarks/bench_noise_floor.py --data digits --embedding pixels --r 256 --trials 20 --splits 20
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

from lightning_spectral.metrics import FINCNovelty

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dropped_modes import digits, drop, drop3_classes, drop5_classes, embed, fashion, rule_sigma  # noqa: E402


def oracle_floor(x: torch.Tensor, n_ref: int, n_gen: int, splits: int, r: int, draws: int = 3) -> dict:
    """The top missing eigenvalue on ``splits`` same-distribution splits of ``n_ref`` + ``n_gen`` rows of ``x``
    (sigma each split's rule on its reference rows)."""
    tops, thresholds, flagged = [], [], 0
    for s in range(splits):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(700 + s))
        ref = x[order[:n_ref]]
        metric = FINCNovelty(rule_sigma(ref), n_frequencies=r, noise_draws=draws)
        metric.update(ref, real=True)
        metric.update(x[order[n_ref : n_ref + n_gen]], real=False)
        modes = metric.reading().missing_modes(1)
        tops.append(float(modes.eigenvalues[0]))
        thresholds.append(metric.reading().threshold(missing=True))
        flagged += bool(modes.significant[0])
        del metric
        gc.collect()  # a metric is in a reference cycle (docs/metrics.md): free its sums before the next split's
    top = torch.tensor(tops, dtype=torch.float64)
    mean, sd = float(top.mean()), float(top.std())
    return {"mean": mean, "sd": sd, "floor": mean + 1.645 * sd, "max": float(top.max()),
            "library_threshold": sum(thresholds) / len(thresholds), "splits_flagged": f"{flagged}/{splits}"}


def best_modes(gen, ref, ref_y, dropped, sigma, r, k, pure, draws=3):
    """Per dropped class: (eigenvalue, p-value, significant) of its best mode among the top ``k`` whose top 20 are at
    least ``pure`` that class, or None."""
    metric = FINCNovelty(sigma, n_frequencies=r, noise_draws=draws)
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    modes = metric.reading().missing_modes(k)
    tops = metric.reading().top_samples([(ref, torch.arange(len(ref)))], k=k, per_mode=20, missing=True)
    best = {c: None for c in dropped}
    for value, p, significant, (ids, _) in zip(modes.eigenvalues, modes.p_values, modes.significant, tops, strict=True):
        labels = ref_y[ids]
        dominant = int(labels.mode().values)
        if dominant in best and float((labels == dominant).float().mean()) >= pure and best[dominant] is None:
            best[dominant] = (float(value), float(p), bool(significant))
    threshold = metric.reading().threshold(missing=True)
    del metric
    gc.collect()
    return best, threshold


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--data", choices=["fashion", "digits"], default="fashion")
    parser.add_argument("--target", choices=["drop3", "drop5"], default="drop3")
    parser.add_argument("--embedding", nargs="+", default=["pixels", "resnet", "clip"])
    parser.add_argument("--r", type=int, default=2048)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--modes", type=int, default=12)
    parser.add_argument("--draws", type=int, default=3, help="FINCNovelty's `draws` (default 3)")
    parser.add_argument("--cache", default="/tmp/modes")
    args = parser.parse_args()
    if args.data == "digits" and args.target == "drop5":
        parser.error("--target drop5 is a Fashion-MNIST protocol (1,000 + 1,000); the digits run drop3 only")
    torch.set_num_threads(2)
    images, y = fashion(args.fashion) if args.data == "fashion" else digits()
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    classes, pure = (drop3_classes, 0.8) if args.target == "drop3" else (drop5_classes, 0.5)
    for name in args.embedding:
        start = time.time()
        x = embed(name, images, Path(args.cache))
        samples = []
        for t in range(args.trials):
            dropped = classes(t)
            if args.data == "digits":  # tests/test_dropped_modes.py: 900 of all, the rest of seven
                samples.append((dropped, *drop(x, y, 900, None, dropped, seed=t)))
            else:
                n = 2000 if args.target == "drop3" else 1000
                samples.append((dropped, *drop(x, y, n, n, dropped, seed=t if args.target == "drop3" else 100 + t)))
        n_gen = round(sum(len(gen) for _, gen, _, _ in samples) / len(samples))
        floor = oracle_floor(x, len(samples[0][2]), n_gen, args.splits, args.r, args.draws)
        counts = {"named": 0, "above_floor_unnamed": 0, "below_floor": 0, "no_pure_mode": 0}
        for t, (dropped, gen, ref, ref_y) in enumerate(samples):
            sigma = rule_sigma(ref)
            best, threshold = best_modes(gen, ref, ref_y, dropped, sigma, args.r, args.modes, pure, args.draws)
            for found in best.values():
                if found is None:
                    counts["no_pure_mode"] += 1
                elif found[2]:
                    counts["named"] += 1
                elif found[0] >= floor["floor"]:
                    counts["above_floor_unnamed"] += 1
                else:
                    counts["below_floor"] += 1
            line = {"embedding": name, "trial": t, "sigma": round(sigma, 4), "threshold": round(threshold, 5),
                    "best": {c: None if b is None else [round(b[0], 5), round(b[1], 3), b[2]] for c, b in best.items()}}
            print(json.dumps(line), file=sys.stderr, flush=True)
        floor = {k: round(v, 5) if isinstance(v, float) else v for k, v in floor.items()}
        row = {"data": args.data, "target": args.target, "embedding": name, "n_gen": n_gen, "draws": args.draws,
               **floor, **counts,
               "seconds": round(time.time() - start, 1)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
