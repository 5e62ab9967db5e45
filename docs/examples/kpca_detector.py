"""KernelPCAOOD: fit on in-distribution features, calibrate a threshold, flag
and score new samples.

In-distribution: 6 clusters on a circle through a random plane of R^16,
each sample at a random scale (as penultimate-layer features are). Out-of-
distribution: the same circle, between the clusters. Linear PCA cannot
separate them (the OOD points lie in the span of the data); CoRP (cosine +
Gaussian random features) can."""

import torch

from lightning_spectral.functional import detection_metrics
from lightning_spectral.metrics import KernelPCAOOD

g = torch.Generator().manual_seed(0)
# (2, 16) orthonormal rows
plane = torch.linalg.qr(torch.randn(16, 2, generator=g))[0].T


def circle(angles: torch.Tensor) -> torch.Tensor:
    points = torch.stack(
        [angles.cos(), angles.sin()], 1
    ) @ plane + 0.02 * torch.randn(len(angles), 16, generator=g)
    # random scale per sample
    return points * (0.5 + 1.5 * torch.rand(len(angles), 1, generator=g))


def clusters(n: int) -> torch.Tensor:
    return circle(
        torch.randint(6, (n,), generator=g) * (torch.pi / 3)
        + 0.05 * torch.randn(n, generator=g)
    )


train, val, test_in = clusters(4000), clusters(1000), clusters(1000)
# between clusters
test_out = circle(
    torch.randint(6, (1000,), generator=g) * (torch.pi / 3) + torch.pi / 6
)

for mapping in ("corp", "cop", "linear"):
    detector = KernelPCAOOD(
        mapping=mapping,
        sigma=0.5,
        n_frequencies=256,
        explained_variance=0.9,
        seed=0,
    )
    # streams the sums of Phi and Phi Phi^T, then one eigh
    detector.fit(train.split(1000))
    # keeps 95 % of in-distribution samples
    threshold = detector.calibrate(val, tpr=0.95)
    metrics = detection_metrics(
        detector.score(test_in), detector.score(test_out)
    )
    flagged_in, flagged_out = (
        detector.predict(test_in).float().mean(),
        detector.predict(test_out).float().mean(),
    )
    q = detector.components_.shape[1]
    print(
        f"{mapping:6s}: q = {q:3d} components, "
        f"AUROC {float(metrics['auroc']):.3f}, "
        f"FPR95 {float(metrics['fpr']):.3f}; "
        f"flagged at threshold {threshold:.3f}: "
        f"{float(flagged_in):.1%} in-distribution, "
        f"{float(flagged_out):.1%} OOD"
    )
