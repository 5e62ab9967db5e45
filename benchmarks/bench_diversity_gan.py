"""A small GAN that drops modes, trained without and with `DiversityRegularizer`, and with the mode-seeking loss of
MSGAN (Mao et al. 2019, "Mode seeking generative adversarial networks", CVPR, eq. 3) as the published baseline.

    python benchmarks/bench_diversity_gan.py [--data digits fashion] [--seeds 0 1 2] [--steps 3000]
        [--weight 1.0] [--r 512]

Data: scikit-learn's 1,797 8 x 8 digits (64 pixels), and the first 12,000 Fashion-MNIST training images average-pooled
to 14 x 14 (196 pixels), in [0, 1]. The GAN: MLPs (generator 32 -> 256 -> 256 -> d, sigmoid; discriminator d -> 256
-> 256 -> 1, LeakyReLU 0.2), the non-saturating loss, Adam (2e-4, betas 0.5 / 0.999), batches of 64, ``--steps``
steps. Variants, each over ``--seeds``:

- ``none``: the GAN alone;
- ``diversity``: ``g_loss + DiversityRegularizer(weight, reference=x, n_frequencies=r)(fake)`` on the pixels
  (sigma from the real images by the metrics' rule, 2r = 1,024 by default, decay 0.99);
- ``msgan``: ``g_loss + 1 / (d(G(z1), G(z2)) / d(z1, z2) + 1e-5)`` on the two halves of the batch (mean absolute
  differences, MSGAN's eq. 3 with lambda = 1).

Each trained generator draws 2,000 samples, read the way a user would: the classes an oracle classifier (an MLP
trained on the real images, its held-out accuracy printed) finds in >= 2 % of them; the classes FINC names missing
(`FINCNovelty`, ``sigma="auto"``, 2r = 1,024, against 2,000 real images: each significant missing region's majority
class); the t-truncated Vendi (``FKEAVendi(truncation=10)``, sigma from the real images, 2r = 1,024) with its se;
FID (torchmetrics' ``FrechetInceptionDistance`` on the pixels, as ``bench_epoch_cost.py`` feeds it); and the
training time per step, the regulariser's against ``none``'s in the same process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torchmetrics.image.fid import FrechetInceptionDistance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dropped_modes import digits, fashion  # noqa: E402

from lightning_spectral.callbacks import DiversityRegularizer  # noqa: E402
from lightning_spectral.kernels import AUTO_FACTOR, median_bandwidth  # noqa: E402
from lightning_spectral.metrics import FINCNovelty, FKEAVendi  # noqa: E402

LATENT = 32


def images(name: str, root: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, d) pixels in [0, 1] and classes."""
    if name == "digits":
        x, y = digits()
        return x.flatten(1), y
    x, y = fashion(root)
    return nn.functional.avg_pool2d(x, 2).flatten(1), y


def mlp(widths: list[int], last: nn.Module) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(widths[:-2], widths[1:-1], strict=True):
        layers += [nn.Linear(a, b), nn.LeakyReLU(0.2)]
    return nn.Sequential(*layers, nn.Linear(widths[-2], widths[-1]), last)


def train(x: torch.Tensor, variant: str, seed: int, steps: int, weight: float, r: int,
          sigma: object = "auto") -> tuple[nn.Module, float]:
    torch.manual_seed(seed)
    d = x.shape[1]
    generator, critic = mlp([LATENT, 256, 256, d], nn.Sigmoid()), mlp([d, 256, 256, 1], nn.Identity())
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    d_opt = torch.optim.Adam(critic.parameters(), lr=2e-4, betas=(0.5, 0.999))
    regularizer = None
    if variant == "diversity":
        regularizer = DiversityRegularizer(weight, reference=x, n_frequencies=r, sigma=sigma)
    bce = nn.functional.binary_cross_entropy_with_logits
    began = time.perf_counter()
    for _ in range(steps):
        real = x[torch.randint(len(x), (64,))]
        z = torch.randn(64, LATENT)
        fake = generator(z)
        d_loss = bce(critic(real), torch.ones(64, 1)) + bce(critic(fake.detach()), torch.zeros(64, 1))
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = bce(critic(fake), torch.ones(64, 1))
        if regularizer is not None:
            g_loss = g_loss + regularizer(fake)
        elif variant == "msgan":
            ratio = (fake[:32] - fake[32:]).abs().mean() / (z[:32] - z[32:]).abs().mean()
            g_loss = g_loss + 1.0 / (ratio + 1e-5)
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
    return generator, (time.perf_counter() - began) / steps


def oracle(x: torch.Tensor, y: torch.Tensor) -> tuple[nn.Module, float]:
    """An MLP classifier of the real images and its accuracy on a held-out fifth."""
    torch.manual_seed(0)
    order = torch.randperm(len(x))
    held, fit = order[: len(x) // 5], order[len(x) // 5 :]
    model = mlp([x.shape[1], 256, 10], nn.Identity())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(30):
        for batch in fit.split(128):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = float((model(x[held]).argmax(1) == y[held]).float().mean())
    return model, accuracy


class Identity(nn.Module):
    """torchmetrics' extractor for features given directly."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.num_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1).double()


def evaluate(samples: torch.Tensor, x: torch.Tensor, y: torch.Tensor, classifier: nn.Module) -> dict:
    reference = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(1))[:2000]]
    labels = y[torch.randperm(len(x), generator=torch.Generator().manual_seed(1))[:2000]]
    with torch.no_grad():
        found = torch.bincount(classifier(samples).argmax(1), minlength=10).double() / len(samples)
    finc = FINCNovelty(sigma="auto", n_frequencies=512)
    finc.update(reference, real=True)
    finc.update(samples, real=False)
    reading = finc.reading()
    count = int(reading.missing_modes(10).significant.sum())
    named = set()
    if count:
        grouped = reading.grouped_modes([(reference, torch.arange(len(reference)))], k=count, per_mode=20, missing=True)
        named = {int(labels[top].mode().values) for top, _ in grouped.samples}
    sigma = AUTO_FACTOR * median_bandwidth(reference.double(), max_samples=1000, seed=0)
    vendi = FKEAVendi(sigma, 512, truncation=10)
    vendi.update(samples)
    summary = vendi.reading().summary()
    fid = FrechetInceptionDistance(feature=Identity(x.shape[1]))
    fid.update(reference, real=True)
    fid.update(samples, real=False)
    return {"classes": int((found >= 0.02).sum()), "missing": sorted(named), "vendi": float(summary[""]),
            "vendi_se": float(summary["se"]), "fid": float(fid.compute())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", choices=["digits", "fashion"], default=["digits", "fashion"])
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--weight", type=float, default=1.0)
    parser.add_argument("--r", type=int, default=512)
    parser.add_argument("--sigma", type=float, default=None, help="the regulariser's bandwidth (default: auto)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")  # FID's and the regulariser's own notices: the numbers are the output
    for name in args.data:
        x, y = images(name, args.fashion)
        classifier, accuracy = oracle(x, y)
        print(f"## {name}: {len(x)} images of {x.shape[1]} pixels; the oracle classifier's held-out accuracy "
              f"{accuracy:.1%}; {args.steps} steps, 2r = {2 * args.r}, weight {args.weight:g}")
        print("| variant | seed | classes >= 2 % | FINC names missing | t10-Vendi (se) | FID | s per step |")
        print("|---|---|---|---|---|---|---|")
        times = {}
        for variant in ("none", "diversity", "msgan"):
            for seed in args.seeds:
                sigma = "auto" if args.sigma is None else args.sigma
                generator, seconds = train(x, variant, seed, args.steps, args.weight, args.r, sigma)
                times.setdefault(variant, []).append(seconds)
                with torch.no_grad():
                    samples = generator(torch.randn(2000, LATENT, generator=torch.Generator().manual_seed(seed)))
                got = evaluate(samples, x, y, classifier)
                print(f"| {variant} | {seed} | {got['classes']} | {got['missing'] or '-'} | {got['vendi']:.2f} "
                      f"({got['vendi_se']:.2f}) | {got['fid']:.2f} | {seconds * 1000:.1f} ms |")
        base = statistics.mean(times["none"])
        print(f"step time over none's: diversity {statistics.mean(times['diversity']) / base:.2f}x, "
              f"msgan {statistics.mean(times['msgan']) / base:.2f}x")


if __name__ == "__main__":
    main()
