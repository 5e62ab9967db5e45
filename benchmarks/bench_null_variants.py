"""FINC's null at rho != 1, against variants, on same-distribution splits: how close is each to the law of the top
eigenvalue it stands for, and how often does it flag a split?

Each split takes ``n_x`` + ``n_y`` disjoint rows of one data set (``L = C_x - rho C_y``, both sides one
distribution: the null the level is stated for), with sigma the ``"auto"`` rule on the ``x`` rows (``--sigma-from
pooled``: on both sides' rows), and draws each null from ``A`` (``--draws``, 3 by default) multiplier draws,
each giving 2 draws (``s = +-1``), and a Student-t threshold with ``nu = A`` at level 0.05, as
`functional/finc_null.py` does:

- ``unconditional``: ``(1 - rho) C_pool + s c E_a`` with the generated (``y``) side's draws ``E_a`` and
  ``c = sqrt(n_y (1/n_x + rho^2/n_y))`` (`noise_scale`: the library's null before `null_scale`; here with i.i.d.
  phases, the library's multipliers at ``ratio`` -> infinity);
- ``conditional``: the same with ``c = beta sqrt(n_y (1/n_x + 1/n_y))``, ``beta = 1 + (rho - 1) n_x / (n_x + n_y)``
  (`null_scale`, the library's null): ``C_x - rho C_y = (1 - rho) C_pool + beta (C_x - C_y)``, and under the null
  the noise of ``C_pool`` and of ``C_x - C_y`` are uncorrelated, so given the observed ``C_pool`` only
  ``beta (C_x - C_y)`` is noise (``unconditional`` counts ``C_pool``'s noise a second time);
- ``pooled``: the draws of both sides pooled, ``(1 - rho) C_pool + s k E_pool,a``,
  ``k = (sqrt(n_y/n_x) + rho sqrt(n_x/n_y)) / (n_x + n_y)`` (a random relabelling of the pooled samples, linearised:
  the covariance of ``beta (C_x - C_y)``); ``rademacher``: the same with multipliers ``+-1``; ``bernoulli``: with
  the relabelling's own two-point law (``1`` with probability ``n_x / (n_x + n_y)``, centred and scaled; ``s = +1``
  only, 2A draws);
- ``von_mises``: non-negative multipliers ``exp(kappa cos theta) / I_0(kappa)`` (mean 1, variance ~0.92 at
  kappa = 1.65) centred, ``(1 - rho) C_pool + sqrt(n_y/n_x) E_a - rho E_b`` over ordered pairs ``a != b`` (the
  reference's noise from one draw, the generated side's from another: each side's noise keeps its own skew);
- ``permutation``: 2A random relabellings of the pooled rows, ``lambda_max(C_x* - rho C_y*)`` (the exact law of the
  statistic given the pooled rows when sigma comes from both sides; not a streaming null).

Printed per data set: the top eigenvalue's mean, sd and normal 95 % point over the splits; per null the mean and
sd of its draws, its threshold and the splits it flags, and the same for the Student-t rule on the draws' logarithms
(``log_threshold``, ``log_flagged``: a right-skewed law; the plain threshold when a draw is <= 0). ``--permutations K``
adds, per split, K relabellings, averaged over the splits: the law's mean, sd, skewness and 95 % point, and the splits
whose exact permutation p-value ``(1 + #{relabellings >= value}) / (K + 1)`` is <= 0.05 (``flagged_at_0.05``). All
nulls and relabellings share one random generator: the set and order of ``--nulls`` and ``--permutations`` change
each null's draws.

    python benchmarks/bench_null_variants.py --embedding clip pixels --splits 40 --first-split 40 --r 512 \
        --nulls unconditional conditional pooled rademacher permutation
    python benchmarks/bench_null_variants.py --data digits --splits 40 --first-split 20 --r 256 --n 900 630 \
        --nulls unconditional conditional pooled rademacher permutation
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.metrics import FINCNovelty

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dropped_modes import digits, embed, fashion, rule_sigma  # noqa: E402

DRAWS = 3
NULLS = ("unconditional", "pooled", "von_mises", "conditional", "permutation", "rademacher", "bernoulli")
KAPPA = 1.65


def top(matrix: torch.Tensor) -> float:
    return float(torch.linalg.eigvalsh(matrix)[-1])


def second_moment(features: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``(1/n) sum_i w_i phi_i phi_i^T`` (``w = 1`` by default)."""
    weighted = features if weights is None else features * weights[:, None]
    return weighted.T @ features / len(features)


def relabelled_top(both: torch.Tensor, nx: int, rho: float, generator: torch.Generator) -> float:
    """``lambda_max(C_x* - rho C_y*)`` for a random relabelling of the pooled features ``both``: the first ``nx`` rows
    of a random order are ``x``."""
    order = torch.randperm(len(both), generator=generator)
    return top(second_moment(both[order[:nx]]) - rho * second_moment(both[order[nx:]]))


def permutation_law(law: torch.Tensor, value: float) -> tuple[float, ...]:
    """Of K relabellings' values: the 95 % point, the exact p-value ``(1 + #{law >= value}) / (K + 1)``, the mean,
    sd and skewness."""
    mean, sd = law.mean(), law.std()
    return (float(law.quantile(0.95)), float(((law >= value).sum() + 1) / (len(law) + 1)), float(mean), float(sd),
            float(((law - mean) ** 3).mean() / sd**3))


def null_draws(kind: str, fx, fy, rho: float, generator: torch.Generator, draws_a: int = DRAWS) -> list[float]:
    """The 2A (or A(A-1)) draws of ``lambda_max`` of one null for the sides' features ``fx`` (n_x, D), ``fy``."""
    nx, ny = len(fx), len(fy)
    pooled = (nx * second_moment(fx) + ny * second_moment(fy)) / (nx + ny)
    shift = (1 - rho) * pooled
    if kind == "von_mises":
        norm = float(torch.special.i0(torch.tensor(KAPPA, dtype=torch.float64)))
        noise = []
        for _ in range(draws_a):
            w = torch.exp(KAPPA * torch.cos(torch.rand(ny, generator=generator, dtype=torch.float64) * 2 * math.pi))
            w = w / norm
            noise.append(second_moment(fy, w - w.mean()))
        return [top(shift + math.sqrt(ny / nx) * noise[a] - rho * noise[b])
                for a in range(draws_a) for b in range(draws_a) if a != b]
    if kind == "permutation":
        both = torch.cat([fx, fy])
        return [relabelled_top(both, nx, rho, generator) for _ in range(2 * draws_a)]
    draws = []
    # a two-point law with p != 1/2 is skewed: its mirror image (s = -1) is another law, so it draws 2A times
    signs = (1.0,) if kind == "bernoulli" else (1.0, -1.0)
    for _ in range(2 * draws_a // len(signs)):
        if kind in ("unconditional", "conditional"):
            w = math.sqrt(2) * torch.cos(torch.rand(ny, generator=generator, dtype=torch.float64) * 2 * math.pi)
            noise, scale = second_moment(fy, w - w.mean()), math.sqrt(ny * (1 / nx + rho * rho / ny))
            if kind == "conditional":
                scale = (1 + (rho - 1) * nx / (nx + ny)) * math.sqrt(ny * (1 / nx + 1 / ny))
        else:
            both = torch.cat([fx, fy])
            w = math.sqrt(2) * torch.cos(torch.rand(nx + ny, generator=generator, dtype=torch.float64) * 2 * math.pi)
            if kind == "rademacher":
                w = torch.sign(w)
            elif kind == "bernoulli":
                p = nx / (nx + ny)
                w = ((torch.rand(nx + ny, generator=generator, dtype=torch.float64) < p).double() - p)
                w = w / math.sqrt(p * (1 - p))
            noise = second_moment(both, w - w.mean()) * (nx + ny)
            scale = (math.sqrt(ny / nx) + rho * math.sqrt(nx / ny)) / (nx + ny)
        draws += [top(shift + sign * scale * noise) for sign in signs]
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
    parser.add_argument("--nulls", nargs="+", default=list(NULLS), choices=NULLS)
    parser.add_argument("--draws", type=int, default=DRAWS, help="A: multiplier draws per null (the library's 3)")
    parser.add_argument("--first-split", type=int, default=0, help="the splits' seeds are 900 + this, 901 + this, ...")
    parser.add_argument("--sigma-from", choices=["x", "pooled"], default="x",
                        help="the rows of sigma's 'auto' rule: the x side (FINC's reference), or both sides")
    parser.add_argument("--permutations", type=int, default=0,
                        help="per split, also this many random relabellings: the exact permutation test's 95 %% point")
    args = parser.parse_args()
    torch.set_num_threads(2)
    images, _ = fashion(args.fashion) if args.data == "fashion" else digits()
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    quantile = student_t_isf(0.05, args.draws) * math.sqrt(1 + 1 / args.draws)
    nx, ny = args.n
    for name in args.embedding if args.data == "fashion" else ["pixels"]:
        x = embed(name, images, Path(args.cache)).double()
        observed, exact, found = [], [], {kind: [] for kind in args.nulls}
        generator = torch.Generator().manual_seed(5)
        for s in range(args.first_split, args.first_split + args.splits):
            order = torch.randperm(len(x), generator=torch.Generator().manual_seed(900 + s))
            a, b = x[order[:nx]], x[order[nx : nx + ny]]
            rows_for_sigma = a
            if args.sigma_from == "pooled":
                rows_for_sigma = torch.cat([a, b])[torch.randperm(nx + ny, generator=generator)]
            sigma = rule_sigma(rows_for_sigma)
            feature_map = FINCNovelty(sigma, n_frequencies=args.r, seed=s).feature_map
            fx, fy = feature_map(a).double(), feature_map(b).double()
            value = top(second_moment(fx) - args.rho * second_moment(fy))
            observed.append(value)
            if args.permutations:
                both = torch.cat([fx, fy])
                law = torch.tensor([relabelled_top(both, nx, args.rho, generator) for _ in range(args.permutations)])
                exact.append(permutation_law(law, value))
            for kind, rows in found.items():
                draws = torch.tensor(null_draws(kind, fx, fy, args.rho, generator, args.draws))
                threshold = float(draws.mean()) + float(draws.std()) * quantile
                # the same rule on the draws' logarithms (a right-skewed law: a log-normal fit), where all are > 0
                logs = draws.log() if bool((draws > 0).all()) else None
                log_threshold = threshold if logs is None else math.exp(float(logs.mean() + logs.std() * quantile))
                rows.append((float(draws.mean()), threshold, value > threshold, float(draws.std()), log_threshold,
                             value > log_threshold))
        values = torch.tensor(observed)
        row = {"data": args.data, "embedding": name, "r": args.r, "n": args.n, "splits": args.splits,
               "top_mean": round(float(values.mean()), 5), "top_sd": round(float(values.std()), 5),
               "top_q95": round(float(values.mean() + 1.645 * values.std()), 5)}
        if exact:
            q95, p_value, mean, sd, skew = (torch.tensor(column) for column in zip(*exact, strict=True))
            row["permutation_law"] = {"draws": args.permutations, "mean": round(float(mean.mean()), 5),
                                      "sd": round(float(sd.mean()), 5), "skewness": round(float(skew.mean()), 2),
                                      "q95": round(float(q95.mean()), 5),
                                      "flagged_at_0.05": f"{int((p_value <= 0.05).sum())}/{len(p_value)}"}
        for kind, rows in found.items():
            row[kind] = {"mean": round(sum(item[0] for item in rows) / len(rows), 5),
                         "threshold": round(sum(item[1] for item in rows) / len(rows), 5),
                         "sd": round(sum(item[3] for item in rows) / len(rows), 5),
                         "flagged": f"{sum(item[2] for item in rows)}/{len(rows)}",
                         "log_threshold": round(sum(item[4] for item in rows) / len(rows), 5),
                         "log_flagged": f"{sum(item[5] for item in rows)}/{len(rows)}"}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
