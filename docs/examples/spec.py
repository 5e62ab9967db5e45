"""SPEC: compare two embeddings of the same samples, with the functional
`spec` and the streaming `SPECDivergence`.

Embedding a groups 4 clusters; embedding b groups clusters 0-2 the same way
but scatters the members of cluster 3. SPEC should report one a-only
cluster (a positive eigenvalue) whose members are cluster 3."""

import torch

from lightning_spectral.functional import match_bandwidth, spec
from lightning_spectral.metrics import SPECDivergence

g = torch.Generator().manual_seed(0)
N = 800
labels = torch.arange(N) % 4
emb_a = 4.0 * torch.nn.functional.one_hot(
    labels, 6
).float() + 0.3 * torch.randn(N, 6, generator=g)
emb_b = 4.0 * torch.nn.functional.one_hot(
    labels, 8
).float() + 0.3 * torch.randn(N, 8, generator=g)
scattered = labels == 3
# b does not group cluster 3
emb_b[scattered] = 4.0 * torch.randn(int(scattered.sum()), 8, generator=g)

# cosine kernel: no bandwidth to choose
result = spec(emb_a, emb_b, kernel="cosine", k=2, per_cluster=50)
print(
    f"cosine SPEC-diff {float(result.spec_diff):.3f}; "
    "eigenvalues (largest, smallest):",
    [round(float(v), 3) for v in result.eigenvalues[[0, 1, -2, -1]]],
)
# top-50 samples of the top a-only cluster
members = result.clusters_a.members[0]
share = float(scattered[members].float().mean())
print(f"top a-only cluster: {share:.0%} of its top-50 members are cluster 3")

# Gaussian kernel: fix one bandwidth, match the other (equal top eigenvalues
# of K/n)
sigma_b = 3.0
sigma_a = match_bandwidth(emb_b, emb_a, sigma_reference=sigma_b)
gaussian = spec(
    emb_a,
    emb_b,
    "gaussian",
    sigma_a,
    sigma_b,
    n_frequencies=256,
    method="covariance",
    k=1,
)
exact = spec(emb_a, emb_b, "gaussian", sigma_a, sigma_b, method="exact", k=1)
print(
    f"gaussian (sigma_a = {sigma_a:.2f}, sigma_b = {sigma_b}): "
    f"SPEC-diff {float(gaussian.spec_diff):.3f} "
    f"with 2 x 256 random frequencies, {float(exact.spec_diff):.3f} exact"
)

# Streaming: the same comparison, accumulated batch by batch (a validation
# loop, under DDP all-reduced)
metric = SPECDivergence(kernel="cosine", in_features=(6, 8))
for a, b in zip(emb_a.split(200), emb_b.split(200)):
    metric.update(a, b)  # the same samples, row by row
top = float(metric.reading().clusters(k=1, sign=1).eigenvalues[0])
print(
    f"SPECDivergence: {float(metric.compute()):.3f} "
    f"(functional: {float(result.spec_diff):.3f}); "
    f"clusters(k=1, sign=+1) eigenvalue {top:.3f}"
)
batches = (
    ((emb_a[i : i + 200], emb_b[i : i + 200]), torch.arange(i, i + 200))
    for i in range(0, N, 200)
)
ids, _scores = metric.reading().top_samples(batches, k=1, sign=1, per_cluster=50)[0]
share = float(scattered[ids].float().mean())
print(f"streamed top-50 members of that cluster: {share:.0%} are cluster 3")
