"""Modes of a kernel covariance: eigen-pairs, the per-sample mode score and streamed top-sample retrieval.

The score of input ``x`` for the mode with eigenvector ``v`` (of the 2r x 2r covariance) is
``u(x) = sqrt(r) * v . phi(x)`` (FKEA Remark 2, eq. 5, with its typo corrected; FINC section 5.2 gives the
same function). It applies to fresh samples as well as to the ones the covariance was built from.
An eigenvector's sign is arbitrary; it is fixed so that the scores sum to a non-negative value over the
fitting set (``v . sum_i phi(x_i) >= 0``, the rule of the official FKEA and FINC code), and fresh samples
are scored with that same sign. A mode of ``C_x - rho C_y`` (FINC) is oriented toward the side that holds its
excess, ``v . (mu_x - mu_y) >= 0`` (ours: the fitting set's sum can point a contrast of a missing and a present
class at the present one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Callable, NamedTuple, Optional, Union

import torch
from torch import Tensor

from lightning_spectral._checks import check_batches, check_memory, check_positive_int
from lightning_spectral.algebra.precision import full_precision
from lightning_spectral.kernels.gaussian_rff import GaussianRFF
from lightning_spectral.sync.collectives import all_gather_rows, collective_device, distributed_available

Ids = Union[Tensor, Sequence[int]]


class Modes(NamedTuple):
    """Top eigen-pairs of a covariance (or of a difference of covariances), largest eigenvalue first.

    Attributes:
        eigenvalues: (k,) float64.
        eigenvectors: (2r, k) float64, unit columns, sign fixed by `orient` (module doc).
        significant: (k,) bool; which eigenvalues pass the method's threshold (all True where none applies).
        p_values: (k,) float64, the chance that sampling noise alone reaches each eigenvalue (FINC), or ``None``
            where the method has no test.
    """

    eigenvalues: Tensor
    eigenvectors: Tensor
    significant: Tensor
    p_values: Optional[Tensor] = None


def orient(eigenvectors: Tensor, feature_sum: Tensor) -> Tensor:
    """Flip eigenvector columns so that ``v . feature_sum >= 0`` (scores sum >= 0 over the fitting set; FINC
    passes ``mu_x - mu_y``)."""
    signs = torch.where(feature_sum.double() @ eigenvectors.double() < 0, -1.0, 1.0)
    return eigenvectors * signs.to(eigenvectors.dtype)


def mode_scores(features: Tensor, feature_map: GaussianRFF, eigenvectors: Tensor) -> Tensor:
    """Scores ``u(x) = sqrt(r) phi(x) . v`` of samples (N, d) for each eigenvector column (2r, k): (N, k)."""
    with full_precision():  # whatever `set_float32_matmul_precision` says: a sample's score, not a bfloat16 one
        phi = feature_map(features)
        return math.sqrt(feature_map.n_frequencies) * (phi @ eigenvectors.to(device=phi.device, dtype=phi.dtype))


def _as_ids(ids: Ids, n: int, device: torch.device) -> Tensor:
    ids = torch.as_tensor(ids, device=device)
    if ids.ndim != 1 or ids.shape[0] != n or ids.is_floating_point():
        raise ValueError(f"top_samples: ids must be {n} integers (one per sample), got shape {tuple(ids.shape)}.")
    return ids.long()


def check_candidates_memory(owner: str, k: int, per_mode: int, argument: str = "per_mode", rows: bool = False) -> None:
    """Raise before the top-sample search allocates its ``k x per_mode`` candidates when they cannot fit.

    The search holds float64 scores and int64 ids of ``k * per_mode`` candidates, twice while merging a batch
    (and once more per rank under DDP); with ``rows``, each candidate's ``k`` scores as well.

    Raises:
        ValueError: naming ``argument`` and the bytes.
    """
    needed = 2 * (16 + (8 * k if rows else 0)) * k * per_mode
    check_memory(
        owner, argument, per_mode, needed, f"scores and ids of {k} x {per_mode} candidates",
        f"ask for fewer samples per mode (`{argument}`; a gallery row shows 8 to 16)",
    )


def top_samples(
    batches: Iterable[tuple[Any, Ids]],
    score: Callable[[Any], Tensor],
    k: int,
    per_mode: int,
    group: Optional[Any] = None,
) -> list[tuple[Tensor, Tensor]]:
    """Stream ``(features, ids)`` batches and keep, per mode, the ``per_mode`` highest-scoring samples.

    Memory is ``O(k * per_mode)`` plus one batch. Equal scores are ranked by id (smaller first), so the answer
    does not depend on the order of the batches or on the sharding. Under DDP every rank streams its own shard,
    then only the candidates (``k * per_mode`` scores and ids per rank) are gathered and merged, so every rank returns
    the global answer. Every rank must call it (it is a collective), and every rank's ``score`` must return
    ``k`` modes (a rank with no batches is fine).

    Args:
        batches: iterable of ``(features, ids (N,))``; ids are integers (dataset indices); ``features`` is
            whatever ``score`` takes (a (N, d) tensor, or a pair of them for SPEC).
        score: maps ``features`` to per-mode scores (N, k), e.g.
            ``lambda x: mode_scores(x, feature_map, eigenvectors)``.
        k: number of modes (columns of ``score``'s output).
        per_mode: samples kept per mode.

    Returns:
        A list of k ``(ids, scores)`` pairs, scores descending, at most ``per_mode`` each.

    Raises:
        ValueError: ``per_mode`` not an integer >= 1, or candidates that would not fit in memory.
        TypeError: ``batches`` not an iterable of ``(features, ids)`` pairs (``None``, one bare tensor, an item
            that is not a pair) or bool ids.
    """
    return _stream(batches, score, k, per_mode, group, with_rows=False)[0]


def top_samples_and_rows(
    batches: Iterable[tuple[Any, Ids]],
    score: Callable[[Any], Tensor],
    k: int,
    per_mode: int,
    group: Optional[Any] = None,
) -> tuple[list[tuple[Tensor, Tensor]], list[Tensor]]:
    """`top_samples`, and each top sample's scores on every mode: per mode a (n_j, k) float64 tensor, row ``i`` the
    ``k`` scores of its ``i``-th top sample (what [`mode_groups`][lightning_spectral.functional.mode_groups] reads).
    The same pass and collective; the candidates carry their rows (``k * per_mode * k`` more floats)."""
    return _stream(batches, score, k, per_mode, group, with_rows=True)


def _stream(
    batches: Iterable[tuple[Any, Ids]],
    score: Callable[[Any], Tensor],
    k: int,
    per_mode: int,
    group: Optional[Any],
    with_rows: bool,
) -> tuple[list[tuple[Tensor, Tensor]], list[Tensor]]:
    batches = check_batches(batches, "top_samples")
    per_mode = check_positive_int(per_mode, "per_mode")
    check_candidates_memory("top_samples", k, per_mode, rows=with_rows)
    width = k if with_rows else 0
    best: Optional[tuple[Tensor, Tensor, Tensor]] = None
    for features, ids in batches:
        scores = score(features).double()  # (N, k)
        ids = _as_ids(ids, scores.shape[0], scores.device)
        if scores.shape[1] != k:
            raise ValueError(f"top_samples: `score` returned {scores.shape[1]} modes, expected k={k}.")
        if scores.shape[0] == 0:  # a batch with no rows (a last shard, a filtered batch) holds no candidate
            continue
        if best is None:
            best = _empty(k, per_mode, width, scores.device)
        best = _merge(best, scores, ids, per_mode)
    if best is None:  # this rank saw no batch
        best = _empty(k, per_mode, width, torch.device("cpu"))
    if distributed_available():
        best = _gather_candidates(*best, per_mode, group)
    results, rows = [], []
    for mode_scores_, mode_ids, mode_rows in zip(*best, strict=True):
        keep = torch.isfinite(mode_scores_)
        results.append((mode_ids[keep].cpu(), mode_scores_[keep].cpu()))
        rows.append(mode_rows[keep].cpu())
    return results, rows


def _empty(k: int, per_mode: int, width: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    scores = torch.full((k, per_mode), -math.inf, dtype=torch.float64, device=device)
    ids = torch.full((k, per_mode), -1, dtype=torch.long, device=device)
    return scores, ids, torch.zeros(k, per_mode, width, dtype=torch.float64, device=device)


def _order(scores: Tensor, ids: Tensor, per_mode: int) -> Tensor:
    """Column indices (k, per_mode) of each row's ``per_mode`` best candidates: scores descending, equal scores by
    id ascending (a global order, so the same samples win under any order, batch size or sharding)."""
    by_id = ids.argsort(dim=1, stable=True)
    order = scores.gather(1, by_id).argsort(dim=1, descending=True, stable=True)[:, :per_mode]
    return by_id.gather(1, order)


def _merge(
    best: tuple[Tensor, Tensor, Tensor], scores: Tensor, ids: Tensor, per_mode: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The candidates ``best`` ((k, P) scores and ids, (k, P, k) rows) and a batch's (N, k) scores and (N,) ids."""
    best_scores, best_ids, best_rows = best
    kept = best_scores.shape[1]
    all_scores = torch.cat([best_scores, scores.T], 1)
    all_ids = torch.cat([best_ids, ids.expand(scores.shape[1], -1)], 1)
    index = _order(all_scores, all_ids, per_mode)
    old = best_rows.gather(1, index.clamp(max=kept - 1)[..., None].expand(-1, -1, best_rows.shape[2]))
    new = scores[(index - kept).clamp(min=0)][..., : best_rows.shape[2]]
    rows = torch.where((index < kept)[..., None], old, new)
    return all_scores.gather(1, index), all_ids.gather(1, index), rows


def _gather_candidates(
    scores: Tensor, ids: Tensor, rows: Tensor, per_mode: int, group: Optional[Any]
) -> tuple[Tensor, Tensor, Tensor]:
    """Every rank's candidates (k, per_mode), merged on the collective's device (the same on every rank): the
    columns of all ranks side by side, then the top again."""
    device = collective_device(group)
    gathered_scores = all_gather_rows(scores.T.to(device), group).T  # (k, world * per_mode), rank order
    gathered_ids = all_gather_rows(ids.T.to(device), group).T
    gathered_rows = all_gather_rows(rows.transpose(0, 1).to(device), group).transpose(0, 1)  # (k, world * P, k)
    index = _order(gathered_scores, gathered_ids, per_mode)
    picked = gathered_rows.gather(1, index[..., None].expand(-1, -1, gathered_rows.shape[2]))
    return gathered_scores.gather(1, index), gathered_ids.gather(1, index), picked
