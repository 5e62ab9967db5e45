"""SPECAlign: add ``weight * SPEC-diff(student, reference)`` to the training loss of any LightningModule.

No public Lightning hook lets a callback change the loss that is backpropagated (the class docstring lists
the hooks and why each falls short), so SPECAlign wraps the module's ``training_step`` for the duration of
``fit``, an instance attribute (Lightning Fabric's ``_FabricModule`` redirects ``forward`` the same way):
the wrapper calls the user's step, takes the student embedding the step produced (a forward hook on a
named submodule, so no extra forward pass), adds the penalty to the returned loss and returns it.
Everything downstream is Lightning's own: the division by ``accumulate_grad_batches``, AMP /
``bf16-mixed``, gradient clipping, DDP gradient averaging, the loss ``optimizer.step(closure)`` returns.
One wrapper serves every SPECAlign of a fit (two references, say): each registers its penalty with it,
and the user's method is restored when the last one's ``fit`` ends (``teardown``) or fails
(``on_exception``: Lightning calls no ``teardown`` after an exception).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric
from typing_extensions import override

from lightning_spectral._checks import (
    check_bool,
    check_embedding_source,
    check_memory,
    check_positive,
    check_positive_int,
    check_seed,
    check_selector,
)
from lightning_spectral.callbacks.embedding_callback import EmbeddingCallback
from lightning_spectral.callbacks.embeddings import BatchSelector, EmbeddingFn, ReferenceEmbedding
from lightning_spectral.callbacks.saved_state import (
    check_saved_state,
    load_all_or_none,
    refusal_fix,
    saved_mapping,
    state_key_of,
)
from lightning_spectral.functional.spec_align_solver import SpecAlignSolver
from lightning_spectral.kernels.by_name import KERNELS

# str: a features file; nn.Module: a frozen encoder (a `class_path` in LightningCLI configs); Any: a tensor,
# an array, a features table or a function of the batch.
Reference = Union[str, nn.Module, Any]


#: The values SPECAlign logs per step and as epoch means, under its ``log_prefix``.
LOGGED = ("spec_diff", "penalty", "task_loss", "weight")


class SPECAlign(EmbeddingCallback):
    r"""Adds ``weight * SPEC-diff(student, reference)`` of each training batch to the training loss.

    SPEC-align (Jalali et al., ICML 2025, eq. 6): ``min_theta L(psi_theta) + beta * SPEC-diff(psi_theta, psi_ref)``.
    On each penalised step the student and reference embeddings of the batch (gathered over DDP ranks, the
    student's with its gradient) give the top ``|eigenvalue|`` of ``(K_student - K_reference)/n`` with its
    eigenvector held fixed (Proposition 2): [`SpecAlignSolver`][lightning_spectral.callbacks.SpecAlignSolver], a
    warm-started block Krylov solver with the value and gradient of
    [`spec_align_loss`][lightning_spectral.functional.spec_align_loss] (no full eigendecomposition per step).

    Args:
        reference: where the reference embedding comes from: a frozen ``nn.Module`` (an open_clip or timm
            encoder; run in eval mode under ``no_grad`` on ``reference_input(batch)``), a tensor / array of
            precomputed features ``(N_dataset, d_ref)`` looked up by the sample indices ``index(batch)``, or a
            function ``fn(batch) -> Tensor``.
        weight: ``beta``, the penalty weight after warm-up.
        student: dotted name of the student submodule (its output is captured during the step) or a function
            ``fn(pl_module, batch) -> Tensor``.
        student_input: what to feed the student submodule if the step did not call it (see ``select``).
        reference_input: what to feed a reference module (default: the same as ``student_input``).
        index: where the dataset indices are in a batch, for precomputed reference features.
        kernel: ``"cosine"`` (default, the reference implementation's) or ``"gaussian"``.
        sigma_student: Gaussian bandwidth of the student (fixed, while the student's scale drifts in training:
            the cosine kernel of the SPEC reference implementation is the robust default).
        sigma_reference: Gaussian bandwidth of the reference.
        n_frequencies: random frequencies per embedding for the Gaussian kernel.
        seed: frequency seed.
        every_n_steps: penalise every n-th optimizer step (all micro-batches of that step).
        warmup_steps: ramp the weight linearly from 0 over this many optimizer steps.
        schedule: optional ``fn(global_step) -> multiplier`` applied on top (e.g. a cosine decay).
        gather: gather the batch over DDP ranks before computing SPEC (the loss then sees the global batch).
        log_prefix: prefix of the logged values ``spec_diff``, ``penalty``, ``task_loss`` and ``weight``; several
            SPECAlign callbacks in one fit (one per reference) need distinct prefixes.

    Why ``training_step`` is wrapped: in automatic optimisation Lightning backpropagates the value
    ``training_step`` returns, divided by ``accumulate_grad_batches`` and scaled by the precision plugin,
    and no callback hook returns a new loss. The hooks that see the loss or the gradients were considered:

    - ``on_before_backward(trainer, pl_module, loss)`` gets the loss already divided and AMP-scaled (inside
      ``strategy.backward``). Adding the penalty in place changes what is backpropagated only because
      Lightning passes the very tensor it then backpropagates (not a documented contract); the penalty would
      need the precision plugin's scale re-applied by hand (``GradScaler.scale`` under ``16-mixed``, none
      where DeepSpeed scales inside its engine); and the detached copy Lightning took before the hook keeps
      the task loss alone: ``optimizer.step(closure)`` would return it (LBFGS's line search would compare
      losses without the penalty with gradients that include it) and ``outputs["loss"]`` of
      ``on_train_batch_end`` would change.
    - A second backward of the penalty inside ``on_before_backward`` (``retain_graph=True``, through
      ``trainer.strategy.backward`` for the scaling) calls ``on_before_backward``, ``on_after_backward`` and
      the module's ``backward`` again for every callback and the module (a gradient-norm logger would see
      a partial gradient), and under DDP marks the student's parameters ready twice in one step:
      ``RuntimeError: Expected to mark a variable ready only once`` (when the penalty reaches every
      parameter, the second backward's gradients are silently left out of the all-reduce instead).
    - ``on_after_backward`` and ``on_before_optimizer_step`` come after the loss's backward has freed the
      graph of the forward pass the penalty shares: the penalty's gradient would need a second forward
      pass (other dropout masks and batch-norm statistics, twice the cost).
    - ``on_train_batch_end`` comes after the optimizer step.

    Examples:
        >>> import torch
        >>> align = SPECAlign(reference=torch.randn(100, 8), weight=0.1, student="encoder", index=2)
        >>> align.weight_at(0), SPECAlign(torch.randn(4, 2), weight=0.5, index=2, warmup_steps=10).weight_at(5)
        (0.1, 0.25)
    """

    def __init__(
        self,
        reference: Reference,
        *,
        weight: float = 0.1,
        student: Union[str, EmbeddingFn] = "encoder",
        student_input: BatchSelector = None,
        reference_input: BatchSelector = None,
        index: BatchSelector = None,
        kernel: str = "cosine",
        sigma_student: Optional[float] = None,
        sigma_reference: Optional[float] = None,
        n_frequencies: int = 512,
        seed: int = 0,
        every_n_steps: int = 1,
        warmup_steps: int = 0,
        schedule: Optional[Callable[[int], float]] = None,
        gather: bool = True,
        log_prefix: str = "spec_align/",
    ) -> None:
        check_embedding_source(student, "student", "SPECAlign")
        check_selector(student_input, "student_input", "SPECAlign")
        n_frequencies = check_positive_int(n_frequencies, "n_frequencies")  # a number before its memory is checked
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"SPECAlign: `weight` must be a finite number >= 0, got {weight!r}.")
        if kernel not in KERNELS:
            raise ValueError(f"SPECAlign: `kernel` must be one of {KERNELS}, got {kernel!r}.")
        if kernel == "gaussian":
            if sigma_student is None or sigma_reference is None:
                raise ValueError(
                    "SPECAlign(kernel='gaussian') needs `sigma_student` and `sigma_reference` (see "
                    "`lightning_spectral.functional.match_bandwidth`), or use kernel='cosine'."
                )
            check_positive(sigma_student, "sigma_student")
            check_positive(sigma_reference, "sigma_reference")
            # at least: float64 frequencies of width-1 inputs and float32 features of a 2-sample batch, both sides
            check_memory("SPECAlign", "n_frequencies", n_frequencies, 64 * n_frequencies, "frequencies and features")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"SPECAlign: `warmup_steps` must be an integer >= 0, got {warmup_steps!r}.")
        if schedule is not None and not callable(schedule):
            raise ValueError(
                f"SPECAlign: `schedule` must be a function `fn(global_step) -> multiplier`, got {schedule!r}."
            )
        if not isinstance(log_prefix, str):
            raise ValueError(f"SPECAlign: `log_prefix` must be a string, got {log_prefix!r}.")
        super().__init__(student, student_input, owner="SPECAlign(student)")
        self.weight = float(weight)
        self.reference = ReferenceEmbedding(
            reference, reference_input if reference_input is not None else student_input, index, "SPECAlign(reference)"
        )
        self.kernel = kernel
        self.sigmas = (sigma_student, sigma_reference)
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.seed = check_seed(seed)
        self.every_n_steps = check_positive_int(every_n_steps, "every_n_steps")
        self.warmup_steps = warmup_steps
        self.schedule = schedule
        self.gather = check_bool(gather, "gather")
        self.log_prefix = log_prefix
        self.last_spec_diff = math.nan
        self.penalised_steps = 0
        # The penalty without a full eigendecomposition per step: warm-started block Krylov, exact to 1e-7 (the
        # exact route answers when it does not converge).
        self.solver = SpecAlignSolver(kernel, sigma_student, sigma_reference, self.n_frequencies, self.seed)
        self._trainer: Optional[L.Trainer] = None
        # The epoch means of the logged values, kept here (and in checkpoints) rather than in Lightning's logger
        # state, which checkpoints do not hold: a run resumed mid-epoch logs the means of the whole epoch.
        self.epoch_means = {name: MeanMetric() for name in LOGGED}
        for metric in self.epoch_means.values():
            metric.persistent(True)

    @property
    def student(self) -> Any:
        """The student's [`EmbeddingSource`][lightning_spectral.callbacks.EmbeddingSource]."""
        return self.source

    @property
    def state_key(self) -> str:
        return state_key_of(
            self,
            student=self._identity(),
            reference=self.reference.describe(),
            kernel=self.kernel,
            log_prefix=self.log_prefix,
        )

    def weight_at(self, step: int) -> float:
        """The penalty weight at optimizer step ``step``: warm-up ramp, then ``schedule``."""
        weight = self.weight
        if self.warmup_steps:
            weight *= min(1.0, step / self.warmup_steps)
        if self.schedule is not None:
            weight *= float(self.schedule(step))
        return weight

    # ------------------------------------------------------------------ lifecycle

    @override
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError(
                "SPECAlign adds its penalty to the loss returned by `training_step`, which needs automatic "
                "optimisation. With manual optimisation call `lightning_spectral.functional.spec_align_loss` "
                "in your step instead."
            )
        self.reference.to(pl_module.device)
        for metric in self.epoch_means.values():
            metric.to(pl_module.device)
        self._trainer = trainer
        _register_penalty(pl_module, self)

    @override
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # not called when a run resumes mid-epoch: the restored sums of the epoch's first batches stay
        for metric in self.epoch_means.values():
            metric.reset()

    @override
    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _unregister_penalty(pl_module, self)
        super().teardown(trainer, pl_module, stage)

    @override
    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # Lightning calls `on_exception` but no `teardown` when a fit fails: restore the user's step here.
        self.teardown(trainer, pl_module, trainer.state.fn.value if trainer.state.fn is not None else "fit")

    # ------------------------------------------------------------------ the penalty

    def _add_penalty(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, output: Any) -> Any:
        step = trainer.global_step
        weight = self.weight_at(step)
        loss = output.get("loss") if isinstance(output, Mapping) else output
        if loss is None or weight == 0 or step % self.every_n_steps:
            return output
        if not isinstance(loss, Tensor):
            raise TypeError(f"SPECAlign: training_step returned a loss of type {type(loss).__name__}, not a tensor.")
        student = self.batch_embedding(pl_module, batch)
        reference = self.reference(batch, pl_module.device)
        if self.gather and trainer.world_size > 1:
            # Every rank computes the same loss on the global batch; the gather's backward sends each rank the
            # gradient of its own slice, and DDP averages parameter gradients: the global-batch penalty's gradient.
            student = EmbeddingCallback.gather(trainer, student, sync_grads=True)
            reference = EmbeddingCallback.gather(trainer, reference)
        spec_diff = self.solver(student, reference)
        penalty = weight * spec_diff
        total = loss + penalty.to(loss.dtype)
        self.last_spec_diff = float(spec_diff.detach())
        self.penalised_steps += 1
        batch_size = student.shape[0]
        values = {"spec_diff": spec_diff, "penalty": penalty, "task_loss": loss, "weight": torch.tensor(weight)}
        for name in LOGGED:
            # the step's value (global under DDP with `gather`) and the epoch's batch-size-weighted mean
            mean = self.epoch_means[name]
            mean(values[name].detach().float().to(mean.device), batch_size)
            pl_module.log(
                self.log_prefix + name, mean, on_step=True, on_epoch=True, batch_size=batch_size,
                metric_attribute=f"{self.log_prefix}{name}",
            )
        if isinstance(output, Mapping):
            return {**output, "loss": total}
        return total

    # ------------------------------------------------------------------ resume

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "last_spec_diff": self.last_spec_diff,
            "penalised_steps": self.penalised_steps,
            "solver": self.solver.state_dict(),  # the warm start: a resumed run repeats the same iterates
            "epoch_means": {name: metric.state_dict() for name, metric in self.epoch_means.items()},
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore `state_dict`'s output, checked whole first (a refused state leaves the callback as it was);
        states without ``solver`` or ``epoch_means`` (older versions) keep the current ones.

        Raises:
            ValueError: a missing key, a damaged counter, or a solver / epoch-mean state that does not load; named,
                with the fix.
        """
        check_saved_state(state_dict, ("last_spec_diff", "penalised_steps"), self.owner, self.state_key)
        steps, diff = state_dict["penalised_steps"], state_dict["last_spec_diff"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(
                f"{self.owner}.load_state_dict: the saved `penalised_steps` must be an integer >= 0, got {steps!r}. "
                + refusal_fix(self.owner, self.state_key)
            )
        try:
            diff = float(diff)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{self.owner}.load_state_dict: the saved `last_spec_diff` must be a number, got {diff!r}. "
                + refusal_fix(self.owner, self.state_key)
            ) from error
        means: Mapping[str, Any] = {}
        if "epoch_means" in state_dict:
            means = saved_mapping(state_dict, "epoch_means", self.owner, self.state_key)
        parts: dict[str, Any] = {f"epoch_means/{name}": self.epoch_means[name] for name in means
                                 if name in self.epoch_means}
        states = {f"epoch_means/{name}": state for name, state in means.items()}
        if "solver" in state_dict:
            parts["solver"], states["solver"] = self.solver, state_dict["solver"]
        load_all_or_none(parts, states, self.owner, self.state_key, what="state")
        self.last_spec_diff, self.penalised_steps = diff, steps


_PENALTIES = "_lightning_spectral_penalties"


def _register_penalty(pl_module: L.LightningModule, callback: SPECAlign) -> None:
    """Add ``callback``'s penalty to the module's ``training_step``, wrapping it once for all SPECAlign callbacks."""
    registry = pl_module.__dict__.get(_PENALTIES)
    if registry is None:
        original = pl_module.training_step
        registry = {"callbacks": [], "replaced": pl_module.__dict__.get("training_step")}

        @functools.wraps(original)
        def training_step(*args: Any, **kwargs: Any) -> Any:
            output = original(*args, **kwargs)
            batch = args[0] if args else kwargs.get("batch")
            for penalty in list(registry["callbacks"]):
                output = penalty._add_penalty(penalty._trainer, pl_module, batch, output)
            return output

        pl_module.training_step = training_step  # type: ignore[method-assign]
        pl_module.__dict__[_PENALTIES] = registry
    clash = [other for other in registry["callbacks"] if other.log_prefix == callback.log_prefix]
    if clash:
        raise ValueError(
            f"SPECAlign: two SPECAlign callbacks log under log_prefix={callback.log_prefix!r}; give each its own "
            "(e.g. 'spec_align/dino/' and 'spec_align/clip/')."
        )
    registry["callbacks"].append(callback)


def _unregister_penalty(pl_module: L.LightningModule, callback: SPECAlign) -> None:
    """Remove ``callback``'s penalty; the last one out restores what ``training_step`` was before."""
    registry = pl_module.__dict__.get(_PENALTIES)
    if registry is None or callback not in registry["callbacks"]:
        return
    registry["callbacks"].remove(callback)
    if registry["callbacks"]:
        return
    del pl_module.__dict__[_PENALTIES]
    if registry["replaced"] is None:
        pl_module.__dict__.pop("training_step", None)  # the class method is back
    else:
        pl_module.training_step = registry["replaced"]  # type: ignore[method-assign]
