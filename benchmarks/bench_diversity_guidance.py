"""RKE guidance (`functional.diversity_guidance`) on a small sampler that runs offline: Langevin dynamics of a
skewed 8-mode mixture, with and without the guidance step against the running covariance of the samples drawn so far.

    python benchmarks/bench_diversity_guidance.py [--batches 10] [--batch 100] [--scales 0 0.5 1 2] [--seeds 0 1 2]

The target: 8 Gaussians (std 0.3) on a circle of radius 4 in 2-D, weights 0.55, 0.25, 0.1, 0.04, 0.02, 0.02, 0.01,
0.01 (a model that makes some modes rarely). The sampler: the reverse of a variance-exploding diffusion with the
exact score of the blurred mixture (200 ancestral steps, noise 10 to 0.01), whose samples follow the mixture. With
guidance (``scale > 0``) each step's drift also gets ``- scale diversity_guidance(x, phi o denoise, running)``
(``phi`` Gaussian random features, sigma = 1, 2r = 512, of the denoised estimate ``x + noise^2 score``),
``running`` the covariance of every earlier batch's final samples (`RunningCovariance`, decay 1: all of them), as
SPARKE guides each new prompt's batch against the earlier ones (Jalali et al. 2025, arXiv 2506.10173), without its
memory bank. Batches are drawn one after another.

Printed per scale, mean (and spread) over seeds: the modes holding >= 2 % of all samples (8 at most; the target
itself gives 6 at these weights), the share of samples near a mode (within 3 std: the guidance must not push
samples off the target), RKE of all samples (`FKEAVendi(alpha=2)`, sigma = 1) with its se, and the sampler's time per
batch.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from lightning_spectral.functional import RunningCovariance, diversity_guidance
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import FKEAVendi

WEIGHTS = torch.tensor([0.55, 0.25, 0.1, 0.04, 0.02, 0.02, 0.01, 0.01], dtype=torch.float64)
ANGLES = torch.arange(8, dtype=torch.float64) * (2 * math.pi / 8)
MEANS = 4.0 * torch.stack([ANGLES.cos(), ANGLES.sin()], 1)
STD = 0.3


def score(x: torch.Tensor, noise: float) -> torch.Tensor:
    """grad log p_t(x) (n, 2) of the mixture blurred by N(0, noise^2 I): every component's variance STD^2 + noise^2."""
    variance = STD**2 + noise**2
    offsets = MEANS[None] - x[:, None]  # (n, 8, 2)
    logits = WEIGHTS.log()[None] - offsets.square().sum(2) / (2 * variance)
    return (torch.softmax(logits, 1)[:, :, None] * offsets).sum(1) / variance


def sample_batch(
    n: int, scale: float, rff: GaussianRFF, running: RunningCovariance, g: torch.Generator
) -> torch.Tensor:
    """The reverse of a variance-exploding diffusion with the exact score (ancestral steps, noise 10 to 0.01 over
    200 geometric levels): samples of the mixture. Guidance acts on the denoised estimate ``x + noise^2 score``
    (Tweedie), as guidance of a diffusion model's predicted sample does."""
    levels = torch.logspace(1, -2, 200, dtype=torch.float64).tolist() + [0.0]
    x = levels[0] * torch.randn(n, 2, generator=g, dtype=torch.float64)
    for noise, after in zip(levels[:-1], levels[1:], strict=True):
        step = noise**2 - after**2
        drift = score(x, noise)
        if scale > 0 and running.weight > 0:
            denoised = lambda z, noise=noise: rff(z + noise**2 * score(z, noise))  # noqa: E731
            drift = drift - scale * diversity_guidance(x, denoised, running)
        x = x + step * drift + math.sqrt(step * after**2 / noise**2) * torch.randn(x.shape, generator=g,
                                                                                   dtype=torch.float64)
    return x


def run(scale: float, seed: int, batches: int, batch: int) -> tuple[int, float, float, float, float]:
    g = torch.Generator().manual_seed(seed)
    rff = GaussianRFF(2, 256, sigma=1.0, seed=0).double()
    running = RunningCovariance(512, decay=1.0)
    drawn, began = [], time.perf_counter()
    for _ in range(batches):
        x = sample_batch(batch, scale, rff, running, g)
        running.update(rff(x))
        drawn.append(x)
    seconds = (time.perf_counter() - began) / batches
    x = torch.cat(drawn)
    distance = (x[:, None] - MEANS[None]).norm(dim=2)
    nearest = distance.argmin(1)
    shares = torch.bincount(nearest, minlength=8).double() / len(x)
    near = float((distance.min(1).values <= 3 * STD * math.sqrt(2)).double().mean())
    metric = FKEAVendi(1.0, 512, alpha=2, precision="float64")
    metric.update(x)
    summary = metric.reading().summary()
    return int((shares >= 0.02).sum()), near, float(summary[""]), float(summary["se"]), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--scales", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    print(f"{args.batches} batches of {args.batch}, seeds {args.seeds}")
    print("| guidance scale | modes >= 2 % (of 8) | near a mode | RKE (se) | s per batch |")
    print("|---|---|---|---|---|")
    for scale in args.scales:
        rows = [run(scale, seed, args.batches, args.batch) for seed in args.seeds]
        modes = [row[0] for row in rows]
        print(f"| {scale:g} | {statistics.mean(modes):.1f} ({min(modes)}-{max(modes)}) | "
              f"{statistics.mean(row[1] for row in rows):.1%} | {statistics.mean(row[2] for row in rows):.2f} "
              f"({statistics.mean(row[3] for row in rows):.2f}) | {statistics.mean(row[4] for row in rows):.2f} |")


if __name__ == "__main__":
    main()
