"""Which modes stand for the same region of the samples: split modes reported as one.

Above ``rho = 1`` one tight cluster can clear the FINC null as several significant modes, each with its own
gallery row and share. FINC (Zhang et al., section 4) reads a mode off each eigenvector of a positive eigenvalue
of ``C_x - rho C_y``, which holds for well-separated modes; on a region the other side lacks, that matrix is the
region's own second moment, whose leading eigenvector is its mean direction and whose next ones are directions
within the region (our reading, measured in ``tests/test_mode_groups.py``), so they clear the null as well.

**Members.** A mode's members are the samples scoring at least half the median score of its top samples,
``u_i(x) >= median(top u_i) / 2`` (the rule of the counted shares, `functional/mode_shares.py`).

**Rule** (`mode_groups`). Mode ``j`` joins the group of the first earlier (larger-eigenvalue) mode ``i`` when

- at least a share ``containment`` of ``j``'s top samples are members of ``i`` (``j`` describes samples of ``i``'s
  region), and
- fewer than a share ``split`` of ``i``'s top samples reach ``|u_j| >= median(top u_j) / 2`` (``j`` does
  not split ``i``'s most typical samples: a within-cluster direction is near 0 at the cluster's centre, while the
  contrast of two neighbouring classes, which the first mode then holds together, is far from 0 on both).

Without the second condition the first mode of two dropped neighbouring classes (their union) swallowed the
second class's own mode (digits: 9 dropped classes fewer named in 20 trials at a containment of 0.8,
docs/benchmarks.md).

A group is reported under its first mode (the representative): one gallery row (the representative's top samples),
one share, one line. The scores it reads
are those of the top samples on every mode (`top_samples_and_rows`): global ids break ties, so the groups do not
depend on order, batch size or sharding.

``docs/benchmarks.md`` ("Dropped modes at the defaults") measures what the rule merges on the digits and
Fashion-MNIST.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from torch import Tensor

from lightning_spectral.functional.modes import Modes

#: The share of a mode's top samples that must be members of an earlier mode for it to join that mode's group.
MERGE_CONTAINMENT = 0.9
#: The share of the earlier mode's top samples that, scoring ``|u_j| >= median(top u_j) / 2``, keep ``j`` apart.
#: Both chosen on the digits (20 trials: the pair of (0.7, 0.8, 0.9) x (0.1, 0.2) that merged no two classes and
#: still merged the split tight clusters of ``tests/test_mode_groups.py``); docs/benchmarks.md.
MERGE_SPLIT = 0.2


def mode_groups(
    top: Sequence[tuple[Tensor, Tensor]],
    rows: Sequence[Tensor],
    containment: float = MERGE_CONTAINMENT,
    split: float = MERGE_SPLIT,
) -> list[int]:
    """Each mode's representative (k,): the first mode of its group (itself when it joins none).

    Args:
        top: per mode ``(ids, scores)`` of its top samples, scores descending (`top_samples`).
        rows: per mode (n_j, k): the scores of its top samples on every mode (`top_samples_and_rows`).
        containment: in (0, 1]; mode ``j`` joins the first ``i < j`` such that at least this share of ``j``'s top
            samples score ``u_i >= median(top u_i) / 2``...
        split: in [0, 1]; ...and fewer than this share of ``i``'s top samples score ``|u_j| >= median(top u_j) / 2``
            (module doc).

    Examples:
        >>> import torch
        >>> top = [(torch.arange(4), torch.tensor([4.0, 4.0, 3.0, 3.0])), (torch.arange(4), torch.ones(4))]
        >>> # mode 2's tops are members of mode 1 (3 >= 3.5 / 2), mode 1's score 0 on mode 2: one region
        >>> mode_groups(top, [torch.tensor([[4.0, 0.0]] * 4), torch.tensor([[3.0, 1.0]] * 4)])
        [0, 0]
        >>> # mode 1's tops score -1 on mode 2 (|-1| >= 1 / 2): mode 2 splits them, two regions
        >>> mode_groups(top, [torch.tensor([[4.0, -1.0]] * 4), torch.tensor([[3.0, 1.0]] * 4)])
        [0, 1]
    """
    if not 0 < containment <= 1:
        raise ValueError(f"mode_groups: containment must be in (0, 1], got {containment}.")
    if not 0 <= split <= 1:
        raise ValueError(f"mode_groups: split must be in [0, 1], got {split}.")
    thresholds = [float(scores.double().median()) / 2 if scores.numel() else float("inf") for _, scores in top]
    representative: list[int] = []
    for j, mode_rows in enumerate(rows):
        joined = j
        if mode_rows.shape[0]:
            for i in range(j):
                inside = float((mode_rows[:, i] >= thresholds[i]).double().mean()) >= containment
                splits = float((rows[i][:, j].abs() >= thresholds[j]).double().mean()) >= split
                if inside and not splits:
                    joined = representative[i]
                    break
        representative.append(joined)
    return representative


def groups_of(representative: Sequence[int]) -> list[list[int]]:
    """The groups (each a list of modes, its representative first), in the order of their representatives.

    Examples:
        >>> groups_of([0, 1, 0, 1, 4])
        [[0, 2], [1, 3], [4]]
    """
    groups: dict[int, list[int]] = {}
    for mode, first in enumerate(representative):
        groups.setdefault(first, []).append(mode)
    return list(groups.values())


class ModeGroups(NamedTuple):
    """Modes reported as regions (``FINCNovelty.grouped_modes``).

    Attributes:
        groups: per region its modes (indices into ``modes``, the representative first), representatives ascending.
        samples: per region the representative's top samples ``(ids, scores)``.
        shares: (regions,) the representative's share of its side's samples.
        modes: the eigen-pairs the groups index.
        mode_samples: per mode its top samples ``(ids, scores)`` (`top_samples`).
    """

    groups: list[list[int]]
    samples: list[tuple[Tensor, Tensor]]
    shares: Tensor
    modes: Modes
    mode_samples: list[tuple[Tensor, Tensor]]

    def region_of(self) -> list[int]:
        """Each mode's region (an index into ``groups``)."""
        region = [0] * sum(len(group) for group in self.groups)
        for index, group in enumerate(self.groups):
            for mode in group:
                region[mode] = index
        return region

