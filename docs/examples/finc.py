"""FINCNovelty finds a planted novel mode (and a missing one) in scikit-learn
digits.

Reference: 800 digits 0-8. "Generated": 600 other digits 1-8 plus 150
nines, so digit 9 is novel (the reference never has it) and digit 0 is
missing. Generated data drawn like the reference scores 0."""

import torch
from sklearn.datasets import load_digits

from lightning_spectral import median_bandwidth
from lightning_spectral.metrics import FINCNovelty

data = load_digits()
order = torch.randperm(
    len(data.target), generator=torch.Generator().manual_seed(0)
)
x, y = (
    torch.tensor(data.data, dtype=torch.float32)[order],
    torch.tensor(data.target)[order],
)
nines, others, others_y = x[y == 9][:150], x[y != 9], y[y != 9]
reference, reference_y = others[:800], others_y[:800]
pool, pool_y = others[800:], others_y[800:]  # disjoint from the reference
generated = torch.cat([pool[pool_y != 0][:600], nines])
generated_y = torch.cat([pool_y[pool_y != 0][:600], torch.full((150,), 9)])
like_reference = pool[:750]  # digits 0-8, as in the reference
# pixel distances; half the median distance
sigma = median_bandwidth(reference) / 2


def novelty_against_reference(samples: torch.Tensor) -> FINCNovelty:
    metric = FINCNovelty(sigma=sigma, n_frequencies=256, rho=1.0, seed=0)
    for batch in reference.split(200):  # the reference side, streamed
        metric.update(batch, real=True)
    for batch in samples.split(200):  # the generated side
        metric.update(batch, real=False)
    return metric


def batches_with_ids(
    features: torch.Tensor, size: int = 200
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(features, dataset ids) batches: the second pass of `top_samples`."""
    ids = torch.arange(len(features))
    return list(zip(features.split(size), ids.split(size)))


novelty = novelty_against_reference(generated)
print(
    f"novelty score {float(novelty.compute()):.4f}, "
    f"significance threshold {novelty.reading().threshold():.4f}"
)
modes = novelty.reading().novel_modes(3)
print(
    "top eigenvalues of C_gen - C_ref:",
    [round(float(v), 4) for v in modes.eigenvalues],
    "p-values:",
    [float(f"{float(p):.2g}") for p in modes.p_values],
    "significant:",
    modes.significant.tolist(),
)
ids, _scores = novelty.reading().top_samples(
    batches_with_ids(generated), k=1, per_mode=50
)[0]
nines = float((generated_y[ids] == 9).float().mean())
print(f"top-50 generated samples of the novel mode: {nines:.0%} are nines")

missing = novelty.reading().missing_modes(3)
print(
    "top eigenvalues of C_ref - C_gen:",
    [round(float(v), 4) for v in missing.eigenvalues],
    "p-values:",
    [float(f"{float(p):.2g}") for p in missing.p_values],
    "significant:",
    missing.significant.tolist(),
)
ids, _scores = novelty.reading().top_samples(
    batches_with_ids(reference), k=1, per_mode=50, missing=True
)[0]
zeros = float((reference_y[ids] == 0).float().mean())
print(f"top-50 reference samples of the missing mode: {zeros:.0%} are zeros")

null = novelty_against_reference(like_reference)
top = null.reading().novel_modes(1)
print(
    "generated like the reference (other samples): "
    f"novelty {float(null.compute()):.4f}, "
    f"top eigenvalue {float(top.eigenvalues[0]):.4f} "
    f"with p-value {float(top.p_values[0]):.2f}"
)
