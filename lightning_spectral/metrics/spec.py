"""SPECDivergence: streaming SPEC comparison of two embeddings of the same samples (SPEC-diff and clusters)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_positive, check_positive_int
from lightning_spectral.features import KERNELS, PairedFeatureMap
from lightning_spectral.functional.modes import Ids, Modes, orient, top_samples
from lightning_spectral.functional.spec import check_pair, nonzero
from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE, add_covariance_, differential_eigh
from lightning_spectral.metrics._base import SumStateMetric


class SPECDivergence(SumStateMetric):
    r"""SPEC-diff between two embeddings ``a`` and ``b`` of the same samples, accumulated over batches.

    States: the joint covariance sum ``sum_i [phi_a(a_i); phi_b(b_i)] [...]^T`` ((D_a + D_b)^2), the feature sum
    and the count, float64, all-reduced under DDP. ``compute()`` returns ``max |lambda|`` of the differential
    covariance ``Gamma = D C`` (SPEC, Proposition 1), whose non-zero eigenvalues are those of
    ``Lambda = (K_a - K_b)/n``; positive eigenvalues are clusters ``a`` groups and ``b`` does not, negative ones
    the reverse (:meth:`clusters`, :meth:`top_samples`).

    Args:
        kernel: ``"gaussian"`` (random Fourier features, ``D = 2 r`` per embedding) or ``"cosine"`` (``D = d``).
        sigma_a: Gaussian bandwidth of ``emb_a`` (see :func:`~lightning_spectral.functional.match_bandwidth`).
        sigma_b: Gaussian bandwidth of ``emb_b``.
        n_frequencies: ``r`` per embedding for the Gaussian kernel.
        seed: frequency seed, shared by both maps and by every rank.
        in_features: widths ``(d_a, d_b)``; required for the cosine kernel (its state size is ``d_a + d_b``),
            optional for the Gaussian one (built at the first ``update``).
        chunk_size: rows per chunk of the accumulation.
        kwargs: ``torchmetrics.Metric`` keyword arguments.

    Example:
        >>> import torch
        >>> metric = SPECDivergence("cosine", in_features=(4, 3))
        >>> x = torch.randn(100, 4)
        >>> metric.update(x, x[:, :3])      # the second embedding drops a coordinate
        >>> bool(metric.compute() > 0)
        True
    """

    is_differentiable = False
    higher_is_better = False
    feature_map: Optional[PairedFeatureMap]

    cov_sum: Tensor
    feature_sum: Tensor
    n_samples: Tensor

    def __init__(
        self,
        kernel: str = "gaussian",
        sigma_a: Optional[float] = None,
        sigma_b: Optional[float] = None,
        n_frequencies: int = 2000,
        seed: int = 0,
        in_features: Optional[tuple[int, int]] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(chunk_size, **kwargs)
        if kernel not in KERNELS:
            raise ValueError(f"SPECDivergence: `kernel` must be one of {KERNELS}, got {kernel!r}.")
        self.kernel = kernel
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.seed = int(seed)
        if kernel == "gaussian":
            if sigma_a is None or sigma_b is None:
                raise ValueError(
                    "SPECDivergence(kernel='gaussian') needs `sigma_a` and `sigma_b`; choose them with "
                    "`lightning_spectral.functional.match_bandwidth` or use kernel='cosine'."
                )
            self.sigmas: tuple[Optional[float], Optional[float]] = (
                check_positive(sigma_a, "sigma_a"),
                check_positive(sigma_b, "sigma_b"),
            )
            width = 4 * self.n_frequencies
        else:
            if in_features is None:
                raise ValueError(
                    "SPECDivergence(kernel='cosine') needs `in_features=(d_a, d_b)`: the state is "
                    "(d_a + d_b)^2 and must have the same size on every rank before the first update."
                )
            self.sigmas = (None, None)
            width = sum(check_positive_int(d, "in_features") for d in in_features)
        if in_features is not None:
            self._build_feature_map(tuple(in_features))
        self.add_sum_state("cov_sum", (width, width))
        self.add_sum_state("feature_sum", (width,))
        self.add_sum_state("n_samples")

    def _build_feature_map(self, in_features: tuple[int, int]) -> PairedFeatureMap:
        self.feature_map = PairedFeatureMap(self.kernel, in_features, self.sigmas, self.n_frequencies, self.seed)
        self.feature_map.to(self.device)
        return self.feature_map

    def update(self, emb_a: Tensor, emb_b: Tensor) -> None:
        """Add a batch: ``emb_a`` (N, d_a) and ``emb_b`` (N, d_b), row i of both the same sample.

        Raises:
            ValueError: different N, widths that differ from earlier batches, NaN, zero-norm rows (cosine).
        """
        emb_a, emb_b = check_pair(emb_a, emb_b, "SPECDivergence.update")
        widths = (emb_a.shape[1], emb_b.shape[1])
        if self.feature_map is None:
            self._build_feature_map(widths)
        elif widths != self.feature_map.in_features:
            raise ValueError(
                f"SPECDivergence.update: widths {widths} differ from the feature map's {self.feature_map.in_features}."
            )
        joint = torch.cat([emb_a, emb_b.to(emb_a.dtype)], dim=1)
        add_covariance_(self.cov_sum, joint, self.feature_map.joint, self.chunk_size, feature_sum=self.feature_sum)
        self.n_samples += joint.shape[0]

    def frequency_signature(self) -> Optional[Tensor]:
        return None if self.feature_map is None else self.feature_map.frequencies()

    def _map_from_state_dict(self, state_dict: dict, prefix: str) -> None:
        omega_a, omega_b = state_dict.get(prefix + "map_a.omega"), state_dict.get(prefix + "map_b.omega")
        if omega_a is not None and omega_b is not None:
            self._build_feature_map((omega_a.shape[0], omega_b.shape[0]))

    def _spectrum(self) -> tuple[Tensor, Tensor]:
        self._require_samples(self.n_samples)
        width_a = self.feature_map.out_features[0]  # type: ignore[union-attr]
        return self.cached("spec", lambda: differential_eigh(self.cov_sum / self.n_samples, width_a))

    def compute(self) -> Tensor:
        """SPEC-diff, the largest ``|eigenvalue|`` (float64 scalar)."""
        return self._spectrum()[0].abs().max()

    def spectrum(self) -> Tensor:
        """Non-zero eigenvalues of ``Lambda`` (descending, both signs), over all ranks (a collective under DDP)."""
        with self.synced():
            values = self._spectrum()[0]
        return values[nonzero(values)]

    def clusters(self, k: int = 3, sign: int = 1) -> Modes:
        """The top-``k`` clusters of one side: eigenvalues and eigenvectors ``v`` of ``Gamma`` ((D_a + D_b, k)).

        ``sign=+1``: clusters embedding ``a`` groups and ``b`` does not (largest positive eigenvalues);
        ``sign=-1``: the reverse (most negative first). ``v`` is scaled so that the sample scores
        ``u_i = [phi_a(a_i); phi_b(b_i)] . v / (sqrt(n) |lambda|)`` form a unit vector over the accumulated
        samples, and oriented so that they sum to >= 0. A collective under DDP.
        """
        check_positive_int(k, "k")
        if sign not in (1, -1):
            raise ValueError(f"SPECDivergence.clusters: `sign` must be +1 or -1, got {sign!r}.")
        with self.synced():
            values, vectors = self._spectrum()
            side = nonzero(values) & ((values > 0) if sign > 0 else (values < 0))
            order = torch.nonzero(side).flatten()
            order = order if sign > 0 else order.flip(0)
            order = order[:k]
            scale = self.n_samples.sqrt() * values[order].abs()
            chosen = orient(vectors[:, order] / scale, self.feature_sum)
        return Modes(values[order], chosen, torch.ones(len(order), dtype=torch.bool))

    def top_samples(
        self, batches: Iterable[tuple[tuple[Tensor, Tensor], Ids]], k: int = 3, sign: int = 1, per_cluster: int = 20
    ) -> list[tuple[Tensor, Tensor]]:
        """Second streaming pass: for each of the top ``k`` clusters of one side, its ``per_cluster`` members.

        Args:
            batches: iterable of ``((emb_a (N, d_a), emb_b (N, d_b)), ids (N,))``, e.g. the same data again.
            k: number of clusters; sign: +1 (``a``-only clusters) or -1 (``b``-only).
            per_cluster: members kept per cluster.

        Returns:
            ``k`` pairs ``(ids, scores)``, scores (entries of the unit eigenvector) descending; under DDP each
            rank streams its shard and only the candidates are gathered.
        """
        check_positive_int(per_cluster, "per_cluster")
        clusters = self.clusters(k, sign)
        feature_map, vectors = self.feature_map, clusters.eigenvectors

        def score(pair: tuple[Tensor, Tensor]) -> Tensor:
            emb_a, emb_b = check_pair(*pair, "SPECDivergence.top_samples")
            return feature_map(emb_a, emb_b).double() @ vectors.to(emb_a.device)  # type: ignore[misc]

        return top_samples(batches, score, vectors.shape[1], per_cluster, self.process_group)
