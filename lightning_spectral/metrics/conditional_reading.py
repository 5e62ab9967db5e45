"""The reading of ConditionalVendi: the conditional, information and unconditional Vendi scores, their standard
errors, the prompt-agnostic modes and the per-prompt values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_features, check_fraction, check_positive_int
from lightning_spectral.algebra.eigen import psd_eigenvalues, psd_eigh, symmetric_eigh
from lightning_spectral.functional.conditional import (
    ConditionalSpectra,
    conditional_scores,
    entropy_of,
    prompt_agnostic_covariance,
    prompt_agnostic_share_replicates,
)
from lightning_spectral.functional.fkea import (
    VendiResult,
    check_orders,
    entropy_bias,
    rke_from_covariance,
    vendi_bias,
    vendi_replicates,
    vendi_score,
)
from lightning_spectral.functional.modes import Ids, Modes, check_candidates_memory, orient, top_samples
from lightning_spectral.functional.sampling_noise import standard_error
from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.metrics.accumulator import Accumulator
from lightning_spectral.metrics.headline import headline_values
from lightning_spectral.metrics.reading import (
    Interval,
    ModeGallery,
    Reading,
    bias_corrected,
    kept_summary,
    warn_large_bias,
)

if TYPE_CHECKING:  # pragma: no cover
    from lightning_spectral.metrics.conditional import _PerLabelAccumulator


class ConditionalReading(Reading):
    """A reading of [`ConditionalVendi`][lightning_spectral.metrics.ConditionalVendi]: ``value`` is
    Conditional-Vendi (a scalar for one order, ``{order: value}`` for several); ``scores()``, ``standard_errors()``,
    ``summary()``, the prompt-agnostic modes and the per-prompt values (``per_prompt``, ``least_diverse``,
    ``galleries``) read the sides' decompositions, each done once on this reading."""

    settings = (
        "prompt_sigma", "n_frequencies", "seed", "orders", "_single_order", "alpha", "precision", "num_classes",
        "prompt_names", "per_prompt_frequencies", "unconditional", "label_prompts", "noise_draws", "prompt_agnostic",
        "ridge",
    )

    # ---- values --------------------------------------------------------------------------------------------------
    def _moment(self, name: str) -> Tensor:
        """The second moment of one side; with ``label_prompts`` the prompts' side is the L x L matrix
        ``diag(sqrt p) V V^T diag(sqrt p)`` (``V``: the features of the L one-hot prompts, ``p``: their shares), whose
        non-zero spectrum is that of ``C_T = V^T diag(p) V``: exact, and no (2r)^2 sum."""
        if name != "prompts" or not self.label_prompts:
            return self.streams[name].second_moment()
        counts = self._per_prompt_accumulator().lane_counts()
        if float(counts.sum()) <= 0:
            self.streams["joint"]._require()  # the usual "no samples" error
        rff = self.feature_map
        d_x = rff.in_features[0]  # type: ignore[index]
        phases = rff.z[d_x:].double() / rff.prompt_sigma  # one-hot prompt l: its phases are row l of Z_t / sigma_t
        features = torch.cat([phases.cos(), phases.sin()], 1) / math.sqrt(rff.n_frequencies)
        root = (counts / counts.sum()).sqrt().to(features.device)[:, None] * features
        return root @ root.T

    def _sides(self) -> tuple[str, ...]:
        return ("joint", "samples", "prompts") if self.unconditional else ("joint", "prompts")

    def scores(self) -> dict[Any, dict[str, Tensor]]:
        """``{order: {"conditional", "prompt_vendi"}}`` and, with ``unconditional``, ``"information"`` and
        ``"vendi"``, of the reading's sums (all ranks')."""
        moments = {name: self._moment(name) for name in self._sides()}
        spectra = None
        out = {}
        for order in self.orders:
            if order == 2:
                sides = moments  # Frobenius norms, no eigendecomposition
            else:
                spectra = spectra or self._cached(
                    "spectra", lambda: {n: psd_eigenvalues(m, precision=self.precision) for n, m in moments.items()}
                )
                sides = spectra
            n = float(self.sample_count())  # order 2 from pairs of distinct samples (`entropy_of`)
            if self.unconditional:
                out[order] = conditional_scores(ConditionalSpectra(**sides), order, n)
            else:
                joint, prompts = entropy_of(sides["joint"], order, n), entropy_of(sides["prompts"], order, n)
                out[order] = {"conditional": torch.exp(joint - prompts), "prompt_vendi": torch.exp(prompts)}
        return out

    def standard_error(self) -> VendiResult:
        r"""The standard error of Conditional-Vendi (each order): ``standard_errors()[""]``. A collective under DDP.

        Raises:
            RuntimeError: built with ``noise_draws=0`` or ``label_prompts=True`` (no draws are kept).
        """
        return self.standard_errors()[""]

    def standard_errors(self) -> dict[str, Any]:
        r"""The standard error of every score of
        [`summary`][lightning_spectral.metrics.conditional_reading.ConditionalReading.summary] that has one, by its key,
        from the ``noise_draws`` multiplier draws of every side (one multiplier per row, shared), to first order.
        With $V_J$, $V_X$, $V_T$ the Vendi scores of the joint, sample and prompt covariances and $d^J_a$, $d^X_a$,
        $d^T_a$ their replicates (`functional.vendi_replicates`: $\operatorname{tr}(\nabla V \, E_a)$), the draw-$a$
        replicates are

        - ``""``: $\mathrm{CV} = V_J / V_T$ moves by $\mathrm{CV}\,(d^J_a / V_J - d^T_a / V_T)$;
        - ``"information"``: $\mathrm{IV} = V_X V_T / V_J$ by $\mathrm{IV}\,(d^X_a / V_X + d^T_a / V_T - d^J_a / V_J)$;
        - ``"vendi"``: $d^X_a$; ``"prompt_vendi"``: $d^T_a$ (with ``unconditional``: ``information``, ``vendi``);
        - ``"prompt_agnostic_share"`` (with ``prompt_agnostic``): $\operatorname{tr}\Lambda$ moves by
          $\operatorname{tr} E^{xx}_a - 2 \operatorname{tr}(E^{xt}_a S) + \operatorname{tr}(S^\top E^{tt}_a S)$,
          $S = (C_{tt} + \varepsilon I)^{-1} C_{tx}$ (`functional.prompt_agnostic_share_replicates`).

        se = the root mean square of the replicates (a scalar per order, ``{order: se}`` for several). The per-label
        values' are
        [`per_prompt_standard_errors`][lightning_spectral.metrics.conditional_reading.ConditionalReading.per_prompt_standard_errors].
        A collective under DDP.

        Raises:
            RuntimeError: built with ``noise_draws=0`` or ``label_prompts=True`` (no draws are kept).
        """
        if not self.noise_draws:
            raise RuntimeError("ConditionalVendi.standard_error: no draws were kept (noise_draws=0, or "
                               "label_prompts=True); build it with noise_draws >= 1 and prompt embeddings.")
        return self._cached("se", self._standard_errors)

    def _standard_errors(self) -> dict[str, Any]:
        replicates = {
            name: vendi_replicates(self.streams[name].noise_sums(), self.orders, None, self.precision)
            for name in self._sides()
        }
        moves: dict[str, dict] = {"": {}, "information": {}, "vendi": {}, "prompt_vendi": {}}
        for order, values in self.scores().items():
            conditional, prompt_vendi = values["conditional"], values["prompt_vendi"]
            joint, prompts = replicates["joint"][order], replicates["prompts"][order]
            joint_vendi = conditional * prompt_vendi
            moves[""][order] = conditional * (joint / joint_vendi - prompts / prompt_vendi)
            moves["prompt_vendi"][order] = prompts
            if self.unconditional:
                samples, vendi, information = replicates["samples"][order], values["vendi"], values["information"]
                relative = samples / vendi + prompts / prompt_vendi - joint / joint_vendi
                moves["information"][order] = information * relative
                moves["vendi"][order] = samples
        errors: dict[str, Any] = {}
        for key, by_order in moves.items():
            if by_order:
                values = {order: standard_error(move) for order, move in by_order.items()}
                errors[key] = values[self.orders[0]] if self._single_order else values
        if self.prompt_agnostic:
            noise = self._paired().noise_sums()
            draws = torch.stack([noise.draw(a) for a in range(noise.draws)])
            errors["prompt_agnostic_share"] = standard_error(
                prompt_agnostic_share_replicates(noise.moment(), draws, self.feature_map.out_features, self.ridge)
            )
        return errors

    def interval(self, level: float = 0.95) -> dict[str, Any]:
        r"""Each score of ``standard_errors()`` (``""``, ``information``, ``vendi``, ``prompt_vendi``) with its
        interval at ``level`` without its bias at this n: ``[value - bias - q se, value - bias + q se]``,
        ``q = t_{A, (1 + level) / 2}``, as an [`Interval`][lightning_spectral.metrics.reading.Interval] (a dict
        ``{order: Interval}`` for several orders), by key.

        Every score is ``exp`` of a sum of the sides' entropies (Conditional-Vendi: $H_J - H_T$; Information-Vendi:
        $H_X + H_T - H_J$), so its bias is $V (\sum \pm b + \tfrac12 E (\sum \pm dH_a)^2)$ with each side's
        second-order entropy bias $b$ and replicates $dH_a$ (`functional.fkea.entropy_bias`; the draws are shared
        by the sides). Orders 2 and inf get 0, as in `FKEAVendi`'s
        [`interval`][lightning_spectral.metrics.vendi_reading.VendiReading.interval], whose limits hold here too
        (a bias of more than `BIAS_SHARE_WARNING` of a score is said; there the one-sided scores, ``vendi`` and
        ``prompt_vendi`` of order <= 1, are lower bounds, ``high = +inf``: `bias_corrected`). One ``eigh`` per side;
        no summary or callback reads it. A collective under DDP.

        Raises:
            RuntimeError: no draws were kept (``noise_draws=0`` or ``label_prompts=True``).
        """
        level = check_fraction(level, "level", high_closed=False)
        errors = self.standard_errors()  # refuses a metric without draws
        n = int(self.sample_count())
        sides = self._cached("entropy_bias", lambda: {
            name: entropy_bias(self.streams[name].noise_sums(), self.orders, self.precision,
                               psd_eigh(self._moment(name), precision=self.precision, rank=n))
            for name in self._sides()
        } if any(order not in (2.0, math.inf) for order in self.orders) else {})  # one eigh per side, kept
        signs = {"": {"joint": 1, "prompts": -1}, "information": {"samples": 1, "prompts": 1, "joint": -1},
                 "vendi": {"samples": 1}, "prompt_vendi": {"prompts": 1}}
        names = {"": "conditional", "information": "information", "vendi": "vendi", "prompt_vendi": "prompt_vendi"}
        q = student_t_isf((1.0 - level) / 2.0, self.noise_draws)
        scores, out = self.scores(), {}
        for key, parts in signs.items():
            if key not in errors:
                continue
            by_order = {}
            for order in self.orders:
                value = scores[order][names[key]]
                se = errors[key] if self._single_order else errors[key][order]
                bias = torch.zeros((), dtype=torch.float64)
                # one side's Vendi reads low (`bias_corrected`); a difference of entropies has no known sign
                bounded = len(parts) == 1 and order <= 1
                if order not in (2.0, math.inf):
                    shift = sum(sign * sides[name][order].bias for name, sign in parts.items())
                    moves = sum(sign * sides[name][order].replicates for name, sign in parts.items())
                    bias = value * (shift + 0.5 * moves.square().mean())
                    what = f"{key or 'conditional'} score of order {order}"
                    warn_large_bias("ConditionalVendi.interval", what, bias, value, n, self.feature_map.out_features,
                                    bounded=bounded)
                by_order[order] = bias_corrected(value, se, bias, q, level, bounded)
            out[key] = by_order[self.orders[0]] if self._single_order else by_order
        return out

    def _value(self) -> VendiResult:
        """Conditional-Vendi of each order (a scalar for one order, ``{order: value}`` for several): the joint and
        prompt sides only (two eigendecompositions; none for order 2)."""
        moments = {name: self._moment(name) for name in ("joint", "prompts")}
        spectra = None
        values = {}
        for order in self.orders:
            if order == 2:
                joint, prompts = moments["joint"], moments["prompts"]
            else:
                spectra = spectra or self._cached(
                    "conditional", lambda: [psd_eigenvalues(m, precision=self.precision) for m in moments.values()]
                )
                joint, prompts = spectra
            n = float(self.sample_count())  # order 2 from pairs of distinct samples (`entropy_of`)
            values[order] = torch.exp(entropy_of(joint, order, n) - entropy_of(prompts, order, n))
        return values[self.orders[0]] if self._single_order else values

    @kept_summary
    def summary(self) -> dict[str, Any]:
        """``""``: Conditional-Vendi; ``information``: Information-Vendi and ``vendi``: the samples' unconditional
        Vendi (with ``unconditional``); ``prompt_vendi``: the prompts'; with ``num_classes``, ``min_prompt_vendi``
        (the least diverse prompt's Vendi among the labels seen at least twice, as ``least_diverse``) and
        ``prompt`` (each label's Vendi, NaN for a label not seen); ``sigma``: the samples' bandwidth (``"auto"``'s
        fitted value too); ``n`` and ``n_features`` (2r), which the scores depend on; with ``noise_draws``, the
        standard errors ``se`` (of the conditional score), ``information_se``, ``vendi_se``, ``prompt_vendi_se`` and
        ``prompt_agnostic_share_se`` beside the values they belong to
        ([`standard_errors`][lightning_spectral.metrics.conditional_reading.ConditionalReading.standard_errors]); with
        ``num_classes``, ``prompt_se`` (each label's, first order) and ``min_prompt_vendi_se``: the plug-in se of the
        minimising label's score, which ignores which label is the minimum
        ([`per_prompt_standard_errors`][lightning_spectral.metrics.conditional_reading.ConditionalReading.per_prompt_standard_errors]).
        A dict per value for several orders. A collective under DDP."""
        scores = self.scores()
        out: dict[str, Any] = {}
        for key, name in (("", "conditional"), ("information", "information"), ("vendi", "vendi"),
                          ("prompt_vendi", "prompt_vendi")):
            if name not in scores[self.orders[0]]:
                continue
            values = {order: scores[order][name] for order in self.orders}
            out[key] = values[self.orders[0]] if self._single_order else values
        errors = self.standard_errors() if self.noise_draws else {}
        for key, value in errors.items():
            if key in out:
                out["se" if key == "" else f"{key}_se"] = value
        # the sample size and the feature count 2r the scores were computed at (Vendi-1 depends on both)
        out["n"] = torch.tensor(float(self.sample_count()), dtype=torch.float64)
        out["n_features"] = torch.tensor(float(2 * self.n_frequencies), dtype=torch.float64)
        if self.prompt_agnostic:
            out["prompt_agnostic_share"] = self.prompt_agnostic_covariance().trace()
            if "prompt_agnostic_share" in errors:
                out["prompt_agnostic_share_se"] = errors["prompt_agnostic_share"]
        if self.num_classes is not None:
            per_prompt = self.per_prompt()
            counts = self.prompt_counts().to(per_prompt.device).round()
            eligible = ~per_prompt.isnan() & (counts >= 2)  # a label seen once has Vendi 1
            seen = per_prompt[eligible]
            out["min_prompt_vendi"] = seen.min() if seen.numel() else torch.tensor(math.nan)
            out["prompt"] = per_prompt  # logged per label as {name}_prompt/{label} (labels seen)
            if self._per_prompt_accumulator().draws:
                prompt_se = self.per_prompt_standard_errors()
                # the plug-in: the se of the minimising label's score (which label is the minimum is ignored)
                minimum = torch.nonzero(eligible).flatten()[torch.argmin(seen)] if seen.numel() else None
                out["min_prompt_vendi_se"] = (
                    prompt_se[minimum] if minimum is not None else torch.tensor(math.nan, dtype=torch.float64)
                )
                out["prompt_se"] = prompt_se
        return self._with_sigma(out)

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Tensor]:
        """From ``summary`` (default: this reading's): ``conditional_{order}`` and ``information_{order}`` (where
        computed) with their ``_se``, and with ``num_classes`` the least diverse prompt's ``min_prompt_vendi`` (and
        ``_se``)."""
        summary = self.summary() if summary is None else summary
        values: dict[str, Tensor] = {}
        for key, quantity in (("", "conditional"), ("information", "information")):
            if key not in summary:
                continue
            value, se = summary[key], summary.get("se" if key == "" else f"{key}_se")
            if self._single_order:
                value, se = {self.orders[0]: value}, None if se is None else {self.orders[0]: se}
            values.update(headline_values(quantity, value, se))
        if "min_prompt_vendi" in summary:
            values.update(headline_values("min_prompt_vendi", summary["min_prompt_vendi"],
                                          summary.get("min_prompt_vendi_se")))
        return values

    # ---- prompt-agnostic modes (Scendi) ---------------------------------------------------------------------------
    def _paired(self) -> Accumulator:
        if not self.prompt_agnostic:
            raise RuntimeError(
                "ConditionalVendi: the prompt-agnostic modes need the paired covariance: build the metric with "
                "`prompt_agnostic=True`."
            )
        return self.streams["paired"]

    def prompt_agnostic_covariance(self) -> Tensor:
        """The Schur complement ``C_xx - C_xt (C_tt + ridge I)^-1 C_tx`` (2r x 2r, float64) of the uncentred paired
        second moment, all ranks (a collective under DDP): the samples' kernel covariance the prompts do not explain
        (trace <= 1; it depends on ``ridge``, see `functional.conditional.prompt_agnostic_covariance`)."""
        paired = self._paired()
        return prompt_agnostic_covariance(paired.second_moment(), self.feature_map.out_features, self.ridge)

    def prompt_agnostic_modes(self, k: int = 10) -> Modes:
        """The top-``k`` eigen-pairs of
        [`prompt_agnostic_covariance`][lightning_spectral.metrics.conditional_reading.ConditionalReading.prompt_agnostic_covariance]:
        directions in which the samples vary
        whatever the prompt (eigenvectors (2r, k) over the samples' features, signs so that the samples' mean
        scores >= 0). A collective under DDP."""
        k = check_positive_int(k, "k")
        width = self.feature_map.out_features
        mean = self._paired().mean()[:width]
        values, vectors = self._cached("schur", lambda: symmetric_eigh(self.prompt_agnostic_covariance()))
        k = min(k, values.shape[0])
        return Modes(values[:k], orient(vectors[:, :k], mean), torch.ones(k, dtype=torch.bool))

    def prompt_agnostic_top_samples(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int = 4, per_mode: int = 16
    ) -> list[tuple[Tensor, Tensor]]:
        """Second pass over ``(sample embeddings (N, d_x), ids)`` batches: per prompt-agnostic mode, the
        ``per_mode`` samples scoring highest (``phi_x(x) . v``). A collective under DDP."""
        per_mode = check_positive_int(per_mode, "per_mode")
        check_candidates_memory(type(self).__name__, check_positive_int(k, "k"), per_mode)
        vectors = self.prompt_agnostic_modes(k).eigenvectors
        rff = self.feature_map
        d_x, d_t = rff.in_features  # type: ignore[misc]

        def score(x: Tensor) -> Tensor:
            x = check_features(x, "batches", width=d_x, owner="ConditionalVendi.prompt_agnostic_top_samples")
            rows = torch.cat([x, x.new_zeros(x.shape[0], d_t)], 1)
            return rff(rows, "samples").double() @ vectors.to(x.device)

        return top_samples(batches, score, vectors.shape[1], per_mode, self.process_group)

    # ---- per prompt ----------------------------------------------------------------------------------------------
    def _per_prompt_accumulator(self) -> "_PerLabelAccumulator":
        if self.num_classes is None:
            raise RuntimeError(
                "ConditionalVendi: per-prompt diversity needs the labels: build the metric with `num_classes=`."
            )
        return self.streams["per_prompt"]  # type: ignore[return-value]

    def prompt_counts(self) -> Tensor:
        """Samples accumulated per label (L,), float64, over all ranks (a collective under DDP)."""
        return self._per_prompt_accumulator().lane_counts().clone()

    def per_prompt(self, alpha: Any = None) -> Tensor:
        """Each label's Vendi of order ``alpha`` (default: the metric's first order) among its own samples (L,),
        from its r_p covariance; NaN for a label without samples. Over all ranks (a collective under DDP)."""
        order = self.orders[0] if alpha is None else check_orders(alpha)[0][0]
        accumulator = self._per_prompt_accumulator()
        values = torch.full((self.num_classes,), math.nan, dtype=torch.float64)  # type: ignore[arg-type]
        counts, sums = accumulator.lane_counts(), accumulator.cov_sum
        for label in torch.nonzero(counts > 0).flatten().tolist():
            moment, count = sums[label] / counts[label], float(counts[label])
            if order == 2 and count >= 2:  # RKE from pairs of distinct samples (`rke_from_covariance`)
                values[label] = rke_from_covariance(moment, count).cpu()
            else:  # a label seen once has Vendi 1 at every order
                values[label] = vendi_score(psd_eigenvalues(moment), order).cpu()
        return values

    def per_prompt_standard_errors(self, alpha: Any = None) -> Tensor:
        """Standard errors (L,) of
        [`per_prompt`][lightning_spectral.metrics.conditional_reading.ConditionalReading.per_prompt] (order ``alpha``,
        default the metric's first), from each label's own multiplier draws (its lane's ``S_a``, the samples'
        multipliers): first order, ``d_a = tr(grad V E_a)`` as `functional.vendi_replicates`, se the root
        mean square over the ``noise_draws`` draws; NaN for a label without samples. A collective under DDP.

        Raises:
            RuntimeError: no per-label draws (``noise_draws=0``, ``label_prompts=True``) or no ``num_classes``.
        """
        order = self.orders[0] if alpha is None else check_orders(alpha)[0][0]
        accumulator = self._per_prompt_accumulator()
        if not accumulator.draws:
            raise RuntimeError("ConditionalVendi.per_prompt_standard_errors: the per-label sums keep no draws "
                               "(noise_draws=0, or label_prompts=True); build it with noise_draws >= 1.")
        return self._cached(f"prompt_se_{order}", lambda: self._per_prompt_standard_errors(order))

    def _per_prompt_standard_errors(self, order: Any) -> Tensor:
        accumulator = self._per_prompt_accumulator()
        errors = torch.full((self.num_classes,), math.nan, dtype=torch.float64)  # type: ignore[arg-type]
        counts = accumulator.lane_counts()
        for label in torch.nonzero(counts > 0).flatten().tolist():
            if float(counts[label]) < 2:  # one sample: Vendi 1 at every order, no noise (its centred draws are 0)
                errors[label] = 0.0
                continue
            replicates = vendi_replicates(accumulator.lane_noise_sums(label), [order], None, self.precision)
            errors[label] = standard_error(replicates[order]).cpu()
        return errors

    def per_prompt_interval(self, alpha: Any = None, level: float = 0.95) -> Interval:
        """Each label's Vendi (order ``alpha``, default the metric's first) with its interval at ``level`` without
        its bias at the label's sample count, as one [`Interval`][lightning_spectral.metrics.reading.Interval] of
        (L,) tensors: ``value - bias -+ q se``, the bias from the label's own draws
        ([`vendi_bias`][lightning_spectral.functional.fkea.vendi_bias]; 0 at orders 2 and inf and for a label seen
        once); NaN for a label without samples. A label's few samples make its bias large: one above
        `BIAS_SHARE_WARNING` of its score is said, and there (order <= 1) its interval is a lower bound, ``high =
        +inf`` ([`bias_corrected`][lightning_spectral.metrics.reading.bias_corrected]). A collective under DDP.

        Raises:
            RuntimeError: no per-label draws (``noise_draws=0``, ``label_prompts=True``) or no ``num_classes``.
        """
        order = self.orders[0] if alpha is None else check_orders(alpha)[0][0]
        level = check_fraction(level, "level", high_closed=False)
        errors = self.per_prompt_standard_errors(order)  # refuses a metric without per-label draws
        values = self.per_prompt(order)
        accumulator = self._per_prompt_accumulator()
        counts = accumulator.lane_counts()
        biases = self._cached(f"prompt_bias_{order}", lambda: self._per_prompt_biases(order, values))
        worst = int(torch.nan_to_num(biases.abs() / values, nan=0.0).argmax())
        warn_large_bias("ConditionalVendi.per_prompt_interval", f"Vendi of label {worst}", biases[worst],
                        values[worst], int(round(float(counts[worst]))), int(accumulator.cov_sum.shape[-1]),
                        bounded=order <= 1)
        q = student_t_isf((1.0 - level) / 2.0, self.noise_draws)
        return bias_corrected(values, errors, biases, q, level, order <= 1)

    def _per_prompt_biases(self, order: Any, values: Tensor) -> Tensor:
        accumulator = self._per_prompt_accumulator()
        biases = torch.where(values.isnan(), values, torch.zeros_like(values))
        for label in torch.nonzero(accumulator.lane_counts() >= 2).flatten().tolist():
            biases[label] = vendi_bias(accumulator.lane_noise_sums(label), [order], self.precision)[order].cpu()
        return biases

    def least_diverse(self, k: int = 5, min_count: int = 2) -> list[tuple[int, float, int]]:
        """The ``k`` labels with the lowest per-prompt Vendi among those with at least ``min_count`` samples:
        ``(label, vendi, samples)``, lowest first (fewer than ``k`` when fewer labels qualify).

        A label seen once has Vendi exactly 1 (one sample, one eigenvalue), so without ``min_count`` rare labels (a
        caption that seldom recurs, a ragged last batch) would always top the list; ``min_count=1`` keeps them.
        [`galleries`][lightning_spectral.metrics.conditional_reading.ConditionalReading.galleries] uses the default."""
        k = check_positive_int(k, "k")
        min_count = check_positive_int(min_count, "min_count")
        values, counts = self.per_prompt(), self.prompt_counts()  # a count is a lane's trace: round it
        seen = torch.nonzero(~values.isnan() & (counts.to(values.device).round() >= min_count)).flatten()
        order = seen[torch.argsort(values[seen], stable=True)][:k]
        return [(int(i), float(values[i]), int(round(float(counts[i])))) for i in order]

    def galleries(
        self, batches: Iterable[tuple[Any, Ids]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> dict[str, ModeGallery]:
        """``{"least_diverse_prompts": ...}``: for the ``k`` least diverse labels, the first ``per_mode`` kept samples
        of each (labels with at least 2 samples, as ``least_diverse``), from ``batches`` of ``((features, labels),
        ids)``. Row labels name the prompt, its Vendi and count."""
        if self.num_classes is None:
            return {}
        worst = self.least_diverse(k)
        wanted = {label: [] for label, _, _ in worst}  # type: dict[int, list[Tensor]]
        for batch in batches:
            labels, ids = _labelled_ids(batch)
            for label, found in wanted.items():
                have = sum(len(part) for part in found)
                if have < per_mode:
                    found.append(ids[labels == label][: per_mode - have])
        samples, names = [], []
        for label, value, count in worst:
            ids = torch.cat(wanted[label]) if wanted[label] else torch.zeros(0, dtype=torch.long)
            samples.append((ids, torch.full((len(ids),), value, dtype=torch.float64)))
            prompt = f"prompt {label}" if self.prompt_names is None else repr(self.prompt_names[label])
            names.append(f"{prompt}: Vendi {value:.2f} over {count} samples")
        return {"least_diverse_prompts": ModeGallery(samples, names)}


def _labelled_ids(batch: Any) -> tuple[Tensor, Tensor]:
    """The labels and ids of a gallery batch ``((features, labels (N,)), ids (N,))``, on the CPU.

    Raises:
        TypeError / ValueError: naming ``batches`` and the form they must have.
    """
    form = "`batches` must yield ((features, labels (N,)), ids (N,)) for the least diverse prompts' gallery"
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[0], (tuple, list))
            and len(batch[0]) == 2):
        raise TypeError(f"ConditionalVendi.galleries: {form}, got a batch of {type(batch).__name__}.")
    (_, labels), ids = batch
    labels, ids = torch.as_tensor(labels).cpu(), torch.as_tensor(ids).cpu()
    integers = not (labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool)
    if not integers or labels.ndim != 1 or ids.ndim != 1 or ids.shape != labels.shape or ids.is_floating_point():
        raise ValueError(
            f"ConditionalVendi.galleries: {form}; got labels of dtype {labels.dtype} and shape "
            f"{tuple(labels.shape)}, ids of dtype {ids.dtype} and shape {tuple(ids.shape)}."
        )
    return labels, ids
