"""The reading of SPECDivergence: the spectrum of ``(K_a - K_b) / n``, SPEC-diff, its standard errors, the clusters
of each side and their galleries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_batches, check_positive_int
from lightning_spectral.functional.modes import Ids, Modes, check_candidates_memory, orient, top_samples
from lightning_spectral.functional.spec import check_pair, differential_eigh, nonzero, spec_diff_standard_error
from lightning_spectral.metrics.headline import headline_values
from lightning_spectral.metrics.reading import ModeGallery, Reading, kept_summary


class SPECReading(Reading):
    r"""A reading of [`SPECDivergence`][lightning_spectral.metrics.SPECDivergence]: ``value`` is SPEC-diff, the
    largest $|\lambda_i|$ of the differential covariance; ``spectrum()``, ``standard_error()``,
    ``clusters(k, sign)`` and their ``clusters_standard_error``, ``top_samples``, ``summary()``, ``galleries`` and
    ``plot_spectrum`` read its one decomposition, done once on this reading."""

    settings = ("kernel", "sigmas", "n_frequencies", "seed", "noise_draws")

    def _bind(self, metric: Any) -> None:
        self.joint = self.streams["joint"]

    def _with_sigma(self, summary: dict[str, Any]) -> dict[str, Any]:
        """``summary`` with ``"sigma_a"`` and ``"sigma_b"`` (Gaussian kernel), the bandwidths the values were computed
        at (``"auto"``'s fitted values too)."""
        if self.kernel == "gaussian":
            for name, value in zip(("sigma_a", "sigma_b"), self.sigmas):
                summary[name] = torch.tensor(float(value), dtype=torch.float64)  # type: ignore[arg-type]
        return summary

    def _spectrum(self) -> tuple[Tensor, Tensor]:
        width_a = self.feature_map.widths[0]
        return self._cached("spec", lambda: differential_eigh(self.joint.second_moment(), width_a))

    def _value(self) -> Tensor:
        """SPEC-diff, the largest ``|eigenvalue|`` (float64 scalar)."""
        return self._spectrum()[0].abs().max()

    def standard_error(self) -> Tensor:
        """The standard error of SPEC-diff from the ``noise_draws`` multiplier draws of the joint covariance, to first
        order (`functional.spec_diff_standard_error`): its
        sampling noise at this n. A collective under DDP.

        Raises:
            RuntimeError: built with ``noise_draws=0``.
        """
        if not self.noise_draws:
            raise RuntimeError("SPECDivergence.standard_error: built with noise_draws=0, so no draws were kept; build "
                               "it with noise_draws >= 1 (default 2).")
        values, vectors = self._spectrum()
        noise = self.joint.noise_sums()
        signs = torch.ones(values.shape[0], dtype=torch.float64, device=values.device)
        signs[self.feature_map.widths[0]:] = -1.0
        draws = [noise.draw(a) for a in range(noise.draws)]
        return self._cached("se", lambda: spec_diff_standard_error(values, vectors, signs, draws))

    def clusters_standard_error(self, k: int = 3, sign: int = 1) -> Tensor:
        r"""The standard errors (k,) of the eigenvalues of
        [`clusters`][lightning_spectral.metrics.spec_reading.SPECReading.clusters] (``k``, ``sign``), from the
        ``noise_draws`` draws, to first order: each eigenvalue of $\Gamma = S C$ moves by
        $v^\top E_a v / (v^\top S v)$ (`functional.spec_diff_standard_error`; a scale of $v$ cancels), and its se is
        the root mean square over the draws. A collective under DDP.

        Raises:
            RuntimeError: built with ``noise_draws=0``.
        """
        if not self.noise_draws:
            raise RuntimeError("SPECDivergence.clusters_standard_error: built with noise_draws=0, so no draws were "
                               "kept; build it with noise_draws >= 1 (default 2).")
        vectors = self.clusters(k, sign).eigenvectors.double()
        noise = self.joint.noise_sums()
        signs = torch.ones(vectors.shape[0], dtype=torch.float64, device=vectors.device)
        signs[self.feature_map.widths[0]:] = -1.0
        scale = (vectors * signs[:, None] * vectors).sum(0)
        moves = torch.stack([(vectors * (noise.draw(a) @ vectors)).sum(0) / scale for a in range(noise.draws)])
        return moves.square().mean(0).sqrt()

    @kept_summary
    def summary(self) -> dict[str, Tensor]:
        """SPEC-diff (``""``), its standard error ``se`` (unless ``noise_draws=0``), the sample count ``n`` and,
        for the Gaussian kernel, ``n_features`` (2r per embedding) and the bandwidths ``sigma_a``, ``sigma_b``. A
        collective under DDP."""
        values = {"": self.value}
        if self.noise_draws:
            values["se"] = self.standard_error()
        values["n"] = torch.tensor(float(self.sample_count()), dtype=torch.float64)
        if self.kernel == "gaussian":
            values["n_features"] = torch.tensor(float(2 * self.n_frequencies), dtype=torch.float64)
        return self._with_sigma(values)

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Tensor]:
        """``spec_diff`` and its ``spec_diff_se``, from ``summary`` (default: this reading's)."""
        summary = self.summary() if summary is None else summary
        return headline_values("spec_diff", summary[""], summary.get("se"))

    def spectrum(self) -> Tensor:
        """Non-zero eigenvalues of ``Lambda`` (descending, both signs), over all ranks (a collective under DDP)."""
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
        if isinstance(sign, bool) or not isinstance(sign, Integral) or sign not in (1, -1):  # True == 1: a flag
            raise ValueError(
                f"SPECDivergence.clusters: `sign` must be the integer +1 (`a`-only clusters) or -1 (`b`-only), got "
                f"{sign!r}."
            )
        values, vectors = self._spectrum()
        side = nonzero(values) & ((values > 0) if sign > 0 else (values < 0))
        order = torch.nonzero(side).flatten()
        order = order if sign > 0 else order.flip(0)
        order = order[:k]
        scale = self.joint.count.sqrt() * values[order].abs()
        chosen = orient(vectors[:, order] / scale, self.joint.feature_sum)
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
        batches = check_batches(batches, "SPECDivergence.top_samples")
        check_positive_int(per_cluster, "per_cluster")
        check_candidates_memory("SPECDivergence", check_positive_int(k, "k"), per_cluster, "per_cluster")
        clusters = self.clusters(k, sign)
        feature_map, vectors = self.feature_map, clusters.eigenvectors

        def score(pair: tuple[Tensor, Tensor]) -> Tensor:
            emb_a, emb_b = check_pair(*pair, "SPECDivergence.top_samples")
            return feature_map(emb_a, emb_b).double() @ vectors.to(emb_a.device)

        return top_samples(batches, score, vectors.shape[1], per_cluster, self.process_group)

    def galleries(
        self,
        batches: Iterable[tuple[tuple[Tensor, Tensor], Ids]],
        k: int,
        per_mode: int,
        reference_batches: Optional[Iterable] = None,
    ) -> dict[str, ModeGallery]:
        """``"a_only"`` / ``"b_only"``: members of the top clusters of each sign (a second pass over ``batches``),
        rows labelled with the eigenvalue."""
        batches = list(batches)
        galleries = {}
        for name, sign in (("a_only", 1), ("b_only", -1)):
            clusters = self.clusters(k, sign)
            if clusters.eigenvalues.numel() == 0:
                continue
            samples = self.top_samples(batches, k=k, sign=sign, per_cluster=per_mode)
            first, second = ("a", "b") if sign > 0 else ("b", "a")
            labels = [
                f"cluster {i + 1}: eigenvalue {float(v):+.3f} ({first} groups, {second} does not)"
                for i, v in enumerate(clusters.eigenvalues)
            ]
            galleries[name] = ModeGallery(samples, labels, title=f"clusters embedding {first} makes, {second} not")
        return galleries

    def plot_spectrum(self, ax: Any = None, top: int = 50) -> tuple[Any, Any]:
        """Bar plot of the ``top`` eigenvalues of ``Lambda = (K_a - K_b) / n`` by magnitude, with their signs:
        positive bars are clusters of embedding ``a`` that ``b`` does not make, negative ones the reverse; the
        tallest bar is SPEC-diff. A collective under DDP.

        Returns:
            ``(figure, axis)``.
        """
        from lightning_spectral.pictures.plots import panels, plot_spectrum

        values = self.spectrum()
        values = values[values.abs().argsort(descending=True)][: check_positive_int(top, "top")]
        figure, (axis,) = panels(1, ax)
        plot_spectrum(values, top=top, title="SPECDivergence: spectrum of (K_a - K_b) / n", ax=axis)
        return figure, axis
