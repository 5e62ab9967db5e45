"""What `DiversityRegularizer` adds to a GAN's training step, by the size of the step and the width 2r.

    python benchmarks/bench_diversity_cost.py [--r 128 256 512 1024] [--steps 100] [--pairs 5] [--gans mlp dcgan]

Two GANs, batches of 64, Adam, the non-saturating loss, one discriminator and one generator step per batch (as
``bench_diversity_gan.py``); the data are random images (the time does not depend on them):

- ``mlp``: the MLPs of ``bench_diversity_gan.py`` on 8 x 8 images (generator 32 -> 256 -> 256 -> 64);
- ``dcgan``: a DCGAN of 28 x 28 images (Radford et al. 2016: generator 64 -> 128 x 7 x 7 -> transposed
  convolutions to 64 x 14 x 14 and 1 x 28 x 28, batch norm, ReLU; discriminator convolutions 1 -> 64 -> 128, stride 2,
  LeakyReLU 0.2, then a linear map), as in the usual MNIST / Fashion-MNIST examples.

For each width, ``--pairs`` alternated runs of ``--steps`` steps without the regulariser, with its random features
alone (the generator's loss plus 0 times their sum: the map and its backward pass, the part any loss on 2r random
features pays), with the features and their one product with a fixed (2r, 2r) matrix (``phi^T C phi`` against a
covariance that never changes, gradient ``C phi`` from the same product: the least a loss on the running covariance
pays before updating it) and with the regulariser (on the pixels, ``sigma`` 1, decay 0.99), in one process; the added
cost is the median over the runs of (with - without) / without.

``--parts`` times the regularizer's parts alone instead (batch 64 on 8 x 8 pixels, one process): the random features
forward and backward, the loss against a running covariance forward and backward (with the features), the
covariance's update, and its float32 copy; and one ``Phi C`` product alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from lightning_spectral.callbacks import DiversityRegularizer
from lightning_spectral.kernels import GaussianRFF

BATCH = 64


def mlp_gan() -> tuple[nn.Module, nn.Module, int, tuple[int, ...]]:
    act = nn.LeakyReLU(0.2)
    generator = nn.Sequential(nn.Linear(32, 256), act, nn.Linear(256, 256), act, nn.Linear(256, 64), nn.Sigmoid())
    critic = nn.Sequential(nn.Linear(64, 256), act, nn.Linear(256, 256), act, nn.Linear(256, 1))
    return generator, critic, 32, (64,)


def dcgan() -> tuple[nn.Module, nn.Module, int, tuple[int, ...]]:
    generator = nn.Sequential(
        nn.Linear(64, 128 * 7 * 7), nn.ReLU(), nn.Unflatten(1, (128, 7, 7)),
        nn.ConvTranspose2d(128, 64, 4, 2, 1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.ConvTranspose2d(64, 1, 4, 2, 1), nn.Sigmoid(),
    )
    critic = nn.Sequential(
        nn.Conv2d(1, 64, 4, 2, 1), nn.LeakyReLU(0.2),
        nn.Conv2d(64, 128, 4, 2, 1), nn.BatchNorm2d(128), nn.LeakyReLU(0.2),
        nn.Flatten(), nn.Linear(128 * 7 * 7, 1),
    )
    return generator, critic, 64, (1, 28, 28)


class FeaturesOnly:
    """0 times the sum of the samples' random features: their forward and backward cost, nothing else."""

    def __init__(self, r: int) -> None:
        self.rff = GaussianRFF(None, r, sigma=1.0, seed=0)

    def __call__(self, samples: torch.Tensor) -> torch.Tensor:
        return 0.0 * self.rff(samples.flatten(1)).sum()


class ProductOnly(FeaturesOnly):
    """``sum_i phi_i^T C phi_i`` against a fixed float32 ``C``, its one ``Phi C`` product detached (the gradient
    ``C phi`` reuses it): the features, the product, nothing of the covariance's update."""

    def __init__(self, r: int) -> None:
        super().__init__(r)
        self.matrix = torch.eye(2 * r) / (2 * r)

    def __call__(self, samples: torch.Tensor) -> torch.Tensor:
        phi = self.rff(samples.flatten(1))
        return 0.0 * (phi * (phi @ self.matrix).detach()).sum()


def seconds_per_step(build, regularizer, steps: int) -> float:
    torch.manual_seed(0)
    generator, critic, latent, shape = build()
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    d_opt = torch.optim.Adam(critic.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.functional.binary_cross_entropy_with_logits
    ones, zeros = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)
    real = torch.rand(BATCH, *shape)

    def step() -> None:
        fake = generator(torch.randn(BATCH, latent))
        d_loss = bce(critic(real), ones) + bce(critic(fake.detach()), zeros)
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = bce(critic(fake), ones)
        if regularizer is not None:
            g_loss = g_loss + regularizer(fake)
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()

    for _ in range(5):  # warm-up
        step()
    began = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - began) / steps


def parts(r: int, repeats: int = 300) -> None:
    """Milliseconds per call of each part of the regularizer at width 2r (``--parts``)."""
    from lightning_spectral.functional.diversity import diversity_loss
    from lightning_spectral.functional.running_covariance import RunningCovariance

    torch.manual_seed(0)
    rff, running = GaussianRFF(None, r, sigma=1.0, seed=0), RunningCovariance(2 * r)
    x = torch.rand(BATCH, 64, requires_grad=True)
    features = rff(x).detach()
    running.update(features)

    def refresh() -> None:
        running._float32_stale = True  # as after an update
        running.covariance_float32()

    matrix = running.covariance_float32()
    timed = {
        "one (batch, 2r) x (2r, 2r) float32 product": lambda: features @ matrix,
        "random features, forward and backward": lambda: rff(x).sum().backward(),
        "features and the loss, forward and backward": lambda: diversity_loss(rff(x), running).backward(),
        "the covariance's update": lambda: running.update(features),
        "its float32 copy": refresh,
    }
    print(f"| part (2r = {2 * r}, batch {BATCH}) | ms per call |")
    print("|---|---|")
    for name, call in timed.items():
        for _ in range(10):
            call()
        began = time.perf_counter()
        for _ in range(repeats):
            call()
        print(f"| {name} | {(time.perf_counter() - began) / repeats * 1e3:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--r", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--gans", nargs="+", choices=("mlp", "dcgan"), default=["mlp", "dcgan"])
    parser.add_argument("--parts", action="store_true", help="time the regularizer's parts alone (at each --r)")
    args = parser.parse_args()
    if args.parts:
        for r in args.r:
            parts(r)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.pairs} alternated runs of each kind, "
          f"{args.steps} steps, batch {BATCH}")
    print("| GAN | 2r | step without | features alone: added | features and one product: added | step with | "
          "added (median of runs) | each run |")
    print("|---|---|---|---|---|---|---|---|")
    for name, build in (("mlp", mlp_gan), ("dcgan", dcgan)):
        if name not in args.gans:
            continue
        for r in args.r:
            without, with_, added, features, product = [], [], [], [], []
            for _ in range(args.pairs):
                base = seconds_per_step(build, None, args.steps)
                alone = seconds_per_step(build, FeaturesOnly(r), args.steps)
                floor = seconds_per_step(build, ProductOnly(r), args.steps)
                regularized = seconds_per_step(build, DiversityRegularizer(1.0, n_frequencies=r, sigma=1.0), args.steps)
                without.append(base)
                with_.append(regularized)
                features.append(alone / base - 1.0)
                product.append(floor / base - 1.0)
                added.append(regularized / base - 1.0)
            print(f"| {name} | {2 * r} | {statistics.median(without) * 1e3:.1f} ms | "
                  f"{statistics.median(features):+.0%} | {statistics.median(product):+.0%} | "
                  f"{statistics.median(with_) * 1e3:.1f} ms | "
                  f"**{statistics.median(added):+.0%}** | {', '.join(f'{a:+.0%}' for a in added)} |", flush=True)


if __name__ == "__main__":
    main()
