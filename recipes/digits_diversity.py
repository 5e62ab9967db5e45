"""FKEA diversity of real handwritten digits as the number of digit classes grows.

The 1,797 8x8 digit images that ship inside scikit-learn are embedded as pixels in [0, 1]. For t = 1..10
classes, the Vendi score (order 1) and RKE (order 2) are computed two ways: by the streaming random-Fourier
covariance of this library (memory independent of n) and by the exact n x n kernel matrix. Vendi-1
grows with t: more classes, more modes.

    python recipes/digits_diversity.py [--n-frequencies 2048] [--sigma S] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import torch
from sklearn.datasets import load_digits

from lightning_spectral.features import gaussian_kernel, median_bandwidth
from lightning_spectral.linalg import psd_eigenvalues, vendi_score
from lightning_spectral.metrics import RFFCovariance


def fkea_scores(x: torch.Tensor, sigma: float, n_frequencies: int, seed: int) -> tuple[float, float]:
    covariance = RFFCovariance(sigma=sigma, n_frequencies=n_frequencies, seed=seed)
    for batch in torch.split(x, 256):  # streamed, as a validation loop would feed it
        covariance.update(batch)
    spectrum = psd_eigenvalues(covariance.compute())
    return float(vendi_score(spectrum, 1)), float(vendi_score(spectrum, 2))


def exact_scores(x: torch.Tensor, sigma: float) -> tuple[float, float]:
    spectrum = psd_eigenvalues(gaussian_kernel(x, sigma=sigma) / x.shape[0])
    return float(vendi_score(spectrum, 1)), float(vendi_score(spectrum, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-frequencies", type=int, default=2048, help="r; the covariance is 2r x 2r")
    parser.add_argument("--sigma", type=float, default=None, help="default: half the median pairwise distance")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    digits = load_digits()
    images = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    labels = torch.tensor(digits.target)
    sigma = args.sigma if args.sigma is not None else median_bandwidth(images) / 2
    print(f"scikit-learn digits: {len(images)} images of 8x8 pixels; Gaussian kernel sigma = {sigma:.3f}, "
          f"{args.n_frequencies} frequencies (covariance {2 * args.n_frequencies} x {2 * args.n_frequencies})\n")
    print(f"{'classes':>7} {'n':>5} | {'Vendi-1 FKEA':>12} {'exact':>8} | {'RKE FKEA':>9} {'exact':>8} | "
          f"{'FKEA s':>7} {'exact s':>7}")
    for n_classes in range(1, 11):
        x = images[labels < n_classes]
        start = time.perf_counter()
        fkea = fkea_scores(x, sigma, args.n_frequencies, args.seed)
        middle = time.perf_counter()
        exact = exact_scores(x, sigma)
        end = time.perf_counter()
        print(f"{n_classes:>7} {len(x):>5} | {fkea[0]:>12.2f} {exact[0]:>8.2f} | {fkea[1]:>9.2f} {exact[1]:>8.2f} | "
              f"{middle - start:>7.2f} {end - middle:>7.2f}", flush=True)
    print("\nVendi-1 grows with every added class; RKE (order 2) weighs the largest modes and levels off."
          "\nFKEA sits a little below the exact values at this r (random features underestimate entropy; the gap"
          "\ncloses as r grows). At n < 2,000 the exact n x n route is cheaper; FKEA's cost is one fixed 2r x 2r"
          "\neigendecomposition plus a pass linear in n, so it wins at large n (docs/benchmarks.md).")


if __name__ == "__main__":
    main()
