"""Which FKEA diversity scores converge: the t-truncated Vendi score, Vendi-1 and RKE as the sample size n and the
number of random features 2r grow, on real images the library was not tuned on.

    python benchmarks/bench_truncated_vendi.py n [--sizes 1000 2000 4000] [--features 4096] [--t 50 100 200]
    python benchmarks/bench_truncated_vendi.py r [--n 2048] [--features 2048 4096 8192] [--t 50 100 200]
    python benchmarks/bench_truncated_vendi.py drop [--n 2000] [--features 2048] [--classes 0 5 9]

``drop`` asks whether a score sees a class go: ``n`` images of all ten classes against ``n`` images of the nine
others (one class removed, 10 % of the data), each draw another subset and frequency seed, paired (both sides of a
draw share the seed); per score, the change in % (mean over draws ± its standard error) beside the score's
draw-to-draw standard deviation in % at fixed n and 2r (its noise): a change well beyond the noise is seen.

Options: ``--data fashion`` (default) or ``digits``; ``--sigma-scale`` (default 1: the median rule; 0.5 for a
finer kernel); ``--draws`` (default 2: each draw another random subset and another frequency seed); ``--exact``
(also the exact n x n scores, for n <= 4,000); ``--per-draw`` (each draw's scores, to pair the draws of separate
runs: runs with the same ``--draws`` draw the same subsets and frequency seeds).

Data:

- ``fashion``: Fashion-MNIST (Xiao et al. 2017), its 60,000 training images as raw pixels / 255 (d = 784), read from
  ``--fashion`` (the directory of the ``*-ubyte.gz`` files; Debian's ``dataset-fashion-mnist`` package installs them
  in /usr/share/datasets/fashion-mnist). Not shipped with the library.
- ``digits``: scikit-learn's 1,797 digits, pixels / 16 (d = 64); n <= 1,797.

sigma: ``--sigma-scale`` x the median pairwise distance (``median_bandwidth``) of 1,000 held-out images (Fashion-MNIST's
test set; for the digits, 1,000 of them, seed 99).

Every score is computed as ``FKEAVendi(sigma, r, alpha=[1, 2], truncation=t)`` computes it: the spectrum of the
(2r x 2r) random-feature covariance ``C = Phi^T Phi / n``, here read from the smaller of ``Phi^T Phi / n`` and
``Phi Phi^T / n`` (the same non-zero eigenvalues), then ``vendi_from_spectrum`` (tests/test_truncated_vendi.py checks
that the two routes agree). The table gives the mean over the draws, the spread (max - min) across draws in %, and the
change from the first to the last size in % (the mean over draws of each draw's change: a draw keeps its subset, nested
in n, and its frequency seed; ± its standard error). Eigenvalues in float32, as ``FKEAVendi``'s default precision
from 2r = 4096 (scores within 0.002 % of float64's).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

from lightning_spectral.algebra.eigen import psd_eigenvalues
from lightning_spectral.functional.fkea import vendi_from_spectrum
from lightning_spectral.kernels import GaussianRFF, gaussian_kernel, median_bandwidth

sys.path.insert(0, str(Path(__file__).resolve().parent))
from idx_files import read_idx  # noqa: E402


def load(name: str, fashion: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the pool the draws come from, its labels, the held-out images the bandwidth is chosen on), float64."""
    if name == "digits":
        data = load_digits()
        x = torch.tensor(data.data / 16.0)
        held = torch.randperm(len(x), generator=torch.Generator().manual_seed(99))[:1000]
        return x, torch.tensor(data.target), x[held]
    root = Path(fashion)
    train = torch.tensor(read_idx(root / "train-images-idx3-ubyte.gz").reshape(60000, -1) / 255.0)
    labels = torch.tensor(read_idx(root / "train-labels-idx1-ubyte.gz").astype(np.int64))
    test = torch.tensor(read_idx(root / "t10k-images-idx3-ubyte.gz").reshape(10000, -1) / 255.0)
    return train, labels, test[:1000]


def scores(x: torch.Tensor, sigma: float, r: int, seed: int, ts: list[int]) -> dict[str, float]:
    """Vendi-1, RKE and the t-truncated Vendi-1 of the FKEA spectrum of ``x`` (2r features, frequency ``seed``)."""
    phi = GaussianRFF(x.shape[1], r, sigma, seed)(x)
    n = x.shape[0]
    gram = phi @ phi.T if n <= 2 * r else phi.T @ phi
    spectrum = psd_eigenvalues(gram / n, precision="float32")  # as FKEAVendi's "auto" from 2r = 4096
    return spectrum_scores(spectrum, ts)


def spectrum_scores(spectrum: torch.Tensor, ts: list[int]) -> dict[str, float]:
    plain = vendi_from_spectrum(spectrum, [1, 2])
    out = {"vendi1": float(plain[1]), "rke": float(plain[2])}
    for t in ts:
        out[f"t={t}"] = float(vendi_from_spectrum(spectrum, 1, truncation=t))
    return out


def exact_scores(x: torch.Tensor, sigma: float, ts: list[int]) -> dict[str, float]:
    """The same scores of the exact n x n normalised kernel matrix ``K / n``."""
    return spectrum_scores(psd_eigenvalues(gaussian_kernel(x, sigma=sigma) / x.shape[0]), ts)


def sweep(args: argparse.Namespace, pool: torch.Tensor, sigma: float) -> None:
    configs = [(n, args.features[0]) for n in args.sizes] if args.which == "n" else [(args.n, f) for f in args.features]
    columns = ["vendi1", "rke", *[f"t={t}" for t in args.t]]
    print(f"| n | 2r | {' | '.join(columns)} | seconds |")
    print("|" + "---|" * (len(columns) + 3))
    means, per_draw = [], []
    exact_rows = []
    for n, features in configs:
        if n > len(pool):
            raise SystemExit(f"n = {n} exceeds the {len(pool)} samples of the data")
        start = time.perf_counter()
        draws = []
        for draw in range(args.draws):
            rows = torch.randperm(len(pool), generator=torch.Generator().manual_seed(1000 + draw))[:n]
            draws.append(scores(pool[rows], sigma, features // 2, seed=draw, ts=args.t))
            if args.exact and draw == 0 and n <= 4000:
                exact_rows.append((n, exact_scores(pool[rows], sigma, args.t)))
        mean = {c: float(np.mean([d[c] for d in draws])) for c in columns}
        spread = {c: 100 * (max(d[c] for d in draws) - min(d[c] for d in draws)) / mean[c] for c in columns}
        means.append(mean)
        per_draw.append(draws)
        if args.per_draw:
            for draw, values in enumerate(draws):
                print(f"draw {draw}, n {n}, 2r {features}: " + ", ".join(f"{c} {values[c]:.4f}" for c in columns))
        cells = " | ".join(f"{mean[c]:.2f} (±{spread[c] / 2:.1f} %)" for c in columns)
        print(f"| {n} | {features} | {cells} | {time.perf_counter() - start:.1f} |", flush=True)
    def paired(c: str) -> str:  # draw d keeps its subset (nested in n) and its frequency seed across the sizes
        ratios = np.array([100 * (b[c] / a[c] - 1) for a, b in zip(per_draw[0], per_draw[-1], strict=True)])
        error = ratios.std(ddof=1) / np.sqrt(len(ratios)) if len(ratios) > 1 else float("nan")
        return f"{ratios.mean():+.1f} % (± {error:.1f})"

    if len(configs) > 1:
        print(f"| change, first to last (paired, ± s.e.) | | {' | '.join(paired(c) for c in columns)} | |")
    for n, exact in exact_rows:
        print(f"exact n x n, n = {n} (draw 0): " + ", ".join(f"{c} {exact[c]:.2f}" for c in columns))


def drop(args: argparse.Namespace, pool: torch.Tensor, labels: torch.Tensor, sigma: float) -> None:
    """Each of ``args.classes`` removed in turn: the paired change of every score and its draw-to-draw noise."""
    columns = ["vendi1", "rke", *[f"t={t}" for t in args.t]]
    features = args.features[0]
    print(f"| class removed | {' | '.join(columns)} |")
    print("|" + "---|" * (len(columns) + 1))
    full_scores = []
    for c in args.classes:
        changes = {k: [] for k in columns}
        others = torch.nonzero(labels != c).squeeze(1)
        for draw in range(args.draws):
            generator = torch.Generator().manual_seed(1000 + draw)
            full = scores(pool[torch.randperm(len(pool), generator=generator)[: args.n]], sigma, features // 2, draw,
                          args.t)
            kept = others[torch.randperm(len(others), generator=generator)[: args.n]]
            dropped = scores(pool[kept], sigma, features // 2, draw, args.t)
            full_scores.append(full)
            for k in columns:
                changes[k].append(100 * (dropped[k] / full[k] - 1))
        cells = []
        for k in columns:
            values = np.array(changes[k])
            error = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
            cells.append(f"{values.mean():+.2f} % (± {error:.2f})")
        print(f"| {c} | {' | '.join(cells)} |", flush=True)
    noise = []
    for k in columns:
        values = np.array([s[k] for s in full_scores])
        noise.append(f"{100 * values.std(ddof=1) / values.mean():.2f} %")
    print(f"| noise: draw-to-draw s.d. of the full set's score ({len(full_scores)} draws) | {' | '.join(noise)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["n", "r", "drop"],
                        help="grow the sample size (n) or the random features (r), or remove a class (drop)")
    parser.add_argument("--data", default="fashion", choices=["fashion", "digits"])
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000], help="n, with `n`")
    parser.add_argument("--n", type=int, default=2048, help="the sample size, with `r`")
    parser.add_argument("--features", type=int, nargs="+", default=None, help="2r (one value with `n`)")
    parser.add_argument("--t", type=int, nargs="+", default=[50, 100, 200], help="truncations")
    parser.add_argument("--sigma-scale", type=float, default=1.0, help="times the median pairwise distance")
    parser.add_argument("--draws", type=int, default=2)
    parser.add_argument("--per-draw", action="store_true", help="also each draw's scores (to pair runs)")
    parser.add_argument("--exact", action="store_true", help="also the exact n x n scores (n <= 4000)")
    parser.add_argument("--classes", type=int, nargs="+", default=[0, 5, 9], help="the classes removed, with `drop`")
    args = parser.parse_args()
    args.features = args.features or ([4096] if args.which == "n" else [2048] if args.which == "drop"
                                      else [2048, 4096, 8192])
    pool, labels, held = load(args.data, args.fashion)
    sigma = args.sigma_scale * median_bandwidth(held)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"data: {args.data} ({len(pool)} x {pool.shape[1]}), sigma = {args.sigma_scale} x median = {sigma:.3f}, "
          f"{args.draws} draws; cells: mean (± half the spread across draws)")
    if args.which == "drop":
        drop(args, pool, labels, sigma)
    else:
        sweep(args, pool, sigma)


if __name__ == "__main__":
    main()
