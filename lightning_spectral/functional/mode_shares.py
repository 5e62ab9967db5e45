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

(`two_sided_shares`): exact under the model, ``d1^2 / d2`` when ``y`` projects at 0. Its standard error
(`two_sided_share_errors`) is first order in both sides' noise, the mode's turn included (`share_gradients`).
Members that spread around ``a`` make the share an under-estimate, by the factor ``a^2 / E t^2`` over the members.
From the sums alone: any order, batch size and sharding, and no pass over the samples. ``exact_two_sided_shares``
is the n x n oracle.

**A side's own modes** (``FKEAVendi``, ``RFFCovariance``): the first mode of an uncentred covariance is what all
samples share, the others contrast groups with the rest, so no second side says what "the rest" is. The share
counts the samples whose score reaches half the median score of the mode's top samples (its most typical members),
``u(x) >= median(top u) / 2``, in the pass that finds those top samples (`counting`, `counted_shares`): a
histogram of each mode's scores (``BINS`` bins over ``|u| <= sqrt(r)``, summed over ranks; the threshold falls
within one bin, so the count is exact to a bin's width). The first mode counts most samples: it is their common
part, not a class.

``docs/benchmarks/mode-shares.md`` ("Mode shares") measures both against the known share of classes on Fashion-MNIST
and the digits.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from lightning_spectral.algebra.gram import weighted_sum
from lightning_spectral.algebra.minres import minres
from lightning_spectral.functional.sampling_noise import NoiseSums
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


class ShareGradients(NamedTuple):
    """The first-order change of each mode's two-sided share (`two_sided_shares`) under a change ``(de, dC)`` of
    one side's mean and second moment: ``dp_i = first[i] (v_i . de) + v_i^T dC second[:, i]`` per side
    (`share_gradients`), the eigenvector's turn included.

    Attributes:
        vectors: (D, k) the modes' unit eigenvectors ``v_i``.
        first_x: (k,) and second_x: (D, k), the ``x`` side's coefficients.
        first_y: (k,) and second_y: (D, k), the ``y`` side's.
    """

    vectors: Tensor
    first_x: Tensor
    second_x: Tensor
    first_y: Tensor
    second_y: Tensor

    def change(self, side_x: bool, mean: Tensor, moment: Tensor) -> Tensor:
        """``dp`` (k,) for a change ``mean`` (D,) and ``moment`` (D, D) of the ``x`` (``side_x``) or ``y`` side."""
        first, second = (self.first_x, self.second_x) if side_x else (self.first_y, self.second_y)
        vectors = self.vectors
        moment = moment.to(vectors)
        return first * (mean.to(vectors) @ vectors) + (vectors * (moment @ second)).sum(0)


def share_gradients(
    vectors: Tensor, mean_x: Tensor, second_moment_x: Tensor, mean_y: Tensor, second_moment_y: Tensor, rho: float,
    turn: bool = True, basis: Optional[Tensor] = None,
) -> ShareGradients:
    """The delta method for `two_sided_shares` of modes of ``L = C_x - rho C_y`` (FINC eq. 4).

    ``p_i`` depends on each side's ``m1 = v . mu`` and ``m2 = v^T C v`` along the mode and on the mode ``v`` itself,
    which turns with ``L``: ``dv = (lambda I - L)^+ dL v`` (first-order perturbation of a simple eigenvector, Kato
    1995, II-2; ``lambda = v^T L v``). With ``q = dp/dv = p_1x mu_x + 2 p_2x C_x v + p_1y mu_y + 2 p_2y C_y v``
    (``p_1x = dp/dm1_x``, ... by autograd of `share_from_moments`) and ``h = (lambda I - L)^+ (I - v v^T) q``
    (MINRES on ``lambda I - L + v v^T``, which is ``lambda I - L`` on ``v``'s complement and 1 on ``v``)::

        dp = p_1x v.de_x + v^T dC_x (p_2x v + h)  +  p_1y v.de_y + v^T dC_y (p_2y v - rho h)

    Args:
        vectors: (D, k) unit eigenvectors of ``L`` (simple eigenvalues).
        mean_x: (D,) ``mu_x``.
        second_moment_x: (D, D) ``C_x``.
        mean_y: (D,) ``mu_y``.
        second_moment_y: (D, D) ``C_y``.
        rho: ``L``'s weight of ``y``.
        turn: include the eigenvector's turn ``h``; ``False`` holds the directions fixed (any unit vectors, not
            eigenvectors: ``h = 0``).
        basis: (D, K) more eigenvectors of ``L`` found with ``vectors`` (its first k columns are ``vectors``, up to
            sign), or ``None``. On their span ``h`` is explicit, ``sum_j v_j (v_j . q) / (lambda - lambda_j)``, and
            MINRES runs on the rest only, whose eigenvalues ``lambda - lambda_j`` no longer hold the nearest ones
            (``j <= K``): fewer steps, the same ``h`` to the solver's tolerance.

    Returns:
        A `ShareGradients` (float64).
    """
    vectors = vectors.double()
    device = vectors.device
    mean_x, mean_y = mean_x.double().to(device), mean_y.double().to(device)
    moment_x, moment_y = second_moment_x.double().to(device), second_moment_y.double().to(device)
    moments = [part.detach().requires_grad_(True) for part in (*_moments(vectors, mean_x, moment_x),
                                                                 *_moments(vectors, mean_y, moment_y))]
    with torch.enable_grad():
        share = share_from_moments(*moments)
        grads = torch.autograd.grad(share.sum(), moments, allow_unused=True)
    p1x, p2x, p1y, p2y = (torch.zeros_like(m) if g is None else g.detach() for g, m in zip(grads, moments, strict=True))
    if not turn:
        return ShareGradients(vectors, p1x, p2x * vectors, p1y, p2y * vectors)
    cx_v, cy_v = moment_x @ vectors, moment_y @ vectors
    q = mean_x[:, None] * p1x + 2 * cx_v * p2x + mean_y[:, None] * p1y + 2 * cy_v * p2y  # (D, k)
    q = q - vectors * (vectors * q).sum(0)
    differential = weighted_sum([(1.0, moment_x), (-rho, moment_y)])  # one pass, no full-size temporaries
    values = (vectors * (differential @ vectors)).sum(0)  # (k,) Rayleigh quotients
    basis = vectors if basis is None else basis.double().to(device)
    count = vectors.shape[1]
    if basis.shape[1] < count or not bool(((basis[:, :count] * vectors).sum(0).abs() > 1 - 1e-6).all()):
        raise ValueError("share_gradients: `basis` must hold `vectors` (up to sign) as its first columns.")
    basis_values = (basis * (differential @ basis)).sum(0)  # (K,)
    coefficients = basis.T @ q  # (K, k): q along the known eigenvectors, solved exactly there
    gaps = values[None, :] - basis_values[:, None]
    own = torch.arange(basis.shape[1], device=device)[:, None] == torch.arange(count, device=device)[None, :]
    known = basis @ torch.where(own, torch.zeros_like(gaps), coefficients / torch.where(own, 1.0, gaps))
    rest = q - basis @ coefficients

    def apply(h: Tensor) -> Tensor:
        inside = basis @ (basis.T @ h)
        moved = values * (h - inside) - differential @ (h - inside)
        return moved - basis @ (basis.T @ moved) + inside

    h = minres(apply, rest)  # to 1e-10: the same digits under any order of the sums (1e-7 left 4e-8 between orders)
    h = h - basis @ (basis.T @ h) + known
    return ShareGradients(vectors, p1x, p2x * vectors + h, p1y, p2y * vectors - rho * h)


class ShareErrors(NamedTuple):
    """Standard errors of two-sided shares (`two_sided_share_errors`).

    Attributes:
        se: (k,) ``sqrt(mean_a d_a^2 + var_other / n_other)``.
        replicates: (A, k) the first-order replicates ``d_a`` of the side with draws.
        other: (k,) ``var_other / n_other``, the other side's part (its per-sample variance from the model).
    """

    se: Tensor
    replicates: Tensor
    other: Tensor


def two_sided_share_errors(
    vectors: Tensor,
    mean_x: Tensor,
    second_moment_x: Tensor,
    mean_y: Tensor,
    second_moment_y: Tensor,
    rho: float,
    noise: NoiseSums,
    noise_is_x: bool,
    count_other: float,
    turn: bool = True,
    basis: Optional[Tensor] = None,
) -> ShareErrors:
    """Standard errors (k,) of `two_sided_shares` of modes of ``C_x - rho C_y`` when one side keeps multiplier draws.

    First order (`share_gradients`): the share moves by the mean of a per-sample function on each side,
    ``f(phi) = t (first + second . phi)`` (``t = v . phi``) minus its expectation, so its variance is
    ``Var_x f_x / n_x + Var_y f_y / n_y`` (independent sides).

    - The side with draws (``noise``: ``e_a``, ``E_a``,
      [`NoiseSums.mean_draw`][lightning_spectral.functional.sampling_noise.NoiseSums.mean_draw]):
      its replicates ``d_a = dp(e_a, E_a)``, exact multiplier-bootstrap draws of its part.
    - The other side keeps no draws: ``Var f`` needs fourth moments the sums do not hold. It is read from the
      share's own model (module doc: ``x`` = a share ``p`` of members at one projection + ``1 - p`` samples like
      ``y``): ``Var_x f = (1 - p) Var_y f + p (1 - p) (m - E_y f)^2``, ``m = (E_x f - (1 - p) E_y f) / p`` the
      members' value of ``f`` (clamped to ``|f| <= |first| + |second|``, features of unit norm), the means ``E f``
      from the sums. ``Var f`` of the side with draws is ``n mean_a d_a'^2`` (``d_a'`` the draws through the other
      side's coefficients). At ``p = 0`` both sides' per-sample noise is taken equal (FINC's null,
      [`noise_scale`][lightning_spectral.functional.finc_null.noise_scale]).

    Args:
        vectors: (D, k) unit eigenvectors of ``C_x - rho C_y``.
        mean_x: (D,) ``mu_x``.
        second_moment_x: (D, D) ``C_x``.
        mean_y: (D,) ``mu_y``.
        second_moment_y: (D, D) ``C_y``.
        rho: the weight of ``y``.
        noise: the side with draws (with ``weighted_features``).
        noise_is_x: whether that side is ``x``.
        count_other: the other side's sample count.
        turn: `share_gradients`' (``False``: ``vectors`` are fixed directions, not eigenvectors).
        basis: `share_gradients`' (more eigenvectors of ``C_x - rho C_y``, ``vectors`` first: fewer solver steps).
    """
    gradients = share_gradients(vectors, mean_x, second_moment_x, mean_y, second_moment_y, rho, turn, basis)
    return two_sided_errors(gradients, mean_x, second_moment_x, mean_y, second_moment_y, noise, noise_is_x, count_other)


def two_sided_errors(
    gradients: ShareGradients,
    mean_x: Tensor,
    second_moment_x: Tensor,
    mean_y: Tensor,
    second_moment_y: Tensor,
    noise: NoiseSums,
    noise_is_x: bool,
    count_other: float,
) -> ShareErrors:
    """`two_sided_share_errors` of any statistic whose first-order change is ``gradients``' per-sample function
    ``f`` (a mode's share, or its eigenvalue: `eigenvalue_gradients`), with the share's model for the side without
    draws (the model reads each mode's share, `two_sided_shares`)."""
    vectors = gradients.vectors
    own = _draw_changes(gradients, noise, noise_is_x)  # (A, k)
    through_other = _draw_changes(gradients, noise, not noise_is_x)
    variance_noise_side = noise.count * through_other.pow(2).mean(0)  # Var f_other on the side with draws
    first, second = (gradients.first_y, gradients.second_y) if noise_is_x else (gradients.first_x, gradients.second_x)

    def expectation(mean: Tensor, moment: Tensor) -> Tensor:
        return first * (mean.double().to(vectors) @ vectors) + (vectors * (moment.double().to(vectors) @ second)).sum(0)

    expect_x, expect_y = expectation(mean_x, second_moment_x), expectation(mean_y, second_moment_y)
    share = two_sided_shares(vectors, mean_x, second_moment_x, mean_y, second_moment_y)
    bound = first.abs() + second.norm(dim=0)
    member = (expect_x - (1 - share) * expect_y) / share.clamp_min(1e-300)
    member = torch.maximum(torch.minimum(member, bound), -bound)
    excess = torch.where(share > 0, share * (1 - share) * (member - expect_y) ** 2, torch.zeros_like(share))
    if noise_is_x:  # the other side is y: Var_y f = (Var_x f - excess) / (1 - p)
        variance_other = torch.where(
            share < 1, (variance_noise_side - excess).clamp_min(0) / (1 - share).clamp_min(1e-300), variance_noise_side
        )
    else:  # the other side is x, the one holding the mode
        variance_other = (1 - share) * variance_noise_side + excess
    other = variance_other / count_other
    return ShareErrors((own.pow(2).mean(0) + other).sqrt(), own, other)


def eigenvalue_gradients(vectors: Tensor, rho: float) -> ShareGradients:
    """The first-order change of the eigenvalues ``lambda_i = v_i^T (C_x - rho C_y) v_i`` as `ShareGradients`:
    ``d lambda_i = v_i^T dC_x v_i - rho v_i^T dC_y v_i`` (Kato 1995, II-2), so per sample ``f = t^2`` on the ``x``
    side and ``-rho t^2`` on the ``y`` side, ``t = v_i . phi``."""
    vectors = vectors.double()
    zeros = vectors.new_zeros(vectors.shape[1])
    return ShareGradients(vectors, zeros, vectors, zeros, -rho * vectors)


def _draw_changes(gradients: ShareGradients, noise: NoiseSums, side_x: bool) -> Tensor:
    """`ShareGradients.change` (A, k) of every draw ``(e_a, E_a)`` of ``noise`` as a change of the ``x`` (``side_x``)
    or ``y`` side, with ``E_a second`` from `NoiseSums.draws_times` (no ``E_a`` formed)."""
    first, second = (gradients.first_x, gradients.second_x) if side_x else (gradients.first_y, gradients.second_y)
    vectors = gradients.vectors
    means = torch.stack([noise.mean_draw(a) for a in range(noise.draws)]).to(vectors)  # (A, D)
    moved = noise.draws_times(second).to(vectors)  # (A, D, k)
    return first * (means @ vectors) + (vectors * moved).sum(1)


def exact_two_sided_shares(x: Tensor, y: Tensor, sigma: float, rho: float, k: int) -> tuple[Tensor, Tensor]:
    """The oracle: eigenvalues and shares of ``x`` (each (k,)) of the top ``k`` modes of ``C_x - rho C_y`` under the
    Gaussian kernel, from the (n + m) x (n + m) kernel matrix. O((n + m)^3), for small n, m.

    With ``Psi`` the features of both sides stacked, ``K = Psi Psi^T`` and ``S = diag(1/n, ..., -rho/m, ...)``,
    ``C_x - rho C_y = Psi^T S Psi`` has the eigenvalues of ``K^(1/2) S K^(1/2)``; an eigenvector ``w`` of that gives
    the unit eigenvector ``v = Psi^T K^(-1/2) w``, whose projections are ``Psi v = K^(1/2) w``, signed as
    `FINCNovelty` signs its modes: ``v . (mu_x - mu_y) >= 0``.
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
    t = t * torch.where(t[:n].mean(0) - t[n:].mean(0) < 0, -1.0, 1.0)
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
        index: the row's rank, from 0 (a FINC gallery's region; a side's own mode).
        share: its share of ``side``'s samples (module doc).
        side: ``"reference"``, ``"generated samples"`` or ``"samples"``.
        detail: what follows the line (``"(eigenvalue 0.012, p=0.001)"``), or ``""``.
        share_se: the share's standard error, where the metric gives one (logged beside the share, not in the line).
        unit: what a row is: ``"mode"`` (an eigenpair) or ``"region"`` (FINC's rows: both ends of its modes, split
            modes as one), so rows and the count of significant modes never number different things alike.
    """

    kind: str
    index: int
    share: float
    side: str
    detail: str = ""
    share_se: Optional[float] = None
    unit: str = "mode"

    def line(self, labels: Optional[Sequence[object]] = None) -> str:
        """`mode_line` of this row with ``labels`` (its top samples' classes), then ``detail``."""
        text = mode_line(self.kind, self.index, self.share, self.side, labels, self.unit)
        return f"{text} {self.detail}" if self.detail else text


def mode_line(
    kind: str, index: int, share: float, side: str, labels: Optional[Sequence[object]] = None, unit: str = "mode"
) -> str:
    """``"missing region 1: class 7 (19 of its top 20), about 10 % of the reference"``.

    Args:
        kind: ``"missing"``, ``"novel"`` or ``""`` (a side's own mode).
        index: the row's rank, from 0 (a FINC gallery's region; a side's own mode).
        share: its share of ``side``'s samples.
        side: ``"reference"`` or ``"generated samples"``.
        labels: the known labels of its top samples (best first), or ``None``.
        unit: ``"mode"`` or ``"region"`` (`ModeRow.unit`).

    Examples:
        >>> mode_line("missing", 0, 0.1, "reference", [7] * 19 + [1], unit="region")
        'missing region 1: class 7 (19 of its top 20), about 10 % of the reference'
        >>> mode_line("", 1, 0.052, "samples")
        'mode 2: about 5 % of the samples'
    """
    name = f"{kind} {unit} {index + 1}" if kind else f"{unit} {index + 1}"
    about = f"about {100 * share:.0f} % of the {side}" if share >= 0.01 else f"under 1 % of the {side}"
    if labels is None or len(labels) == 0:
        return f"{name}: {about}"
    return f"{name}: {class_phrase(labels)}, {about}"


def class_phrase(labels: Sequence[object]) -> str:
    """``"class 7 (19 of its top 20)"``: the commonest of a row's labels (best first) and how many of them it is.

    Examples:
        >>> class_phrase([7] * 19 + [1])
        'class 7 (19 of its top 20)'
    """
    dominant, count = dominant_label(labels)
    return f"class {dominant} ({count} of its top {len(labels)})"


def dominant_label(labels: Sequence[object]) -> tuple[object, int]:
    """The most common label and how many times it occurs (ties: the first seen)."""
    counts: dict[object, int] = {}
    for label in labels:
        key = label.item() if isinstance(label, Tensor) else label
        counts[key] = counts.get(key, 0) + 1
    best = max(counts, key=lambda key: counts[key])
    return best, counts[best]
