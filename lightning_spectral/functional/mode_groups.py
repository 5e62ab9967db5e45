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
- ``j`` does not split ``i``'s most typical samples: fewer than a share ``split`` of ``i``'s top samples reach
  ``|u_j| >= median(top u_j) / 2``, or at least ``containment`` of them reach ``u_j >= median(top u_j) / 2``
  (``j`` covers them all: the same region). A within-cluster direction is near 0 at the cluster's centre; the
  contrast of two neighbouring classes, which the first mode then holds together, is far from 0 on both, at both
  ends; the union of two classes, after their contrast has named one, is high on all of that one's top samples.

Without the second condition the first mode of two dropped neighbouring classes (their union) swallowed the
second class's own mode (digits: 9 dropped classes fewer named in 20 trials at a containment of 0.8,
docs/benchmarks/dropped-modes.md, "Split modes reported as one region").

A group is reported under its first mode (the representative): one gallery row (the representative's top samples),
one share, one line. The scores it reads
are those of the top samples on every mode (`top_samples_and_rows`): global ids break ties, so the groups do not
depend on order, batch size or sharding.

**Both ends of a mode** (`contrast_ends`, `end_groups`). A mode's score is signed, and its eigenvalue
``E_x t^2 - rho E_y t^2`` counts samples at either end: with two neighbouring classes gone from one side, the first
mode is often their union and the second their contrast, one class at each end (our reading, measured in
``docs/benchmarks/dropped-modes.md``, "Both ends of a mode"). The rules above run on the modes' *ends*: the end a
mode is oriented toward (``sign = +1``, `orient` in `functional/modes.py`: for FINC the end of the excess), and the
other end (``sign = -1``, scored ``-u``) wherever its top samples
are members of the mode by the same rule, ``median(top -u) >= median(top u) / 2``. A within-region direction's
other end then joins the region it splits nothing of, as its first end does; a contrast's stays a region of its own.

``docs/benchmarks/dropped-modes.md`` ("Dropped modes at the defaults") measures what the rule merges on the digits and
Fashion-MNIST.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from lightning_spectral.functional.modes import Modes

#: The share of a mode's top samples that must be members of an earlier mode for it to join that mode's group.
MERGE_CONTAINMENT = 0.9
#: The share of the earlier mode's top samples that, scoring ``|u_j| >= median(top u_j) / 2``, keep ``j`` apart
#: (unless ``containment`` of them score ``u_j >= median(top u_j) / 2``).
#: Both chosen on the digits (20 trials: the pair of (0.7, 0.8, 0.9) x (0.1, 0.2) that merged no two classes and
#: still merged the split tight clusters of ``tests/test_mode_groups.py``); docs/benchmarks/dropped-modes.md.
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
            (or at least ``containment`` of them ``u_j >= median(top u_j) / 2``; module doc).

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
                own = rows[i][:, j] >= thresholds[j]  # i's top samples that are members of j
                reached = float((own | (rows[i][:, j] <= -thresholds[j])).double().mean())  # of j or its opposite
                splits = reached >= split and float(own.double().mean()) < containment
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


class ModeEnd(NamedTuple):
    """One end of a mode: ``sign = +1`` the end it is oriented toward (`orient`: for FINC the end of the excess),
    ``-1`` the other one, scored ``-u``."""

    mode: int
    sign: int


def contrast_ends(positive: Sequence[tuple[Tensor, Tensor]], negative: Sequence[tuple[Tensor, Tensor]]) -> list[bool]:
    """Per mode, whether its other end holds members: ``median(top -u) >= median(top u) / 2`` (module doc).

    Args:
        positive: per mode ``(ids, scores)`` of its top samples by ``u``, scores descending.
        negative: per mode the same by ``-u``.

    Examples:
        >>> import torch
        >>> up = [(torch.arange(2), torch.tensor([8.0, 6.0]))] * 2
        >>> down = [(torch.arange(2), torch.tensor([5.0, 4.0])), (torch.arange(2), torch.tensor([1.0, 0.5]))]
        >>> contrast_ends(up, down)  # mode 1's other end reaches 4.5 >= 7 / 2, mode 2's 0.75 < 3.5
        [True, False]
    """
    ends = []
    for (_, up), (_, down) in zip(positive, negative, strict=True):
        held = bool(up.numel() and down.numel())
        ends.append(held and float(down.double().median()) >= float(up.double().median()) / 2)
    return ends


def end_groups(
    samples: Sequence[tuple[Tensor, Tensor]], rows: Sequence[Tensor], others: Optional[Sequence[bool]] = None,
    containment: float = MERGE_CONTAINMENT, split: float = MERGE_SPLIT,
) -> tuple[list[list[ModeEnd]], list[int]]:
    """The regions of ``k`` modes' ends: per region its ends (the representative first), and each region's column of
    ``samples`` (the representative end's).

    Args:
        samples: ``2k`` ``(ids, scores)`` pairs: the top samples by ``u_j`` (columns ``j < k``), then by ``-u_j``
            (column ``k + j``), as `top_samples_and_rows` returns them for the scores ``[u, -u]``.
        rows: per column (n, 2k), its top samples' scores on every column.
        others: per mode whether its other end is a candidate (default `contrast_ends`).
        containment: and split: `mode_groups`'s.

    Ends are ranked by mode, each mode's first end before its other one; `mode_groups` runs on them.
    """
    k = len(samples) // 2
    others = contrast_ends(samples[:k], samples[k:]) if others is None else others
    ends = [end for j in range(k) for end in ([ModeEnd(j, 1)] + ([ModeEnd(j, -1)] if others[j] else []))]
    columns = [end.mode + (k if end.sign < 0 else 0) for end in ends]
    chosen = torch.tensor(columns, dtype=torch.long)
    representative = mode_groups(
        [samples[c] for c in columns], [rows[c][:, chosen.to(rows[c].device)] for c in columns], containment, split
    )
    groups = groups_of(representative)
    return [[ends[i] for i in group] for group in groups], [columns[group[0]] for group in groups]


class ModeGroups(NamedTuple):
    """Modes reported as regions (``FINCNovelty.grouped_modes``).

    Attributes:
        groups: per region its mode ends (`ModeEnd`, the representative first), representatives ascending by mode.
        samples: per region the representative end's top samples ``(ids, scores)`` (scores on that end: ``-u`` for
            an other end).
        shares: (regions,) the region's share of its side's samples.
        modes: the eigen-pairs the groups index.
        mode_samples: per mode its top samples ``(ids, scores)`` by ``u`` (`top_samples`).
        shares_se: (regions,) the shares' standard errors (the directions held fixed), or ``None``.
    """

    groups: list[list[ModeEnd]]
    samples: list[tuple[Tensor, Tensor]]
    shares: Tensor
    modes: Modes
    mode_samples: list[tuple[Tensor, Tensor]]
    shares_se: Optional[Tensor] = None

    def region_of(self, sign: int = 1) -> list[Optional[int]]:
        """Each mode's region (an index into ``groups``) for its first end (``sign=1``) or its other end
        (``sign=-1``; ``None`` where that end holds no members)."""
        region: list[Optional[int]] = [None] * len(self.mode_samples)
        for index, group in enumerate(self.groups):
            for end in group:
                if end.sign == sign:
                    region[end.mode] = index
        return region


def region_detail(group: list[ModeEnd], modes: Modes, first_rows: Optional[list[Optional[int]]] = None) -> str:
    """``"(eigenvalue 0.012, p=0.001)"``; ``"(the other end of mode 2: ...)"`` for a region led by a mode's other end;
    with ``"; modes 1, 4 merged"`` (1-based) for a region of several modes.

    ``first_rows`` (``ModeGroups.region_of(1)``) names the other end's mode by the row (region) that holds its first end, as
    the galleries and text lines number their rows ("missing region 5"); without it, by the mode's own rank. The merged
    modes are numbered by rank.

    Examples:
        >>> import torch
        >>> values, p_values = torch.tensor([0.02, 0.01]), torch.tensor([1e-3, 0.02])
        >>> modes = Modes(values, torch.eye(2), torch.ones(2, dtype=torch.bool), p_values)
        >>> region_detail([ModeEnd(1, -1), ModeEnd(0, 1)], modes)
        '(the other end of mode 2: eigenvalue 0.01, p=0.02; modes 1, 2 merged)'
        >>> region_detail([ModeEnd(1, -1)], modes, first_rows=[0, 2])
        '(the other end of region 3: eigenvalue 0.01, p=0.02)'
    """
    first = group[0].mode
    text = f"eigenvalue {float(modes.eigenvalues[first]):.3g}, p={float(modes.p_values[first]):.2g}"  # type: ignore[index]
    if group[0].sign < 0:
        row = first_rows[first] if first_rows is not None else None
        text = f"the other end of {'mode' if row is None else 'region'} {(first if row is None else row) + 1}: {text}"
    merged = sorted({end.mode for end in group})
    if len(merged) > 1:
        text += "; modes " + ", ".join(str(i + 1) for i in merged) + " merged"
    return f"({text})"
