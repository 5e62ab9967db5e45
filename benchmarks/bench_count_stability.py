"""Do FINC's masses, counts and named classes hold still across independent sample sets of one generator?

    python benchmarks/bench_count_stability.py [--data digits fashion] [--sets 10] [--n 1500]

One "generator" per data set drops three classes: digits (scikit-learn's 1,797 8 x 8 images, 64 pixels) drops 1, 5
and 7, Fashion-MNIST (the 60,000 training images, 784 pixels) drops Trouser, Sneaker and Bag (1, 7, 8). Each of
``--sets`` independent sets holds ``n`` reference images of all classes and ``n`` generated images of the seven
kept classes: Fashion-MNIST's sets are disjoint draws without replacement; the digits are too few for that, so a
digits set draws with replacement and adds pixel noise (sd 0.05: a smoothed bootstrap, the population being the
digits blurred by that noise). ``FINCNovelty(sigma="auto")`` at its defaults reads each set, as a callback would.

Printed per set: the missing mass and its se, the count of significant missing modes, the classes its regions
name (``grouped_modes``' rows, each row's dominant class among its top 20 reference samples), the novel mass and
count. Then, over the sets: each quantity's spread (sd), its mean reported se and their ratio (se / sd: 1 is a
correct se, the goal 0.7-1.5), and how many sets name the most common set of classes (goal >= 8 of 10).
"""

from __future__ import annotations

import argparse
import collections
import gc
import statistics
import sys
from pathlib import Path

import torch

from lightning_spectral.metrics import FINCNovelty

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dropped_modes import digits, fashion  # noqa: E402

DROPPED = {"digits": (1, 5, 7), "fashion": (1, 7, 8)}


def load(name: str, root: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The images as rows of pixels in [0, 1] and their classes (the dropped-modes benchmark's loaders)."""
    images, labels = digits() if name == "digits" else fashion(root, n=60000)
    return images.flatten(1), labels


def sets(name: str, x: torch.Tensor, y: torch.Tensor, count: int, n: int):
    """``count`` independent (reference, reference labels, generated) sets."""
    kept = ~torch.isin(y, torch.tensor(DROPPED[name]))
    g = torch.Generator().manual_seed(0)
    if name == "digits":
        for _ in range(count):
            ref = torch.randint(len(x), (n,), generator=g)
            gen = kept.nonzero().squeeze(1)[torch.randint(int(kept.sum()), (n,), generator=g)]
            noise = 0.05 * torch.randn(2 * n, x.shape[1], generator=g)
            yield x[ref] + noise[:n], y[ref], x[gen] + noise[n:]
        return
    order = torch.randperm(len(x), generator=g)
    refs, rest = order[: count * n], order[count * n :]
    gens = rest[kept[rest]][: count * n]
    if len(gens) < count * n:
        raise SystemExit(f"{name}: {len(gens)} kept images left for {count} sets of {n}")
    for s in range(count):
        ref, gen = refs[s * n : (s + 1) * n], gens[s * n : (s + 1) * n]
        yield x[ref], y[ref], x[gen]


def read_set(ref: torch.Tensor, labels: torch.Tensor, gen: torch.Tensor) -> dict:
    metric = FINCNovelty(sigma="auto")
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    reading = metric.reading()
    summary = reading.summary()
    headline = reading.headline(summary)
    count = int(summary["missing_modes"])
    classes: list[int] = []
    if count:
        grouped = reading.grouped_modes([(ref, torch.arange(len(ref)))], k=count, per_mode=20, missing=True)
        for top, _ in grouped.samples:
            classes.append(int(labels[top].mode().values))
    out = {key: float(value) for key, value in headline.items()}
    out.update(missing=float(summary["missing"]), missing_se=float(summary["missing_se"]), classes=sorted(set(classes)),
               rows=len(classes), novel=float(summary[""]), novel_se=float(summary["se"]))
    del metric, reading
    gc.collect()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=["digits", "fashion"], choices=sorted(DROPPED))
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--sets", type=int, default=10)
    parser.add_argument("--n", type=int, default=1500)
    args = parser.parse_args()
    for name in args.data:
        x, y = load(name, args.fashion)
        print(f"\n## {name}: drop {DROPPED[name]}, {args.sets} sets of {args.n} + {args.n}\n")
        rows = []
        print("| set | missing mass (se) | missing modes | rows | classes named | novel mass (se) | novel modes |")
        print("|---|---|---|---|---|---|---|")
        for i, (ref, labels, gen) in enumerate(sets(name, x, y, args.sets, args.n)):
            row = read_set(ref, labels, gen)
            rows.append(row)
            print(f"| {i} | {row['missing']:.4f} ({row['missing_se']:.4f}) | {row['missing_modes']:.0f} | {row['rows']} | "
                  f"{row['classes']} | {row['novel']:.4f} ({row['novel_se']:.4f}) | {row['novel_modes']:.0f} |", flush=True)
        keys = sorted(key for key in rows[0] if key != "classes")
        print("\n| quantity | mean | spread (sd) | mean se | se / sd |")
        print("|---|---|---|---|---|")
        for key in keys:
            if key.endswith("_se"):
                continue
            values = [row[key] for row in rows]
            sd = statistics.stdev(values)
            se = [row[key + "_se"] for row in rows] if key + "_se" in rows[0] else None
            mean_se = statistics.mean(se) if se else float("nan")
            ratio = mean_se / sd if se and sd > 0 else float("nan")
            print(f"| {key} | {statistics.mean(values):.4f} | {sd:.4f} | {mean_se:.4f} | {ratio:.2f} |")
        named = collections.Counter(tuple(row["classes"]) for row in rows)
        common, times = named.most_common(1)[0]
        print(f"\nclasses named: {dict(named)}; the most common set {list(common)} in {times} of {len(rows)} sets "
              f"(goal >= 8 of 10)")


if __name__ == "__main__":
    main()
