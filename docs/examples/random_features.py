"""How many random features: kernel and Vendi / RKE error against the exact n
x n values, as r grows.

Data: 1000 scikit-learn digits (8 x 8 pixels as 64-d vectors). Two
bandwidths: the median pairwise distance (a peaked spectrum) and half of it
(a flatter one, with many small eigenvalues)."""

import torch
from sklearn.datasets import load_digits

from lightning_spectral import GaussianRFF, gaussian_kernel, median_bandwidth
from lightning_spectral.functional import fkea_vendi, vendi_exact

x = torch.tensor(load_digits().data[:1000], dtype=torch.float64)
orders = [1, 2, "inf"]
for sigma in (median_bandwidth(x), median_bandwidth(x) / 2):
    exact = vendi_exact(x, sigma, alpha=orders)
    kernel = gaussian_kernel(x[:300], sigma=sigma)
    print(f"sigma = {sigma:.1f}: exact Vendi-1 / RKE / Vendi-inf = "
          + " / ".join(f"{float(exact[o]):.2f}" for o in orders))  # fmt: skip
    print(
        "     r    2r  kernel |error| mean / max  relative error: Vendi-1    RKE  Vendi-inf"
    )
    for r in (64, 256, 1024):
        # unit-norm rows: phi . phi ~ kernel
        phi = GaussianRFF(64, r, sigma, seed=0)(x[:300]).double()
        error = (phi @ phi.T - kernel).abs()
        fkea = fkea_vendi(x, sigma, n_frequencies=r, alpha=orders, seed=0)
        rel = [float(fkea[o] / exact[o] - 1) for o in orders]
        print(f"  {r:4d}  {2 * r:4d}             {float(error.mean()):.4f} / {float(error.max()):.3f}"
              f"                  {rel[0]:+7.1%} {rel[1]:+6.1%}     {rel[2]:+6.1%}")  # fmt: skip
