"""ConditionalVendi: prompt-aware diversity of a conditional generator's samples, and which prompts collapsed."""

from __future__ import annotations

import math
from collections.abc import Sequence
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
from lightning_spectral.algebra.eigen import eigen_dtype
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, add_feature_sums_
from lightning_spectral.functional.fkea import Orders, check_orders
from lightning_spectral.functional.sampling_noise import (
    DEFAULT_RATIO,
    DEFAULT_SCORE_DRAWS,
    Multipliers,
    NoiseSums,
    check_noise_draws,
)
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.kernels.joint_gaussian_rff import JointGaussianRFF
from lightning_spectral.metrics.accumulator import Accumulator
from lightning_spectral.metrics.base import SpectralMetric
from lightning_spectral.metrics.conditional_reading import ConditionalReading


class ConditionalVendi(SpectralMetric):
    r"""Conditional-Vendi of order ``alpha`` of (sample, prompt) pairs: the diversity the model adds for a fixed
    prompt (Jalali et al., "Conditional Vendi Score", arXiv 2411.02817).

    $$\mathrm{CondVendi}_\alpha = \exp\big(H_\alpha(K_X \circ K_T / n) - H_\alpha(K_T / n)\big)$$

    with Gaussian kernels ``K_X`` (bandwidth ``sigma``) on the samples and ``K_T`` (``prompt_sigma``) on the prompts,
    read from 2r x 2r random-feature covariances (`functional.conditional`: the joint
    kernel is one Gaussian kernel of ``[x / sigma, t / prompt_sigma]``). ``alpha = 2`` is Conditional-RKE (no
    eigendecomposition). [`summary`][lightning_spectral.metrics.conditional_reading.ConditionalReading.summary] adds
    Information-Vendi ``exp(I(X;T))`` (how much the samples follow the
    prompts), the unconditional Vendi of the samples (``Vendi = Conditional x Information``) and of the prompts.

    Per-prompt diversity, for prompts that recur (class labels, a fixed caption list): with ``num_classes`` every
    update carries a label per sample (integer ``prompts``, or ``labels=``), and the metric keeps one small
    covariance per label (``per_prompt_frequencies`` r_p, the first r_p of the same frequencies):
    [`per_prompt`][lightning_spectral.metrics.conditional_reading.ConditionalReading.per_prompt] gives each label's
    Vendi, [`least_diverse`][lightning_spectral.metrics.conditional_reading.ConditionalReading.least_diverse] the labels
    that collapsed, and [`galleries`][lightning_spectral.metrics.conditional_reading.ConditionalReading.galleries]
    their samples.

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
            [`summary`][lightning_spectral.metrics.conditional_reading.ConditionalReading.summary]); ``False``
            saves a third of the cost when an ``FKEAVendi`` beside logs the latter.
        label_prompts: the prompts are always integer labels (needs ``num_classes``): the prompts' covariance is
            then exact from the per-label counts, with no (2r)^2 sum (with ``unconditional=False``, updates cost
            about one FKEAVendi's).
        prompt_agnostic: also keep the paired covariance of ``[phi_x(x), phi_t(t)]`` ((4r)^2, four times one
            covariance) for the prompt-agnostic modes
            ([`prompt_agnostic_modes`][lightning_spectral.metrics.conditional_reading.ConditionalReading.prompt_agnostic_modes],
            Scendi's Schur complement).
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
        >>> round(float(metric.compute()), 1), [label for label, _, _ in metric.reading().least_diverse(1)]
        (1.5, [2])
    """

    inputs = "conditional"
    higher_is_better: Optional[bool] = True
    plot_lower_bound: float = 1.0
    feature_map: JointGaussianRFF
    reading_class = ConditionalReading

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
        self._add_accumulator("joint", feature_map=rff.side("joint"), multipliers=multipliers)
        if self.unconditional:
            self._add_accumulator(
                "samples", feature_map=rff.side("samples"), same_samples_as="joint", multipliers=multipliers
            )
        if not self.label_prompts:
            self._add_accumulator(
                "prompts", feature_map=rff.side("prompts"), same_samples_as="joint", multipliers=multipliers
            )
        self.prompt_agnostic = check_bool(prompt_agnostic, "prompt_agnostic")
        self.ridge = check_positive(ridge, "ridge")
        if self.prompt_agnostic:
            check_state_memory(type(self).__name__, 2 * rff.n_frequencies, matrices=1 + self.noise_draws, vectors=1)
            self._add_accumulator(
                "paired", feature_map=_PairedSides(rff), same_samples_as="joint", multipliers=multipliers
            )
        if self.num_classes is not None:
            per_label = _PerLabelMap(rff, per_prompt_frequencies, self.num_classes)
            self._add_accumulator(
                "per_prompt", feature_map=per_label, accumulator_class=_PerLabelAccumulator, same_samples_as="joint",
                multipliers=multipliers,
            )
        if in_features is not None:
            self._build(tuple(in_features))

    def _build(self, in_features: Any, argument: str = "in_features") -> None:
        """Fix the widths ``(d_samples, d_prompts)`` and size the sums.

        Raises:
            ValueError: the frequencies' draw ((d_samples + d_prompts) x r float64) would not fit in memory, naming
                ``argument`` (what set the widths).
        """
        if self.in_features is None and isinstance(in_features, (tuple, list)) and len(in_features) == 2:
            _check_draw_memory(in_features, self.n_frequencies, argument)
        super()._build(in_features)

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
            self._build(widths, "prompts" if from_prompts is None else "num_classes")
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
