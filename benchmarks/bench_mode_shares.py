"""Does a missing mode's share read the share of the class it stands for? FINC's missing modes on Fashion-MNIST and the
digits, one class held out of the generated side at a known prevalence in the reference.

Per trial: the held-out class ``h`` (trial mod 10) makes up ``p`` of the reference (the other classes share the
rest at random), the generated side has every class but ``h``. The top significant missing mode whose top 20
reference samples are mostly ``h`` is read two ways:

- ``share``: ``FINCNovelty.mode_shares`` (``summary()["missing_mode_share"]``, the CLI's per-mode JSON), the
  two-sided moment estimate of ``functional/mode_shares.py``;
- ``cross-fitted``: the same estimate with the eigenvector of one half of each side and the moments of the other
  half (is the over-read the direction fitting the samples it is read on?);
- ``before``: the previous estimate, eigenvalue x r / (median top-20 score)^2.

Then FKEA's own modes of a reference of all ten classes (``n`` rows): per mode among the top 10 whose top 20 samples
are at least 80 % one class, the share counted in the galleries' pass against that class's share.

Data as ``bench_finc_fpr.py``: digits (64 pixels / 16) and Fashion-MNIST (784 pixels / 255 on 32 principal axes of
its test images), sigma = 0.5 x the median pairwise distance of 1,000 held-out rows.

    python benchmarks/bench_mode_shares.py --trials 10 --fashion /usr/share/datasets/fashion-mnist
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_finc_fpr import source  # noqa: E402

from lightning_spectral.functional.mode_shares import two_sided_shares  # noqa: E402
from lightning_spectral.metrics import FINCNovelty, FKEAVendi  # noqa: E402


def sides(x, y, held, p, n, trial):
    g = torch.Generator().manual_seed(7000 + trial)
    order = torch.randperm(len(x), generator=g)
    x, y = x[order], y[order]
    shared, novel = (y != held).nonzero().flatten(), (y == held).nonzero().flatten()
    k = int(round(p * n))
    ref = torch.cat([shared[: n - k], novel[:k]])
    gen = shared[n - k : 2 * n - k]
    return x[gen], x[ref], y[ref]


def cross_fitted(gen, ref, ref_y, held, sigma, args, trial):
    """The share read with the eigenvector of one half of each side (its first missing mode mostly ``held``) and the
    moments of the other half: no sample both chooses the direction and is counted along it. ``None`` when that
    half names no such mode."""
    g = torch.Generator().manual_seed(trial)
    ref_order, gen_order = torch.randperm(len(ref), generator=g), torch.randperm(len(gen), generator=g)
    halves = []
    for part in (0, 1):
        metric = FINCNovelty(sigma=sigma, n_frequencies=args.r, seed=trial, rho=args.rho)
        metric.update(gen[gen_order[part::2]], real=False)
        metric.update(ref[ref_order[part::2]], real=True)
        halves.append(metric)
    fit, read = halves
    samples = fit.reading().top_samples([(ref, torch.arange(len(ref)))], 5, 20, missing=True)
    named = [i for i, (ids, _) in enumerate(samples) if (ref_y[ids] == held).double().mean() >= 0.5]
    if not named:
        return None
    vector = fit.reading().missing_modes(5).eigenvectors[:, named[:1]]
    x, y = read.reading().pooled(real=True), read.reading().pooled(real=False)
    return float(two_sided_shares(vector, x.mean(), x.second_moment(), y.mean(), y.second_moment())[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", default=["digits", "fashion"], choices=["digits", "fashion"])
    parser.add_argument("--prevalence", nargs="+", type=float, default=[0.05, 0.1, 0.2])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--r", type=int, default=512)
    parser.add_argument("--rho", type=float, default=2.0, help="FINC's rho (the default, 2; the first table used 1)")
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    print(f"2r = {2 * args.r}, rho = {args.rho:g}; each cell: mean (min - max) over the trials whose held-out class "
          "was named (a significant missing mode, top 20 mostly that class)")
    print("| data | n per side | true share | named | share | cross-fitted | before |")
    print("|---|---|---|---|---|---|---|")
    for data in args.data:
        x, y, sigma = source(data, args.fashion)
        n = 800 if data == "digits" else 3000
        for p in args.prevalence:
            rows, start = {"share": [], "cross-fitted": [], "before": []}, time.perf_counter()
            named = 0
            for trial in range(args.trials):
                held = trial % 10
                gen, ref, ref_y = sides(x.float(), y, held, p, n, trial)
                metric = FINCNovelty(sigma=sigma, n_frequencies=args.r, seed=trial, rho=args.rho)
                metric.update(gen, real=False)
                metric.update(ref, real=True)
                modes = metric.reading().missing_modes(5)
                count = int(modes.significant.sum())
                if count == 0:
                    continue
                samples = metric.reading().top_samples([(ref, torch.arange(len(ref)))], count, 20, missing=True)
                shares = metric.reading().mode_shares(count, missing=True)
                for i, (ids, scores) in enumerate(samples):
                    if (ref_y[ids] == held).double().mean() >= 0.5:
                        named += 1
                        rows["share"].append(float(shares[i]))
                        before = float(modes.eigenvalues[i]) * args.r / float(scores.median()) ** 2
                        rows["before"].append(min(max(before, 0.0), 1.0))
                        crossed = cross_fitted(gen, ref, ref_y, held, sigma, args, trial)
                        if crossed is not None:
                            rows["cross-fitted"].append(crossed)
                        break
            truth = int(round(p * n)) / n
            cells = [f"{sum(v) / len(v):.3f} ({min(v):.3f} - {max(v):.3f})" if v else "-" for v in rows.values()]
            print(f"| {data} | {n} | {truth:.3f} | {named} / {args.trials} | " + " | ".join(cells) + " |",
                  f"<!-- {time.perf_counter() - start:.0f} s -->", flush=True)

    print("\nFKEA's own modes (top 10 of a reference of all ten classes; modes whose top 20 are >= 80 % one class)")
    print("| data | n | mode | class (of top 20) | true share of the class | counted share |")
    print("|---|---|---|---|---|---|")
    for data in args.data:
        x, y, sigma = source(data, args.fashion)
        n = min(len(x), 3000)
        x, y = x[:n].float(), y[:n]
        metric = FKEAVendi(sigma=sigma, n_frequencies=args.r)
        metric.update(x)
        samples, shares = metric.reading()._top_samples([(x, torch.arange(n))], 10, 20)
        for i, (ids, _) in enumerate(samples):
            label = int(y[ids].mode().values)
            purity = int((y[ids] == label).sum())
            if purity >= 16:
                truth = float((y == label).double().mean())
                print(f"| {data} | {n} | {i + 1} | {label} ({purity}) | {truth:.3f} | {float(shares[i]):.3f} |")


if __name__ == "__main__":
    main()
