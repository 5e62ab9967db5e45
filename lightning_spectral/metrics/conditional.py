"""ConditionalVendi: prompt-aware diversity of a conditional generator's samples, and which prompts collapsed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

from lightning_spectral._checks import (
    check_bool,
    check_features,
    check_memory,
    check_positive,
    check_positive_int,
    check_state_memory,
)
from lightning_spectral.algebra.eigen import eigen_dtype, psd_eigenvalues, symmetric_eigh
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, add_feature_sums_
from lightning_spectral.functional.conditional import (
    ConditionalSpectra,
    conditional_scores,
    entropy_of,
    prompt_agnostic_covariance,
    prompt_agnostic_share_replicates,
)
from lightning_spectral.functional.fkea import Orders, VendiResult, check_orders, vendi_replicates, vendi_score
from lightning_spectral.functional.modes import Ids, Modes, check_candidates_memory, orient, top_samples
from lightning_spectral.functional.sampling_noise import (
    DEFAULT_RATIO,
    DEFAULT_SCORE_DRAWS,
    Multipliers,
    NoiseSums,
    check_noise_draws,
    standard_error,
)
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.kernels.joint_gaussian_rff import JointGaussianRFF
from lightning_spectral.metrics.accumulator import Accumulator
from lightning_spectral.metrics.base import ModeGallery, SpectralMetric
from lightning_spectral.metrics.headline import headline_values


class ConditionalVendi(SpectralMetric):
    r"""Conditional-Vendi of order ``alpha`` of (sample, prompt) pairs: the diversity the model adds for a fixed
    prompt (Jalali et al., "Conditional Vendi Score", arXiv 2411.02817).

    $$\mathrm{CondVendi}_\alpha = \exp\big(H_\alpha(K_X \circ K_T / n) - H_\alpha(K_T / n)\big)$$

    with Gaussian kernels ``K_X`` (bandwidth ``sigma``) on the samples and ``K_T`` (``prompt_sigma``) on the prompts,
    read from 2r x 2r random-feature covariances (`functional.conditional`: the joint
    kernel is one Gaussian kernel of ``[x / sigma, t / prompt_sigma]``). ``alpha = 2`` is Conditional-RKE (no
    eigendecomposition). [`summary`][lightning_spectral.metrics.ConditionalVendi.summary] adds Information-Vendi
    ``exp(I(X;T))`` (how much the samples follow the
    prompts), the unconditional Vendi of the samples (``Vendi = Conditional x Information``) and of the prompts.

    Per-prompt diversity, for prompts that recur (class labels, a fixed caption list): with ``num_classes`` every
    update carries a label per sample (integer ``prompts``, or ``labels=``), and the metric keeps one small
    covariance per label (``per_prompt_frequencies`` r_p, the first r_p of the same frequencies):
    [`per_prompt`][lightning_spectral.metrics.ConditionalVendi.per_prompt] gives each label's Vendi,
    [`least_diverse`][lightning_spectral.metrics.ConditionalVendi.least_diverse] the labels that collapsed, and
    [`galleries`][lightning_spectral.metrics.ConditionalVendi.galleries] their samples.

    State: float64 sums of four accumulators (joint, samples, prompts: (2r)^2 each; per label: L (2r_p)^2),
    all-reduced under DDP (one all-reduce each); memory does not grow with the number of samples.

    Args:
        sigma: Gaussian bandwidth of the samples' embeddings (as [`FKEAVendi`][lightning_spectral.metrics.FKEAVendi]),
            or ``"auto"``: fixed at the first read by the rule of
            [`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth] from the samples' rows alone (the prompts
            play no part: the metric has no reference side, so it reads every sample it holds, as a one-sample
            ``FKEAVendi(sigma="auto")`` does on the same samples); ``summary()["sigma"]`` reports it.
        prompt_sigma: Gaussian bandwidth of the prompts' embeddings: it defines "the same prompt" (one-hot labels
            are sqrt(2) apart, so ``prompt_sigma = 0.1`` makes distinct labels unrelated). A number: a median rule
            would make distinct labels similar (0.5 x sqrt(2)), so it has no ``"auto"``.
        n_frequencies: r; each covariance is 2r x 2r.
        alpha: an order in (0, inf] or a sequence of orders.
        seed: frequency seed, identical on every rank.
        num_classes: the number of labels (``prompts`` may then be integer labels (N,), turned into one-hot rows);
            enables per-prompt diversity.
        per_prompt_frequencies: r_p of the per-label covariances (<= ``n_frequencies``; default
            ``min(128, n_frequencies)``).
        precision: the eigendecompositions' dtype (see [`FKEAVendi`][lightning_spectral.metrics.FKEAVendi]).
        prompt_names: a name per label (``num_classes`` of them, e.g. the captions), used in gallery rows.
        unconditional: also keep the samples' own covariance (Information-Vendi and the unconditional Vendi in
            [`summary`][lightning_spectral.metrics.ConditionalVendi.summary]); ``False`` saves a third of the cost when
            an ``FKEAVendi`` beside logs the latter.
        label_prompts: the prompts are always integer labels (needs ``num_classes``): the prompts' covariance is
            then exact from the per-label counts, with no (2r)^2 sum (with ``unconditional=False``, updates cost
            about one FKEAVendi's).
        prompt_agnostic: also keep the paired covariance of ``[phi_x(x), phi_t(t)]`` ((4r)^2, four times one
            covariance) for the prompt-agnostic modes
            ([`prompt_agnostic_modes`][lightning_spectral.metrics.ConditionalVendi.prompt_agnostic_modes], Scendi's
            Schur complement).
        ridge: the ridge of the prompt-side solve of the Schur complement
            (`prompt_agnostic_covariance`): this library's regularisation (Scendi uses the pseudo-inverse), and the
            complement depends on it; report it with any value read from the complement.
        noise_draws: ``A``, the multiplier draws kept on every covariance side for the standard errors of the
            scores (``se``, ``information_se``, ``vendi_se``, ``prompt_vendi_se``, ``prompt_agnostic_share_se``;
            default 2: ``A`` more sums per side, (2r)^2 each for the joint, sample and prompt sides, (4r)^2 for the
            paired one: the noise state is ``A`` times the scores'; interval ``+- t_{A, 0.975} se``; with
            ``num_classes`` also ``A`` per label, (2 r_p)^2 each, for ``prompt_se``); 0, or ``label_prompts=True``,
            keeps none and reports no standard errors.
        in_features: widths ``(d_samples, d_prompts)``, if known.
        chunk_size: rows mapped and summed at once (rows wait in a buffer until this many are pending).
        feature: a frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then takes
            images ([`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]); ``None``: embeddings. Prompts
            never pass through it.
        normalize: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
            torchmetrics' FID convention); ``None`` (default, as the callbacks): read from the dtype.
        save_feature: with ``feature``: also write its weights into the metric's ``state_dict``.
        kwargs: ``torchmetrics.Metric`` keyword arguments (``process_group``, ``dist_sync_fn``, ...).

    Raises:
        ValueError: bad arguments; bad batches (rows that do not pair up, labels out of range, widths that change).
        RuntimeError: ``compute`` before any sample.

    Examples:
        >>> import torch
        >>> metric = ConditionalVendi(sigma=1.0, prompt_sigma=0.1, n_frequencies=256, alpha=2, num_classes=3)
        >>> labels = torch.arange(300) % 3
        >>> modes = torch.randn(3, 2, 8, generator=torch.Generator().manual_seed(0)) * 50   # two modes per prompt
        >>> samples = modes[labels, (torch.arange(300) // 3) % 2] + 0.01 * torch.randn(300, 8)
        >>> samples[labels == 2] = modes[2, 0]                # prompt 2 collapsed to one sample
        >>> metric.update(samples, labels)
        >>> round(float(metric.compute()), 1), [label for label, _, _ in metric.least_diverse(1)]
        (1.5, [2])
    """

    inputs = "conditional"
    higher_is_better: Optional[bool] = True
    plot_lower_bound: float = 1.0
    feature_map: JointGaussianRFF

    def __init__(
        self,
        sigma: Union[float, str],
        prompt_sigma: float,
        n_frequencies: int = 2048,
        *,
        alpha: Orders = 1.0,
        seed: int = 0,
        num_classes: Optional[int] = None,
        per_prompt_frequencies: Optional[int] = None,
        precision: str = "auto",
        prompt_names: Optional[Sequence[str]] = None,
        unconditional: bool = True,
        label_prompts: bool = False,
        prompt_agnostic: bool = False,
        ridge: float = 1e-3,
        noise_draws: int = DEFAULT_SCORE_DRAWS,
        in_features: Optional[tuple[int, int]] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: Optional[bool] = None,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        orders, single = check_orders(alpha)
        eigen_dtype(precision, 0)
        noise_draws = check_noise_draws(noise_draws)
        if in_features is not None and (not isinstance(in_features, (tuple, list)) or len(in_features) != 2):
            raise ValueError(
                f"ConditionalVendi: `in_features` must be a pair (d_samples, d_prompts), got {in_features!r}; or "
                "leave it None (the first batch fixes the widths)."
            )
        rff = JointGaussianRFF(sigma, prompt_sigma, n_frequencies, seed)
        sides = 3 if unconditional else 2
        draw_matrices = 0 if label_prompts is True else sides * noise_draws  # each covariance side's draws
        check_state_memory(type(self).__name__, rff.n_frequencies, matrices=sides + draw_matrices, vectors=3)
        self.num_classes = None if num_classes is None else check_positive_int(num_classes, "num_classes")
        if in_features is not None:
            _check_draw_memory(in_features, rff.n_frequencies, "in_features")
        if per_prompt_frequencies is None:
            per_prompt_frequencies = min(128, rff.n_frequencies)
        per_prompt_frequencies = check_positive_int(per_prompt_frequencies, "per_prompt_frequencies")
        if per_prompt_frequencies > rff.n_frequencies:
            raise ValueError(
                f"ConditionalVendi: `per_prompt_frequencies` ({per_prompt_frequencies}) must be <= `n_frequencies` "
                f"({rff.n_frequencies}): the per-label maps use the first r_p of the same frequencies."
            )
        if self.num_classes is not None:
            width = 2 * per_prompt_frequencies
            lane = width * (width + 1) + (0 if label_prompts is True else noise_draws * (1 + width * width))
            check_memory(
                type(self).__name__, "num_classes", self.num_classes, 8 * self.num_classes * lane,
                f"{self.num_classes} per-label float64 sums of {width} x {width} (and {noise_draws} multiplier sums "
                "each, `noise_draws`)",
                "use fewer labels, a smaller `per_prompt_frequencies` or fewer `noise_draws`",
            )
        if prompt_names is not None and (
            self.num_classes is None or isinstance(prompt_names, str) or not hasattr(prompt_names, "__len__")
            or not hasattr(prompt_names, "__iter__") or len(prompt_names) != self.num_classes
        ):
            raise ValueError(
                "ConditionalVendi: `prompt_names` must be a sequence of `num_classes` names (one per label), and "
                f"needs `num_classes`; got {prompt_names!r} with num_classes={self.num_classes}."
            )
        self.prompt_names = None if prompt_names is None else [str(name) for name in prompt_names]
        super().__init__(
            feature_map=rff,
            chunk_size=chunk_size,
            feature=feature,
            normalize=normalize,
            save_feature=save_feature,
            **kwargs,
        )
        self.sigma, self.prompt_sigma = rff.sigma, rff.prompt_sigma
        self.n_frequencies, self.seed = rff.n_frequencies, rff.seed
        self.orders, self._single_order, self.alpha, self.precision = orders, single, alpha, precision
        self.per_prompt_frequencies = per_prompt_frequencies
        self.unconditional = check_bool(unconditional, "unconditional")
        self.label_prompts = check_bool(label_prompts, "label_prompts")
        if self.label_prompts and self.num_classes is None:
            raise ValueError(
                "ConditionalVendi: `label_prompts=True` reads the prompts' covariance from the per-label counts; "
                "give `num_classes=` (the number of labels)."
            )
        # Every accumulator sees the same (sample, prompt) rows, through its own side of the joint map: "joint"
        # counts them (`sample_count`), the others are views of the same samples.
        # Every side keeps the same multiplier draws (one multiplier per row: their noises are correlated, and
        # each score's replicate is a signed sum of theirs), at the finer bandwidth.
        self.noise_draws = 0 if self.label_prompts else noise_draws
        multipliers = None
        if self.noise_draws:  # sigma="auto": set with the fitted bandwidth (`set_bandwidth`)
            finest = None if rff.sigma is None else self._noise_bandwidth(rff.sigma)
            multipliers = Multipliers(self.noise_draws, finest, rff.seed, DEFAULT_RATIO)
        self.add_accumulator("joint", feature_map=rff.side("joint"), multipliers=multipliers)
        if self.unconditional:
            self.add_accumulator(
                "samples", feature_map=rff.side("samples"), same_samples_as="joint", multipliers=multipliers
            )
        if not self.label_prompts:
            self.add_accumulator(
                "prompts", feature_map=rff.side("prompts"), same_samples_as="joint", multipliers=multipliers
            )
        self.prompt_agnostic = check_bool(prompt_agnostic, "prompt_agnostic")
        self.ridge = check_positive(ridge, "ridge")
        if self.prompt_agnostic:
            check_state_memory(type(self).__name__, 2 * rff.n_frequencies, matrices=1 + self.noise_draws, vectors=1)
            self.add_accumulator(
                "paired", feature_map=_PairedSides(rff), same_samples_as="joint", multipliers=multipliers
            )
        if self.num_classes is not None:
            per_label = _PerLabelMap(rff, per_prompt_frequencies, self.num_classes)
            self.add_accumulator(
                "per_prompt", feature_map=per_label, accumulator_class=_PerLabelAccumulator, same_samples_as="joint",
                multipliers=multipliers,
            )
        if in_features is not None:
            self.build(tuple(in_features))

    def build(self, in_features: Any, argument: str = "in_features") -> None:
        """Fix the widths ``(d_samples, d_prompts)`` and size the sums.

        Raises:
            ValueError: the frequencies' draw ((d_samples + d_prompts) x r float64) would not fit in memory, naming
                ``argument`` (what set the widths).
        """
        if self.in_features is None and isinstance(in_features, (tuple, list)) and len(in_features) == 2:
            _check_draw_memory(in_features, self.n_frequencies, argument)
        super().build(in_features)

    def _bandwidth_rows(self) -> Tensor:
        """The samples' columns of the held rows (the prompts' play no part in ``sigma="auto"``): every accumulator
        holds the same samples, so they are read once, from ``joint``."""
        held = self.accumulators["joint"].held_rows
        d_x = self.in_features[0] if self.in_features is not None else 0
        return torch.cat(held)[:, :d_x] if held else torch.zeros(0, d_x, dtype=torch.float64)

    def _noise_bandwidth(self, sigma: float) -> float:
        """The finer of the samples' ``sigma`` and ``prompt_sigma``: the multipliers see the joint rows."""
        return min(float(sigma), float(self.prompt_sigma))

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The settings the sums depend on beyond the frequencies: the labels and the per-label width."""
        return {"num_classes": self.num_classes, "per_prompt_frequencies": self.per_prompt_frequencies}

    # ---- input ---------------------------------------------------------------------------------------------------
    def _prompts(self, prompts: Tensor, n: int) -> tuple[Tensor, Optional[Tensor]]:
        """Prompt embeddings (N, d_t), and labels when the prompts are integer labels."""
        if not isinstance(prompts, Tensor):
            raise TypeError(f"ConditionalVendi.update: `prompts` must be a tensor, got {type(prompts).__name__}.")
        if prompts.dtype in (torch.bool,) or (not prompts.is_floating_point() and not prompts.is_complex()):
            if self.num_classes is None:
                raise ValueError(
                    "ConditionalVendi.update: `prompts` are integer labels; build the metric with `num_classes=` to "
                    "turn them into one-hot prompts, or pass prompt embeddings (N, d_t) as floats."
                )
            labels = self._labels(prompts, n, "prompts")
            return torch.nn.functional.one_hot(labels, self.num_classes).float(), labels
        return check_features(prompts, "prompts", owner="ConditionalVendi.update"), None

    def _labels(self, labels: Any, n: int, name: str) -> Tensor:
        labels = torch.as_tensor(labels)
        if labels.is_floating_point() or labels.dtype == torch.bool or labels.ndim != 1 or labels.shape[0] != n:
            raise ValueError(
                f"ConditionalVendi.update: `{name}` must be integer labels of shape ({n},), got dtype {labels.dtype} "
                f"and shape {tuple(labels.shape)}."
            )
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):  # type: ignore[operator]
            raise ValueError(
                f"ConditionalVendi.update: `{name}` must lie in [0, num_classes={self.num_classes}), got values in "
                f"[{int(labels.min())}, {int(labels.max())}]."
            )
        return labels.long()

    def update(self, samples: Tensor, prompts: Tensor, labels: Optional[Tensor] = None) -> None:
        """Add a batch: ``samples`` (N, d_x) embeddings (images with ``feature``), row i generated for prompt i;
        ``prompts`` (N, d_t) embeddings or (N,) integer labels (with ``num_classes``); ``labels`` (N,) the label of
        each prompt, for per-prompt diversity when the prompts are embeddings (required then with ``num_classes``).

        Raises:
            ValueError / TypeError: rows that do not pair up, widths that change, NaN / Inf, labels out of range,
                integer prompts without ``num_classes``, a metric with ``num_classes`` fed without labels, integer
                ``prompts`` with a ``labels=`` that differs from them.
        """
        if self.feature is not None:
            samples = self.feature(samples, "samples")
        samples = check_features(samples, "samples", owner="ConditionalVendi.update")
        prompts, from_prompts = self._prompts(prompts, samples.shape[0])
        if prompts.shape[0] != samples.shape[0]:
            raise ValueError(
                f"ConditionalVendi.update: `samples` has {samples.shape[0]} rows and `prompts` {prompts.shape[0]}; "
                "row i of both must be the same sample (one prompt per generated sample)."
            )
        if labels is not None:
            if self.num_classes is None:
                raise ValueError(
                    "ConditionalVendi.update: `labels` were given but the metric keeps no per-prompt sums; build it "
                    "with `num_classes=` (the number of distinct prompts) to see which prompts collapse."
                )
            labels = self._labels(labels, samples.shape[0], "labels")
            if from_prompts is not None and not torch.equal(labels.cpu(), from_prompts.cpu()):
                raise ValueError(
                    "ConditionalVendi.update: integer `prompts` are already the labels, and `labels=` disagrees with "
                    "them (the joint and per-prompt sums would describe different prompts); drop `labels=`, or pass "
                    "prompt embeddings beside `labels=`."
                )
        labels = from_prompts if labels is None else labels
        if self.num_classes is not None and labels is None:
            raise ValueError(
                "ConditionalVendi.update: the metric was built with `num_classes` (per-prompt diversity), so every "
                "batch needs its labels: pass integer `prompts`, or `labels=` (N,) beside prompt embeddings."
            )
        widths = (samples.shape[1], prompts.shape[1])
        if self.in_features is None:
            self.build(widths, "prompts" if from_prompts is None else "num_classes")
        elif widths != tuple(self.in_features):
            raise ValueError(
                f"ConditionalVendi.update: widths (samples, prompts) {widths} differ from the earlier batches' "
                f"{tuple(self.in_features)}."
            )
        if samples.shape[0] == 0:
            return
        dtype = torch.promote_types(samples.dtype, prompts.dtype)
        rows = torch.cat([samples.to(dtype), prompts.to(device=samples.device, dtype=dtype)], dim=1)
        if self.label_prompts and from_prompts is None:
            raise ValueError(
                "ConditionalVendi.update: the metric was built with `label_prompts=True`; pass the prompts as integer "
                "labels (N,), or build it without `label_prompts` to pass prompt embeddings."
            )
        for name in ("joint", "samples", "prompts", "paired"):
            if name in self.accumulators:
                self.accumulators[name].add(rows)
        if labels is not None:
            self.accumulators["per_prompt"].add(
                torch.cat([labels.to(device=rows.device, dtype=rows.dtype)[:, None], rows[:, : widths[0]]], dim=1)
            )

    # ---- values --------------------------------------------------------------------------------------------------
    def _moment(self, name: str) -> Tensor:
        """The second moment of one side; with ``label_prompts`` the prompts' side is the L x L matrix
        ``diag(sqrt p) V V^T diag(sqrt p)`` (``V``: the features of the L one-hot prompts, ``p``: their shares), whose
        non-zero spectrum is that of ``C_T = V^T diag(p) V``: exact, and no (2r)^2 sum."""
        if name != "prompts" or not self.label_prompts:
            return self.accumulators[name].second_moment()
        counts = self._per_prompt_accumulator().lane_counts()
        if float(counts.sum()) <= 0:
            self.accumulators["joint"]._require()  # the usual "no samples" error
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
        ``"vendi"``, of this rank's sums (all ranks' inside
        [`synced`][lightning_spectral.metrics.SpectralMetric.synced])."""
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
            if self.unconditional:
                out[order] = conditional_scores(ConditionalSpectra(**sides), order)
            else:
                joint, prompts = entropy_of(sides["joint"], order), entropy_of(sides["prompts"], order)
                out[order] = {"conditional": torch.exp(joint - prompts), "prompt_vendi": torch.exp(prompts)}
        return out

    def standard_error(self) -> VendiResult:
        r"""The standard error of Conditional-Vendi (each order): ``standard_errors()[""]``. A collective under DDP.

        Raises:
            RuntimeError: built with ``noise_draws=0`` or ``label_prompts=True`` (no draws are kept).
        """
        return self.standard_errors()[""]

    def standard_errors(self) -> dict[str, Any]:
        r"""The standard error of every score of [`summary`][lightning_spectral.metrics.ConditionalVendi.summary]
        that has one, by its key, from the ``noise_draws`` multiplier draws of every side (one multiplier per row,
        shared), to first order. With $V_J$, $V_X$, $V_T$ the Vendi scores of the joint, sample and prompt
        covariances and $d^J_a$, $d^X_a$, $d^T_a$ their replicates (`functional.vendi_replicates`:
        $\operatorname{tr}(\nabla V \, E_a)$), the draw-$a$ replicates are

        - ``""``: $\mathrm{CV} = V_J / V_T$ moves by $\mathrm{CV}\,(d^J_a / V_J - d^T_a / V_T)$;
        - ``"information"``: $\mathrm{IV} = V_X V_T / V_J$ by $\mathrm{IV}\,(d^X_a / V_X + d^T_a / V_T - d^J_a / V_J)$;
        - ``"vendi"``: $d^X_a$; ``"prompt_vendi"``: $d^T_a$ (with ``unconditional``: ``information``, ``vendi``);
        - ``"prompt_agnostic_share"`` (with ``prompt_agnostic``): $\operatorname{tr}\Lambda$ moves by
          $\operatorname{tr} E^{xx}_a - 2 \operatorname{tr}(E^{xt}_a S) + \operatorname{tr}(S^\top E^{tt}_a S)$,
          $S = (C_{tt} + \varepsilon I)^{-1} C_{tx}$ (`functional.prompt_agnostic_share_replicates`).

        se = the root mean square of the replicates (a scalar per order, ``{order: se}`` for several). The per-label
        values' are
        [`per_prompt_standard_errors`][lightning_spectral.metrics.ConditionalVendi.per_prompt_standard_errors].
        A collective under DDP.

        Raises:
            RuntimeError: built with ``noise_draws=0`` or ``label_prompts=True`` (no draws are kept).
        """
        if not self.noise_draws:
            raise RuntimeError("ConditionalVendi.standard_error: no draws were kept (noise_draws=0, or "
                               "label_prompts=True); build it with noise_draws >= 1 and prompt embeddings.")
        with self.synced():
            return self._cached("se", self._standard_errors)

    def _standard_errors(self) -> dict[str, Any]:
        replicates = {
            name: vendi_replicates(self.accumulators[name].noise_sums(), self.orders, None, self.precision)
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

    def compute(self) -> VendiResult:
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
            values[order] = torch.exp(entropy_of(joint, order) - entropy_of(prompts, order))
        return values[self.orders[0]] if self._single_order else values

    def summary(self) -> dict[str, Any]:
        """``""``: Conditional-Vendi; ``information``: Information-Vendi and ``vendi``: the samples' unconditional
        Vendi (with ``unconditional``); ``prompt_vendi``: the prompts'; with ``num_classes``, ``min_prompt_vendi``
        (the least diverse prompt's Vendi among the labels seen at least twice, as ``least_diverse``) and
        ``prompt`` (each label's Vendi, NaN for a label not seen); ``sigma``: the samples' bandwidth (``"auto"``'s
        fitted value too); ``n`` and ``n_features`` (2r), which the scores depend on; with ``noise_draws``, the
        standard errors ``se`` (of the conditional score), ``information_se``, ``vendi_se``, ``prompt_vendi_se`` and
        ``prompt_agnostic_share_se`` beside the values they belong to
        ([`standard_errors`][lightning_spectral.metrics.ConditionalVendi.standard_errors]); with ``num_classes``,
        ``prompt_se`` (each label's, first order) and ``min_prompt_vendi_se``: the plug-in se of the minimising
        label's score, which ignores which label is the minimum
        ([`per_prompt_standard_errors`][lightning_spectral.metrics.ConditionalVendi.per_prompt_standard_errors]).
        A dict per value for several orders. A collective under DDP."""
        with self.synced():
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

    def headline(self, summary: Mapping[str, Any]) -> dict[str, Tensor]:
        """From ``summary``: ``conditional_{order}`` and ``information_{order}`` (where computed) with their
        ``_se``, and with ``num_classes`` the least diverse prompt's ``min_prompt_vendi`` (and ``_se``)."""
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
        return self.accumulators["paired"]

    def prompt_agnostic_covariance(self) -> Tensor:
        """The Schur complement ``C_xx - C_xt (C_tt + ridge I)^-1 C_tx`` (2r x 2r, float64) of the uncentred paired
        second moment, all ranks (a collective under DDP): the samples' kernel covariance the prompts do not explain
        (trace <= 1; it depends on ``ridge``, see `functional.conditional.prompt_agnostic_covariance`)."""
        with self.synced():
            paired = self._paired()
            return prompt_agnostic_covariance(paired.second_moment(), self.feature_map.out_features, self.ridge)

    def prompt_agnostic_modes(self, k: int = 10) -> Modes:
        """The top-``k`` eigen-pairs of
        [`prompt_agnostic_covariance`][lightning_spectral.metrics.ConditionalVendi.prompt_agnostic_covariance]:
        directions in which the samples vary
        whatever the prompt (eigenvectors (2r, k) over the samples' features, signs so that the samples' mean
        scores >= 0). A collective under DDP."""
        k = check_positive_int(k, "k")
        with self.synced():
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
        return self.accumulators["per_prompt"]  # type: ignore[return-value]

    def prompt_counts(self) -> Tensor:
        """Samples accumulated per label (L,), float64, over all ranks (a collective under DDP)."""
        with self.synced():
            return self._per_prompt_accumulator().lane_counts().clone()

    def per_prompt(self, alpha: Any = None) -> Tensor:
        """Each label's Vendi of order ``alpha`` (default: the metric's first order) among its own samples (L,),
        from its r_p covariance; NaN for a label without samples. Over all ranks (a collective under DDP)."""
        order = self.orders[0] if alpha is None else check_orders(alpha)[0][0]
        accumulator = self._per_prompt_accumulator()
        values = torch.full((self.num_classes,), math.nan, dtype=torch.float64)  # type: ignore[arg-type]
        with self.synced():
            counts, sums = accumulator.lane_counts(), accumulator.cov_sum
            for label in torch.nonzero(counts > 0).flatten().tolist():
                moment = sums[label] / counts[label]
                values[label] = vendi_score(psd_eigenvalues(moment), order).cpu()
        return values

    def per_prompt_standard_errors(self, alpha: Any = None) -> Tensor:
        """Standard errors (L,) of [`per_prompt`][lightning_spectral.metrics.ConditionalVendi.per_prompt] (order
        ``alpha``, default the metric's first), from each label's own multiplier draws (its lane's ``S_a``, the
        samples' multipliers): first order, ``d_a = tr(grad V E_a)`` as `functional.vendi_replicates`, se the root
        mean square over the ``noise_draws`` draws; NaN for a label without samples. A collective under DDP.

        Raises:
            RuntimeError: no per-label draws (``noise_draws=0``, ``label_prompts=True``) or no ``num_classes``.
        """
        order = self.orders[0] if alpha is None else check_orders(alpha)[0][0]
        accumulator = self._per_prompt_accumulator()
        if not accumulator.draws:
            raise RuntimeError("ConditionalVendi.per_prompt_standard_errors: the per-label sums keep no draws "
                               "(noise_draws=0, or label_prompts=True); build it with noise_draws >= 1.")
        with self.synced():
            return self._cached(f"prompt_se_{order}", lambda: self._per_prompt_standard_errors(order))

    def _per_prompt_standard_errors(self, order: Any) -> Tensor:
        accumulator = self._per_prompt_accumulator()
        errors = torch.full((self.num_classes,), math.nan, dtype=torch.float64)  # type: ignore[arg-type]
        counts = accumulator.lane_counts()
        for label in torch.nonzero(counts > 0).flatten().tolist():
            replicates = vendi_replicates(accumulator.lane_noise_sums(label), [order], None, self.precision)
            errors[label] = standard_error(replicates[order]).cpu()
        return errors

    def least_diverse(self, k: int = 5, min_count: int = 2) -> list[tuple[int, float, int]]:
        """The ``k`` labels with the lowest per-prompt Vendi among those with at least ``min_count`` samples:
        ``(label, vendi, samples)``, lowest first (fewer than ``k`` when fewer labels qualify).

        A label seen once has Vendi exactly 1 (one sample, one eigenvalue), so without ``min_count`` rare labels (a
        caption that seldom recurs, a ragged last batch) would always top the list; ``min_count=1`` keeps them.
        [`galleries`][lightning_spectral.metrics.ConditionalVendi.galleries] uses the default."""
        k = check_positive_int(k, "k")
        min_count = check_positive_int(min_count, "min_count")
        with self.synced():
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


def _check_draw_memory(widths: Any, n_frequencies: int, argument: str) -> None:
    """Refuse, before drawing, frequencies ``(d_samples + d_prompts) x r`` (float64) that cannot fit in memory.

    Raises:
        ValueError: naming ``argument`` (what set the widths), the widths and the bytes.
    """
    rows = sum(int(width) for width in widths if isinstance(width, int) and not isinstance(width, bool))
    check_memory(
        "ConditionalVendi", argument, tuple(widths), 8 * rows * n_frequencies,
        f"1 float64 frequency matrix of {rows} x {n_frequencies} for widths (samples, prompts) {tuple(widths)}",
        "use narrower prompt embeddings (e.g. project them) or fewer labels, or a smaller `n_frequencies`",
    )


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


class _PerLabelMap(FeatureMap):
    """The samples' features ``[cos, sin](x Z_x[:, :r_p] / sigma) / sqrt(r_p)`` with one lane per label."""

    squared_norm: Optional[float] = 1.0

    def __init__(self, parent: JointGaussianRFF, n_frequencies: int, labels: int) -> None:
        super().__init__()
        object.__setattr__(self, "parent", parent)  # the parent owns the draw
        self.n_frequencies, self.bandwidths, self.in_features = n_frequencies, labels, None

    @property
    def out_features(self) -> int:
        return 2 * self.n_frequencies

    @property
    def awaits_bandwidth(self) -> bool:
        return self.parent.awaits_bandwidth  # type: ignore[attr-defined]

    def forward(self, x: Tensor) -> Tensor:
        parent: JointGaussianRFF = self.parent  # type: ignore[attr-defined]
        d_x = parent.in_features[0]  # type: ignore[index]
        z = parent.z[:d_x, : self.n_frequencies].to(device=x.device, dtype=x.dtype)
        phases = x @ (z / parent.sigma)
        return torch.cat([phases.cos(), phases.sin()], dim=1).mul_(1.0 / math.sqrt(self.n_frequencies))


class _PerLabelAccumulator(Accumulator):
    """Per-label sums in the lanes of one flat state: rows ``[label, x]`` go to their label's lane only. A lane's
    count is the trace of its ``Q`` (unit-norm features); the state's count is the total. With ``multipliers`` each
    lane also keeps its ``A`` multiplier sums ``w_la``, ``S_la`` (multipliers of the sample ``x``;
    [`NoiseSums`][lightning_spectral.functional.sampling_noise.NoiseSums]): ``L A`` more (2 r_p)^2 sums."""

    lanes_split_rows = True

    def __init__(self, metric: Any, name: str, feature_map: FeatureMap, covariance: bool = True, centre: bool = False,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, multipliers: Optional[Multipliers] = None) -> None:
        super().__init__(metric, name, feature_map, covariance, centre, chunk_size)  # (the base keeps one lane's)
        if multipliers is not None:
            self.multipliers = multipliers
            width, self.width = self.width, None
            if width is not None:
                self.allocate(width)

    @property
    def _noise_lanes(self) -> int:
        return 1 if self.multipliers is None else int(self.bandwidths)  # type: ignore[arg-type]

    def lane_noise_sums(self, label: int) -> NoiseSums:
        """Label ``label``'s ``Q``, ``S_a``, ``w_a`` and count (its lane's trace)."""
        sums = self._views(self.state)
        outer, weighted, weights = sums.outer, sums.weighted, sums.weight_sums
        count = float(outer[label].diagonal().sum().round())  # type: ignore[index]
        return NoiseSums(outer[label], weighted[label], weights[label], count)  # type: ignore[index]

    def _add_chunk(self, flat: Tensor, chunk: Tensor) -> None:
        """Add rows ``[label, x]`` to their labels' lanes."""
        labels, x = chunk[:, 0].long(), chunk[:, 1:]
        sums = self._views(flat)
        weights = None if self.multipliers is None else self.multipliers(x)
        add_feature_sums_(
            self.feature_map(x), count=sums.count, feature_sum=sums.feature_sum, outer=sums.outer, weights=weights,
            weight_sums=sums.weight_sums, weighted=sums.weighted, lanes=labels,
        )

    def lane_counts(self) -> Tensor:
        """Samples per label (L,): the traces of the lanes' ``Q``, rounded (float64)."""
        return self.cov_sum.diagonal(dim1=-2, dim2=-1).sum(-1).round()


class _PairedSides(FeatureMap):
    """``[phi_x(x), phi_t(t)]`` (N, 4r) of rows ``[x, t]``: the paired covariance behind the Schur complement."""

    squared_norm: Optional[float] = 2.0  # two unit-norm halves

    def __init__(self, parent: JointGaussianRFF) -> None:
        super().__init__()
        object.__setattr__(self, "parent", parent)
        self.in_features = None

    @property
    def out_features(self) -> int:
        return 2 * self.parent.out_features  # type: ignore[attr-defined]

    @property
    def awaits_bandwidth(self) -> bool:
        return self.parent.awaits_bandwidth  # type: ignore[attr-defined]

    def forward(self, rows: Tensor) -> Tensor:
        parent: JointGaussianRFF = self.parent  # type: ignore[attr-defined]
        return torch.cat([parent(rows, "samples"), parent(rows, "prompts")], dim=1)
