"""A mode's share of its side's samples, and the line a person reads about a mode.

An eigenvalue is not a share: a cluster holding a fraction ``p`` of a side's samples, with mean feature ``m`` and
within-mode similarity ``s = ||m||^2 = E k(x, y)`` over its members, gives an eigenvalue of about ``p s`` (FINC
section 3; ``(p_x - rho p_y) s`` for a mode of ``C_x - rho C_y``), so a class of 10 % reads 0.02 when ``s`` is 0.2.
The share reads ``p`` instead. Along a mode's unit eigenvector ``v`` every sample has a projection
``t(x) = v . phi(x)`` (``u = sqrt(r) t`` is its mode score).

**A mode of two sides** (FINC's novel and missing modes, of ``C_x - rho C_y``: ``x`` the side the mode is
over-represented in). Model: ``x`` holds a share ``p`` of the mode's members, whose projections sit at ``a``, and
its other samples project like the samples of ``y``. Then the first two moments of ``t`` on each side (from the
sums: ``E_x t = v . mu_x``, ``E_x t^2 = v^T C_x v``) give::

    d1 = E_x t - E_y t = p (a - b),    d2 = E_x t^2 - E_y t^2 = p (a^2 - c),    b = E_y t,  c = E_y t^2
    V p^2 + (d2 - 2 b d1) p - d1^2 = 0,    V = c - b^2
    share p = 2 d1^2 / (B + sqrt(B^2 + 4 V d1^2)),    B = d2 - 2 b d1          (clamped to [0, 1]; 0 if d1 <= 0)

(`two_sided_shares`): exact under the model, ``d1^2 / d2`` when ``y`` projects at 0. Members that spread around
``a`` make it an under-estimate, by the factor ``a^2 / E t^2`` over the members. From the sums alone: any order,
batch size and sharding, and no pass over the samples. ``exact_two_sided_shares`` is the n x n oracle.

**A side's own modes** (``FKEAVendi``, ``RFFCovariance``): the first mode of an uncentred covariance is what all
samples share, the others contrast groups with the rest, so no second side says what "the rest" is. The share
counts the samples whose score reaches half the median score of the mode's top samples (its most typical members),
``u(x) >= median(top u) / 2``, in the pass that finds those top samples (`counting`, `counted_shares`): a
histogram of each mode's scores (``BINS`` bins over ``|u| <= sqrt(r)``, summed over ranks; the threshold falls
within one bin, so the count is exact to a bin's width). The first mode counts most samples: it is their common
part, not a class.

``docs/benchmarks.md`` ("Mode shares") measures both against the known share of classes on Fashion-MNIST and the
digits.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from lightning_spectral.sync.collectives import all_reduce_sum, collective_device, distributed_available

#: Histogram bins of a mode's scores, over ``[-sqrt(r), sqrt(r)]`` (every ``|u| <= sqrt(r)``: unit-norm features).
BINS = 1024


def _moments(vectors: Tensor, mean: Tensor, second_moment: Tensor) -> tuple[Tensor, Tensor]:
    vectors = vectors.double()
    first = mean.double().to(vectors.device) @ vectors  # (k,) E t = v . mu
    second = (vectors * (second_moment.double().to(vectors.device) @ vectors)).sum(0)  # (k,) E t^2 = v^T C v
    return first, second


def share_from_moments(first_x: Tensor, second_x: Tensor, first_y: Tensor, second_y: Tensor) -> Tensor:
    """``p = 2 d1^2 / (B + sqrt(B^2 + 4 V d1^2))`` (module doc) from each side's ``E t`` and ``E t^2`` (k,) each."""
    d1, d2 = first_x - first_y, second_x - second_y
    b, variance = first_y, (second_y - first_y**2).clamp_min(0)
    big = d2 - 2 * b * d1
    denominator = big + torch.sqrt(big**2 + 4 * variance * d1**2)
    share = torch.where(denominator > 0, 2 * d1**2 / denominator.clamp_min(1e-300), torch.ones_like(d1))
    return torch.where(d1 > 0, share, torch.zeros_like(d1)).clamp(0, 1)


def two_sided_shares(
    vectors: Tensor, mean_x: Tensor, second_moment_x: Tensor, mean_y: Tensor, second_moment_y: Tensor
) -> Tensor:
    """Each mode's share of the ``x`` side's samples (k,), for modes of ``C_x - rho C_y`` (module doc).

    Args:
        vectors: (D, k) unit eigenvectors (columns).
        mean_x: (D,) ``mu_x``, the mean feature of the side the modes are over-represented in.
        second_moment_x: (D, D) its uncentred second moment ``C_x``.
        mean_y: (D,) and second_moment_y: (D, D), the other side's.

    Examples:
        >>> import torch
        >>> # x: 10 % at feature e_1, the rest at e_2 as all of y; the mode e_1 holds 10 % of x
        >>> mu_x, C_x = torch.tensor([0.1, 0.9]), torch.diag(torch.tensor([0.1, 0.9]))
        >>> mu_y, C_y = torch.tensor([0.0, 1.0]), torch.diag(torch.tensor([0.0, 1.0]))
        >>> two_sided_shares(torch.eye(2)[:, :1], mu_x, C_x, mu_y, C_y)
        tensor([0.1000], dtype=torch.float64)
    """
    first_x, second_x = _moments(vectors, mean_x, second_moment_x)
    first_y, second_y = _moments(vectors, mean_y, second_moment_y)
    return share_from_moments(first_x, second_x, first_y, second_y)


def exact_two_sided_shares(x: Tensor, y: Tensor, sigma: float, rho: float, k: int) -> tuple[Tensor, Tensor]:
    """The oracle: eigenvalues and shares of ``x`` (each (k,)) of the top ``k`` modes of ``C_x - rho C_y`` under the
    Gaussian kernel, from the (n + m) x (n + m) kernel matrix. O((n + m)^3), for small n, m.

    With ``Psi`` the features of both sides stacked, ``K = Psi Psi^T`` and ``S = diag(1/n, ..., -rho/m, ...)``,
    ``C_x - rho C_y = Psi^T S Psi`` has the eigenvalues of ``K^(1/2) S K^(1/2)``; an eigenvector ``w`` of that gives
    the unit eigenvector ``v = Psi^T K^(-1/2) w``, whose projections are ``Psi v = K^(1/2) w``, signed so that
    ``v . mu_x >= 0``.
    """
    from lightning_spectral.kernels.exact import gaussian_kernel

    x, y = x.double(), y.double()
    n, m = x.shape[0], y.shape[0]
    both = torch.cat([x, y])
    values, vectors = torch.linalg.eigh(gaussian_kernel(both, sigma=sigma).double())
    root = (vectors * values.clamp_min(0).sqrt()) @ vectors.T
    weights = torch.cat([torch.full((n,), 1.0 / n), torch.full((m,), -rho / m)]).double()
    middle = root @ (weights[:, None] * root)
    eigenvalues, w = torch.linalg.eigh((middle + middle.T) / 2)
    eigenvalues, w = eigenvalues.flip(0)[:k], w.flip(1)[:, :k]
    t = root @ w  # (n + m, k) projections
    t = t * torch.where(t[:n].sum(0) < 0, -1.0, 1.0)
    first_x, second_x, first_y, second_y = t[:n].mean(0), (t[:n] ** 2).mean(0), t[n:].mean(0), (t[n:] ** 2).mean(0)
    return eigenvalues, share_from_moments(first_x, second_x, first_y, second_y)


def counting(
    score: Callable[[object], Tensor], k: int, n_frequencies: int
) -> tuple[Callable[[object], Tensor], Tensor]:
    """Wrap a top-sample ``score`` (features -> (N, k) mode scores ``u``) so that it also fills each mode's
    histogram of scores (``BINS`` bins over ``[-sqrt(r), sqrt(r)]``, float64 (k, BINS)): sum it over ranks, then read
    it with `counted_shares`.
    """
    histogram = torch.zeros(k, BINS, dtype=torch.float64)
    edge = math.sqrt(n_frequencies)

    def counted(features: object) -> Tensor:
        scores = score(features)
        bins = ((scores.detach().double().cpu() + edge) * (BINS / (2 * edge))).floor().long().clamp(0, BINS - 1)
        offsets = torch.arange(k)[None, :] * BINS
        histogram.view(-1).add_(torch.bincount((bins + offsets).flatten(), minlength=k * BINS).double())
        return scores

    return counted, histogram


def summed_over_ranks(histogram: Tensor, group: Optional[object] = None) -> Tensor:
    """Every rank's ``histogram`` summed (one all-reduce on the collective's device), on the CPU; a collective under
    DDP, the histogram itself otherwise."""
    if distributed_available():
        histogram = all_reduce_sum(histogram.to(collective_device(group)), group)[0]
    return histogram.cpu()


def counted_shares(histogram: Tensor, top: Sequence[tuple[Tensor, Tensor]], n_frequencies: int) -> Tensor:
    """Each mode's share of the scored samples (k,): those with ``u >= median(top u) / 2`` (module doc), counted in
    ``histogram`` (k, BINS) from the bin that holds the threshold on (0 for a mode without top samples)."""
    edge = math.sqrt(n_frequencies)
    shares = torch.zeros(histogram.shape[0], dtype=torch.float64)
    for j, (_, scores) in enumerate(top):
        seen = float(histogram[j].sum())
        if scores.numel() == 0 or seen <= 0:
            continue
        threshold = float(scores.double().median()) / 2
        first = int(min(max(math.floor((threshold + edge) * BINS / (2 * edge)), 0), BINS - 1))
        shares[j] = float(histogram[j, first:].sum()) / seen
    return shares


class ModeRow(NamedTuple):
    """What a gallery row says about its mode; `line` writes it, with the dominant class once labels are known.

    Attributes:
        kind: ``"missing"``, ``"novel"`` or ``""`` (a side's own mode).
        index: the mode's rank, from 0.
        share: its share of ``side``'s samples (module doc).
        side: ``"reference"``, ``"generated samples"`` or ``"samples"``.
        detail: what follows the line (``"(eigenvalue 0.012, p=0.001)"``), or ``""``.
    """

    kind: str
    index: int
    share: float
    side: str
    detail: str = ""

    def line(self, labels: Optional[Sequence[object]] = None) -> str:
        """`mode_line` of this row with ``labels`` (its top samples' classes), then ``detail``."""
        text = mode_line(self.kind, self.index, self.share, self.side, labels)
        return f"{text} {self.detail}" if self.detail else text


def mode_line(
    kind: str, index: int, share: float, side: str, labels: Optional[Sequence[object]] = None
) -> str:
    """``"missing mode 1: class 7 (19 of its top 20), about 10 % of the reference"``.

    Args:
        kind: ``"missing"``, ``"novel"`` or ``""`` (a side's own mode).
        index: the mode's rank, from 0.
        share: its share of ``side``'s samples.
        side: ``"reference"`` or ``"generated samples"``.
        labels: the known labels of its top samples (best first), or ``None``.

    Examples:
        >>> mode_line("missing", 0, 0.1, "reference", [7] * 19 + [1])
        'missing mode 1: class 7 (19 of its top 20), about 10 % of the reference'
        >>> mode_line("novel", 1, 0.052, "generated samples")
        'novel mode 2: about 5 % of the generated samples'
    """
    name = f"{kind} mode {index + 1}" if kind else f"mode {index + 1}"
    about = f"about {100 * share:.0f} % of the {side}" if share >= 0.01 else f"under 1 % of the {side}"
    if labels is None or len(labels) == 0:
        return f"{name}: {about}"
    dominant, count = dominant_label(labels)
    return f"{name}: class {dominant} ({count} of its top {len(labels)}), {about}"


def dominant_label(labels: Sequence[object]) -> tuple[object, int]:
    """The most common label and how many times it occurs (ties: the first seen)."""
    counts: dict[object, int] = {}
    for label in labels:
        key = label.item() if isinstance(label, Tensor) else label
        counts[key] = counts.get(key, 0) + 1
    best = max(counts, key=lambda key: counts[key])
    return best, counts[best]
