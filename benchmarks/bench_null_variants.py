"""FINC's null at rho != 1, against two variants, on same-distribution splits: how close is each to the law of the top
eigenvalue it stands for, and how often does it flag a split?

Each split takes ``n_x`` + ``n_y`` disjoint rows of one data set (``L = C_x - rho C_y``, both sides one
distribution: the null the level is stated for), with sigma the ``"auto"`` rule on the ``x`` rows, and draws the
null three ways from ``A`` (= 3) multiplier draws, each giving 2 draws (``s = +-1``) and a Student-t threshold with
``nu = A`` at level 0.05, as `functional/finc_null.py` does:

- ``library``: ``(1 - rho) C_pool + s c E_a`` with the generated (``y``) side's draws ``E_a`` and
  ``c = sqrt(n_y (1/n_x + rho^2/n_y))`` (`null_model`; here with i.i.d. phases, the library's multipliers at
  ``ratio`` -> infinity);
- ``pooled``: the same with the draws of both sides pooled, ``(1 - rho) C_pool + s k E_pool,a``,
  ``k = (sqrt(n_y/n_x) + rho sqrt(n_x/n_y)) / (n_x + n_y)`` (a random relabelling of the pooled samples, linearised);
- ``von_mises``: non-negative multipliers ``exp(beta cos theta) / I_0(beta)`` (mean 1, variance ~0.92 at beta =
  1.65) centred, ``(1 - rho) C_pool + sqrt(n_y/n_x) E_a - rho E_b`` over ordered pairs ``a != b`` (the reference's
  noise from one draw, the generated side's from another: each side's noise keeps its own skew).

Printed per data set: the top eigenvalue's mean over the splits and its normal 95 % point, each null's mean and
threshold (averaged over splits) and the splits it flags.

    python benchmarks/bench_null_variants.py --embedding pixels clip --splits 10 --r 512
    python benchmarks/bench_null_variants.py --data digits --splits 20 --r 256 --n 900 630
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.kernels import median_bandwidth
from lightning_spectral.metrics import FINCNovelty

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dropped_modes import digits, embed, fashion  # noqa: E402

DRAWS = 3
BETA = 1.65


def top(matrix: torch.Tensor) -> float:
    return float(torch.linalg.eigvalsh(matrix)[-1])


def second_moment(features: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``(1/n) sum_i w_i phi_i phi_i^T`` (``w = 1`` by default)."""
    weighted = features if weights is None else features * weights[:, None]
    return weighted.T @ features / len(features)


def null_draws(kind: str, fx, fy, rho: float, generator: torch.Generator) -> list[float]:
    """The 2A (or A(A-1)) draws of ``lambda_max`` of one null for the sides' features ``fx`` (n_x, D), ``fy``."""
    nx, ny = len(fx), len(fy)
    pooled = (nx * second_moment(fx) + ny * second_moment(fy)) / (nx + ny)
    shift = (1 - rho) * pooled
    if kind == "von_mises":
        norm = float(torch.special.i0(torch.tensor(BETA, dtype=torch.float64)))
        noise = []
        for _ in range(DRAWS):
            w = torch.exp(BETA * torch.cos(torch.rand(ny, generator=generator, dtype=torch.float64) * 2 * math.pi))
            w = w / norm
            noise.append(second_moment(fy, w - w.mean()))
        return [top(shift + math.sqrt(ny / nx) * noise[a] - rho * noise[b])
                for a in range(DRAWS) for b in range(DRAWS) if a != b]
    draws = []
    for _ in range(DRAWS):
        if kind == "library":
            w = math.sqrt(2) * torch.cos(torch.rand(ny, generator=generator, dtype=torch.float64) * 2 * math.pi)
            noise, scale = second_moment(fy, w - w.mean()), math.sqrt(ny * (1 / nx + rho * rho / ny))
        else:
            both = torch.cat([fx, fy])
            w = math.sqrt(2) * torch.cos(torch.rand(nx + ny, generator=generator, dtype=torch.float64) * 2 * math.pi)
            noise = second_moment(both, w - w.mean()) * (nx + ny)
            scale = (math.sqrt(ny / nx) + rho * math.sqrt(nx / ny)) / (nx + ny)
        draws += [top(shift + sign * scale * noise) for sign in (1.0, -1.0)]
    return draws


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--data", choices=["fashion", "digits"], default="fashion")
    parser.add_argument("--embedding", nargs="+", default=["pixels", "clip"])
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--r", type=int, default=512)
    parser.add_argument("--n", type=int, nargs=2, default=[2000, 2000], help="n_x n_y")
    parser.add_argument("--rho", type=float, default=2.0)
    parser.add_argument("--cache", default="/tmp/modes")
    args = parser.parse_args()
    torch.set_num_threads(2)
    images, _ = fashion(args.fashion) if args.data == "fashion" else digits()
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    quantile = student_t_isf(0.05, DRAWS) * math.sqrt(1 + 1 / DRAWS)
    nx, ny = args.n
    for name in args.embedding if args.data == "fashion" else ["pixels"]:
        x = embed(name, images, Path(args.cache)).double()
        observed, found = [], {kind: [] for kind in ("library", "pooled", "von_mises")}
        generator = torch.Generator().manual_seed(5)
        for s in range(args.splits):
            order = torch.randperm(len(x), generator=torch.Generator().manual_seed(900 + s))
            a, b = x[order[:nx]], x[order[nx : nx + ny]]
            feature_map = FINCNovelty(0.5 * median_bandwidth(a, max_samples=2000, seed=0), n_frequencies=args.r,
                                      seed=s).feature_map
            fx, fy = feature_map(a).double(), feature_map(b).double()
            value = top(second_moment(fx) - args.rho * second_moment(fy))
            observed.append(value)
            for kind, rows in found.items():
                draws = torch.tensor(null_draws(kind, fx, fy, args.rho, generator))
                threshold = float(draws.mean()) + float(draws.std()) * quantile
                rows.append((float(draws.mean()), threshold, value > threshold))
        values = torch.tensor(observed)
        row = {"data": args.data, "embedding": name, "r": args.r, "n": args.n, "splits": args.splits,
               "top_mean": round(float(values.mean()), 5),
               "top_q95": round(float(values.mean() + 1.645 * values.std()), 5)}
        for kind, rows in found.items():
            row[kind] = {"mean": round(sum(m for m, _, _ in rows) / len(rows), 5),
                         "threshold": round(sum(t for _, t, _ in rows) / len(rows), 5),
                         "flagged": f"{sum(f for _, _, f in rows)}/{len(rows)}"}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
