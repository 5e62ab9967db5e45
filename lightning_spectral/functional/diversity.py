"""A diversity loss for generative training and a guidance step for samplers: the order-2 kernel entropy (RKE) of a
batch against the random-feature covariance of the samples seen before it.

RKE is ``1 / E k(x, y)^2`` over pairs of distinct samples (the Renyi kernel entropy of order 2, Jalali et al. 2023,
"An information-theoretic evaluation of generative models in learning multi-modal distributions", NeurIPS; FKEA
section 3). With unit-norm features ``phi`` (``k = phi(x)^T phi(y)``) and the running covariance ``C`` of earlier
samples of total weight ``w`` (`RunningCovariance`), the batch's mean squared similarity to every other sample,
earlier ones and its own, is::

    s = (2 w sum_i phi_i^T C phi_i + sum_{i != j} (phi_i^T phi_j)^2) / (2 w n + n (n - 1))

(``phi_i^T C phi_i`` is sample ``i``'s mean squared similarity to the earlier samples: O((2r)^2) whatever their
number). The loss is ``log s``: minus the log of the RKE the batch sees, so lower is more diverse; without earlier
samples (``w = 0``) it is the batch's own ``-log RKE``. Its gradient pushes each sample away from where the batch
and the history are dense, as the RKE guidance of SPARKE (Jalali et al. 2025, arXiv 2506.10173) does with a memory
bank of past features; here the covariance summarises them.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import all_finite
from lightning_spectral.algebra.precision import full_precision
from lightning_spectral.functional.running_covariance import RunningCovariance
from lightning_spectral.sync.collectives import all_reduce_sum, collective_device, distributed_available


def diversity_loss(features: Tensor, running: Optional[RunningCovariance] = None, sync: bool = True) -> Tensor:
    """``log s`` (module doc): minus the log RKE of the batch against itself and ``running``'s earlier samples.

    Under DDP (``sync``) the batch is every rank's rows: one all-reduce of the batch's ``Phi^T Phi`` gives every
    rank the value of the whole batch, and each rank's gradient is that value's gradient with respect to its own rows
    (``d s / d phi_i = 4 (Q + w C - ||phi_i||^2 I) phi_i / (pairs)``, ``Q = sum_j phi_j phi_j^T`` over all ranks), so
    the value and the gradient are those of one process fed all the rows.

    Args:
        features: (n, 2r) unit-norm features of the batch (a random-feature map's output, or unit-length
            embeddings for the cosine kernel), with their graph: the gradient flows back through them.
        running: the earlier samples' covariance, or ``None`` (the batch alone, ``n >= 2``). Not updated here.
        sync: under DDP, the batch is every rank's rows (one all-reduce); ``False``: this rank's alone.

    Returns:
        A float64 scalar with the graph of ``features``.

    Raises:
        ValueError: not a (n, 2r) tensor, NaN / Inf, a width other than ``running``'s, or one row without earlier
            samples.

    Examples:
        >>> import torch
        >>> same = torch.full((4, 2), 0.5 ** 0.5, dtype=torch.float64)  # a collapsed batch: s = 1
        >>> abs(float(diversity_loss(same))) < 1e-12
        True
        >>> apart = torch.eye(4)                          # four orthogonal samples: s = 0 between them
        >>> bool(diversity_loss(torch.cat([apart, apart])) < diversity_loss(same))
        True
    """
    if not isinstance(features, Tensor):
        kind = type(features).__name__
        raise ValueError(f"diversity_loss: `features` must be a floating (n, 2r) tensor, got {kind}.")
    with torch.autocast(features.device.type, enabled=False), full_precision():  # float32 products, as the metrics'
        return _diversity_loss(features, running, sync)


def _diversity_loss(features: Tensor, running: Optional[RunningCovariance], sync: bool) -> Tensor:
    if not isinstance(features, Tensor) or features.ndim != 2 or not features.is_floating_point():
        kind = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(f"diversity_loss: `features` must be a floating (n, 2r) tensor, got {kind}.")
    if not all_finite(features.detach()):
        raise ValueError("diversity_loss: `features` holds NaN or infinite values.")
    weight = 0.0 if running is None else running.weight
    if running is not None and features.shape[1] != running.width:
        raise ValueError(f"diversity_loss: `features` are {features.shape[1]} wide, the running covariance "
                         f"{running.width}: pass features of the map it was built for.")
    rows = features.detach().double()
    norms = rows.square().sum(1)  # ||phi_i||^2
    fourth, count = norms.square().sum(), float(rows.shape[0])
    similar = None  # C phi_i, in the features' precision (float32 features: float32 products, float64 sums)
    if weight > 0:
        moment = running.covariance_float32() if features.dtype == torch.float32 else running.covariance()  # type: ignore[union-attr]
        similar = (features.detach() @ moment.to(features.device, features.dtype)).double()
    seen = (rows * similar).sum() if similar is not None else fourth.new_zeros(())  # sum_i phi_i^T C phi_i
    across = sync and distributed_available()
    if across or rows.shape[0] > rows.shape[1]:  # the batch's Q = Phi^T Phi (2r, 2r)
        outer = rows.T @ rows
        if across:  # one all-reduce of [Q, sum ||phi||^4, sum phi^T C phi, n]: the whole batch's sums
            packed = torch.cat([outer.flatten(), torch.stack([fourth, seen]), outer.new_tensor([count])])
            packed = all_reduce_sum(packed.to(collective_device(None)))[0].to(outer.device)
            outer, fourth, seen, count = packed[:-3].view_as(outer), packed[-3], packed[-2], float(packed[-1])
        moved = rows @ outer  # Q phi_i
        own = outer.square().sum()
    else:  # n <= 2r on one process: the (n, n) Gram, G Phi = Q Phi
        gram = rows @ rows.T
        moved, own = gram @ rows, gram.square().sum()
    if count < 2 and weight <= 0:
        raise ValueError(f"diversity_loss: {count:g} row and no earlier samples: a similarity needs two samples; "
                         "pass a batch of at least 2 or a running covariance that holds earlier samples.")
    # sum over pairs of distinct batch rows of (phi_i . phi_j)^2 = ||Q||_F^2 - sum_i ||phi_i||^4, and each row's
    # mean squared similarity to the earlier samples, phi_i^T C phi_i, summed (tr(C Q)); the total's gradient in this
    # rank's row i is 4 (Q phi_i - ||phi_i||^2 phi_i + w C phi_i), computed here without a graph (the products above
    # are their own gradients) and attached through one product with the features
    total, pairs = own - fourth, count * (count - 1)
    direction = moved - norms[:, None] * rows
    if similar is not None:
        total, pairs = total + 2.0 * weight * seen, pairs + 2.0 * weight * count
        direction = direction + weight * similar
    total = total.clamp_min(torch.finfo(torch.float64).tiny)
    # log(total)'s gradient 4 direction / total, attached through one product (its value, about 4, is unused; the
    # division first keeps it within float16's range at any batch size)
    surrogate = 4.0 * (features * (direction / total).to(features.dtype)).sum()
    return torch.log(total / pairs) + (surrogate - surrogate.detach()).double()


def diversity_guidance(
    x: Tensor,
    feature_map: Callable[[Tensor], Tensor],
    running: Optional[RunningCovariance] = None,
) -> Tensor:
    """The gradient, for a sampler's step, of the batch's `diversity_loss` with respect to its samples (or latents)
    ``x``: ``n d(log s)/dx``, so that each row's push does not shrink with the batch size. A sampler steps
    ``x <- x - scale * diversity_guidance(x, ...)`` (away from where the batch and the samples drawn so far are
    dense), then adds the batch's features to ``running`` once its samples are final.

    Args:
        x: (n, ...) the batch at this step (no graph needed).
        feature_map: samples to unit-norm features (n, 2r), differentiable (a `GaussianRFF`, or an encoder
            followed by one).
        running: the earlier samples' covariance (`RunningCovariance`), or ``None``.

    Returns:
        (n, ...) in ``x``'s dtype, detached.
    """
    with torch.enable_grad():
        leaf = x.detach().requires_grad_(True)
        loss = diversity_loss(feature_map(leaf), running) * leaf.shape[0]
        (gradient,) = torch.autograd.grad(loss, leaf)
    return gradient.detach()
