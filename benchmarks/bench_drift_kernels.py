"""Which kernel makes DriftMonitor's top lost cluster one forgotten class? A diagnostic of the forgetting case.

    python benchmarks/bench_drift_kernels.py                              # Fashion-MNIST, seeds 0 1 2, both splits
    python benchmarks/bench_drift_kernels.py --seeds 3 4 5 --splits kept-0-4

The forgetting case of `bench_forgetting.py` (an encoder pretrained on all ten classes, then fine-tuned with a new
5-way head on half of them; ``--splits`` says which half is kept), for an MLP and a CNN encoder. For each run this
script embeds the 2,000 held-out probe images with the start encoder and the fine-tuned one and reads the top lost
cluster (the top eigenvector of ``(K_start - K_now) / n``, SPEC, Jalali et al. 2024 Sec. 3) with exact n x n kernels:

- ``cosine``: DriftMonitor's default kernel;
- ``gaussian:f``: a Gaussian kernel whose bandwidth is ``f`` x the median pairwise distance of each embedding;
- ``sphere:f``: the same on the L2-normalised embeddings, ``exp((cos - 1) / s^2)``;

and ``sphere:f@r``: that kernel through DriftMonitor's own route (`SPECDivergence`, ``r`` random frequencies per
embedding), to see whether the random features keep the cluster. The top lost cluster's purity is the share of its
20 largest eigenvector entries in their commonest class, and "forgotten" says whether that class is one of the
fine-tuning's dropped half (``--probe-size`` reads them on a seeded subsample of the probe). The per-class
drop of the leave-one-out 10-NN accuracy (cosine) says what the encoder
actually lost: a run whose kept classes lose as much as the dropped ones is not a half-forgetting case.

Prints one row per run and kernel, then per kernel the runs whose top lost cluster is >= 70 % one forgotten class.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

from lightning_spectral.functional import spec
from lightning_spectral.kernels import median_bandwidth
from lightning_spectral.metrics import SPECDivergence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forgetting import add_training_arguments, fine_tune, knn_hits, load, pretrained  # noqa: E402

PURITY_TARGET = 0.7


def embeddings(encoder: str, seed: int, kept_low: bool, data, args) -> tuple[torch.Tensor, torch.Tensor]:
    """The probe's (start, fine-tuned) embeddings of one run, (N, 32) each."""
    x, y, probe_x, _ = data
    with tempfile.TemporaryDirectory() as root:
        module = pretrained(x, y, seed, encoder, args, root)
        with torch.no_grad():
            start = module.encoder(probe_x)
        fine_tune(module, x, y, y < 5 if kept_low else y >= 5, args, root)
        with torch.no_grad():
            now = module.encoder(probe_x)
    return start, now


def knn_per_class(z: torch.Tensor, y: torch.Tensor, k: int = 10) -> torch.Tensor:
    """Leave-one-out k-NN accuracy (`bench_forgetting.knn_hits`) of each class, (C,)."""
    right = knn_hits(z, y, k).double()
    return torch.stack([right[y == c].mean() for c in range(10)])


def top_lost_members(start: torch.Tensor, now: torch.Tensor, kernel: str) -> torch.Tensor:
    """The top lost cluster's 20 members under ``kernel`` (``cosine``, ``gaussian:f``, ``sphere:f``, ``sphere:f@r``)."""
    if kernel == "cosine":
        return spec(start, now, "cosine", method="exact", k=1).clusters_a.members[0]
    name, _, rest = kernel.partition(":")
    factor, _, frequencies = rest.partition("@")
    if name == "sphere":
        start, now = nn.functional.normalize(start, dim=1), nn.functional.normalize(now, dim=1)
    sigmas = float(factor) * median_bandwidth(start), float(factor) * median_bandwidth(now)
    if not frequencies:
        return spec(start, now, "gaussian", *sigmas, method="exact", k=1).clusters_a.members[0]
    metric = SPECDivergence("gaussian", *sigmas, n_frequencies=int(frequencies), noise_draws=0)
    ids = torch.arange(len(start))
    batches = [((start[i : i + 128], now[i : i + 128]), ids[i : i + 128]) for i in range(0, len(start), 128)]
    for (a, b), _ in batches:
        metric.update(a, b)
    return metric.reading().top_samples(batches, k=1, sign=1, per_cluster=20)[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_training_arguments(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--encoders", nargs="+", choices=("mlp", "cnn"), default=["mlp", "cnn"])
    parser.add_argument("--splits", nargs="+", choices=("kept-0-4", "kept-5-9"), default=["kept-0-4", "kept-5-9"])
    parser.add_argument("--kernels", nargs="+",
                        default=["cosine", "gaussian:0.5", "gaussian:0.1", "sphere:0.5", "sphere:0.15",
                                 "sphere:0.15@512", "sphere:0.15@256"])
    parser.add_argument("--probe-size", type=int, default=None,
                        help="read the kernels on this many probe rows (a seeded subsample; default: all)")
    parser.add_argument("--out", default="drift_kernels.json")
    args = parser.parse_args()
    data = load(args.data, args.fashion)
    probe_y = data[3]
    kept_rows = torch.randperm(len(probe_y), generator=torch.Generator().manual_seed(0))[: args.probe_size]
    probe_y = probe_y[kept_rows]
    rows = []
    print("split encoder seed | 10-NN drop: kept / forgotten classes (mean) | "
          "kernel: top lost class, purity, forgotten")
    for split in args.splits:
        forgotten = torch.arange(5, 10) if split == "kept-0-4" else torch.arange(0, 5)
        for encoder in args.encoders:
            for seed in args.seeds:
                start, now = embeddings(encoder, seed, split == "kept-0-4", data, args)
                start, now = start[kept_rows], now[kept_rows]
                drop = knn_per_class(start, probe_y) - knn_per_class(now, probe_y)
                lost = torch.isin(torch.arange(10), forgotten)
                row = {"split": split, "encoder": encoder, "seed": seed, "drop_per_class": drop.tolist(),
                       "drop_kept": float(drop[~lost].mean()), "drop_forgotten": float(drop[lost].mean())}
                for kernel in args.kernels:
                    classes = probe_y[top_lost_members(start, now, kernel)]
                    commonest = int(classes.mode().values)
                    row[kernel] = {"class": commonest, "purity": float((classes == commonest).double().mean()),
                                   "forgotten": bool(commonest in forgotten)}
                rows.append(row)
                cells = " | ".join(
                    f"{k}: {row[k]['class']} {row[k]['purity']:.2f} {'F' if row[k]['forgotten'] else 'kept'}"
                    for k in args.kernels
                )
                print(f"{split} {encoder} {seed} | {row['drop_kept']:.2f} / {row['drop_forgotten']:.2f} | {cells}",
                      flush=True)
    print(f"\nruns whose top lost cluster is >= {PURITY_TARGET:.0%} one forgotten class")
    for kernel in args.kernels:
        cells = []
        for encoder in args.encoders:
            chosen = [r for r in rows if r["encoder"] == encoder]
            met = sum(r[kernel]["forgotten"] and r[kernel]["purity"] >= PURITY_TARGET for r in chosen)
            cells.append(f"{encoder} {met} of {len(chosen)}")
        print(f"{kernel}: " + ", ".join(cells))
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
