"""What sigma does: Vendi-1 and RKE of 1000 scikit-learn digits (10 classes)
across bandwidths.

Exact n x n values (no random features), so only the bandwidth changes
between rows."""

import torch
from sklearn.datasets import load_digits

from lightning_spectral import median_bandwidth
from lightning_spectral.functional import vendi_exact

x = torch.tensor(load_digits().data[:1000], dtype=torch.float64)
median = median_bandwidth(x)  # the heuristic starting point
print(f"median pairwise distance: {median:.1f}")
print("sigma / median   sigma   Vendi-1     RKE")
for factor in (0.125, 0.25, 0.5, 1.0, 2.0, 4.0):
    scores = vendi_exact(x, factor * median, alpha=[1, 2])
    print(
        f"{factor:14.3f} {factor * median:7.1f} {float(scores[1]):9.2f} {float(scores[2]):7.2f}"
    )
