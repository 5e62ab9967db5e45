"""A mode's share of its side's samples, from the sums, against an exact count on a mixture; the line a person
reads."""

import torch

from lightning_spectral.functional import mode_line, mode_share
from lightning_spectral.metrics import FINCNovelty


def mixture(weights, n, seed):
    g = torch.Generator().manual_seed(seed)
    centres = 8.0 * torch.eye(len(weights), 6, dtype=torch.float64)
    labels = torch.multinomial(torch.tensor(weights, dtype=torch.float64), n, replacement=True, generator=g)
    return centres[labels] + 0.5 * torch.randn(n, 6, generator=g, dtype=torch.float64), labels


def test_missing_shares_match_the_counted_share_of_each_dropped_class():
    ref, ref_labels = mixture([0.18, 0.12, 0.06] + [0.64 / 3] * 3, 3000, seed=0)
    gen, _ = mixture([0.0] * 3 + [1 / 3] * 3, 3000, seed=1)  # classes 0, 1, 2 dropped
    metric = FINCNovelty(sigma=1.0, n_frequencies=512)
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    modes = metric.missing_modes(3)
    assert bool(modes.significant.all())
    tops = metric.top_samples([(ref, torch.arange(len(ref)))], k=3, per_mode=20, missing=True)
    for value, (ids, scores) in zip(modes.eigenvalues, tops, strict=True):
        label = int(ref_labels[ids].mode().values)
        counted = float((ref_labels == label).double().mean())  # the exact share of that class in the reference
        share = mode_share(float(value), scores, 512)
        assert counted * 0.4 <= share <= counted * 1.05  # an under-estimate (module doc): 0.08 for a class of 0.18
    gallery = metric.galleries([], k=3, per_mode=20, reference_batches=[(ref, torch.arange(len(ref)))])["missing"]
    assert all("% of the reference" in label for label in gallery.labels)


def test_the_line_names_the_class_its_purity_and_the_share():
    assert mode_line("missing", 6, 0.1, "reference", [7] * 19 + [3]) == (
        "missing mode 7: class 7 (19 of its top 20), about 10 % of the reference"
    )
    assert mode_line("", 0, 0.004, "generated samples") == "mode 1: under 1 % of the generated samples"
