"""FKEAVendi on data with a known number of modes.

Five tight, well-separated clusters: Vendi is close to 5 when they are
equally likely, and close to exp(Renyi entropy of the weights) when they
are not. Runs in a few seconds on a laptop CPU."""

import math

import torch

from lightning_spectral.functional import vendi_exact
from lightning_spectral.metrics import FKEAVendi

K, N, D = 5, 2000, 16
# the bandwidth: clusters ~110 apart and ~0.6 wide are distinct modes at this
# scale
SIGMA = 10.0
g = torch.Generator().manual_seed(0)
centers = 20.0 * torch.randn(K, D, generator=g)


def sample(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """N points, a fraction weights[k] of them (exactly) around center k,
    in random order."""
    labels = torch.repeat_interleave(
        torch.arange(K), (weights * N).round().long()
    )
    labels = labels[torch.randperm(len(labels), generator=g)]
    return (
        centers[labels] + 0.1 * torch.randn(len(labels), D, generator=g),
        labels,
    )


# 1. Equally likely clusters: every order gives about K.
x, _ = sample(torch.full((K,), 1.0 / K))
vendi = FKEAVendi(sigma=SIGMA, n_frequencies=512, alpha=[1, 2, "inf"], seed=0)
for batch in x.split(500):  # stream batches, as a validation loop would
    vendi.update(batch)
# {order: score}; a single order gives a scalar tensor
scores = vendi.compute()
print(
    "equal weights:  ",
    {order: round(float(v), 2) for order, v in scores.items()},
    f"(K = {K})",
)
print(
    "exact Vendi-1 (n x n kernel matrix, first 1000 samples):",
    round(float(vendi_exact(x[:1000], SIGMA)), 2),
)

# 2. Unequal weights p: Vendi-alpha is about exp(H_alpha(p)).
p = torch.tensor([0.40, 0.25, 0.15, 0.12, 0.08])
x, labels = sample(p)
vendi = FKEAVendi(sigma=SIGMA, n_frequencies=512, alpha=[1, 2], seed=0)
vendi.update(x)
expected = {
    1: math.exp(-float((p * p.log()).sum())),
    2: 1.0 / float(p.square().sum()),
}
print(
    "unequal weights:",
    {o: round(float(v), 2) for o, v in vendi.compute().items()},
    "expected",
    {o: round(v, 2) for o, v in expected.items()},
)

# 3. Modes: eigenvalue ~ the cluster's weight (times its within-cluster
# similarity, ~1 here), and the
#    top-scoring samples of each mode are the members of one cluster.
modes = vendi.reading().modes(k=K + 1)
print(
    "top eigenvalues:",
    [round(float(v), 3) for v in modes.eigenvalues],
    "weights",
    [round(w, 2) for w in p.tolist()],
)
# (features, dataset ids)
batches = (
    (x[i : i + 500], torch.arange(i, i + 500)) for i in range(0, N, 500)
)
for mode, (ids, _scores) in enumerate(
    vendi.reading().top_samples(batches, k=K, per_mode=10)
):
    clusters = labels[ids].unique().tolist()
    print(f"mode {mode}: its top-10 samples come from cluster(s) {clusters}")
