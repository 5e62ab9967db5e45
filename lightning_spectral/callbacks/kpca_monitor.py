"""KPCAOODMonitor: kernel PCA out-of-distribution monitoring of a model's embeddings during training.

The callback fits a [`KernelPCAOOD`][lightning_spectral.metrics.KernelPCAOOD] detector on in-distribution embeddings (the
training batches, or a dataloader it iterates itself), calibrates a threshold on the in-distribution
validation data, and every validation epoch scores the validation data and any out-of-distribution sets:

- ``flagged_rate``: the fraction of in-distribution validation samples scored above the threshold. It is
  ``1 - tpr`` (up to rounding) on the epoch the threshold was calibrated; later it measures how far the
  embedding has drifted from the one the detector was fitted on.
- per out-of-distribution set: the flagged rate (the detection rate at the fixed threshold), the AUROC and
  the FPR at ``tpr`` TPR of this epoch's scores ([`detection_metrics`][lightning_spectral.functional.detection_metrics]).

Embeddings come from [`EmbeddingCallback`][lightning_spectral.callbacks.EmbeddingCallback] (the lifecycle every
callback here shares). Under DDP every decision rests on all-reduced sums and all-gathered scores, so all
ranks log the same values and take the same branch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader
from typing_extensions import override

from lightning_spectral._checks import check_bool, check_embedding_source, check_fraction
from lightning_spectral.callbacks.embedding_callback import EmbeddingCallback, outside_inference_mode
from lightning_spectral.callbacks.embeddings import BatchSelector, EmbeddingFn
from lightning_spectral.callbacks.report import log_values
from lightning_spectral.callbacks.saved_state import check_saved_state, load_all_or_none, refusal_fix, state_key_of
from lightning_spectral.functional.ood import (
    detection_metrics,
    detection_standard_errors,
    rate_standard_error,
    score_standard_errors,
    threshold_standard_error,
)
from lightning_spectral.metrics.kernel_pca_ood import KernelPCAOOD

__all__ = ["KPCAOODMonitor", "OODDriftWarning"]

REFIT_POLICIES = ("once", "epoch")
FITTING, CALIBRATING, MONITORING = "fitting", "calibrating", "monitoring"


class OODDriftWarning(UserWarning):
    """The in-distribution flagged rate passed ``max_flagged_rate``: the embedding drifted since the fit."""


class KPCAOODMonitor(EmbeddingCallback):
    """Fit a kernel PCA OOD detector on in-distribution embeddings and monitor validation / OOD data with it.

    Timeline in ``Trainer.fit`` (the sanity-check validation is skipped: nothing is fitted yet):

    1. Fit: with ``fit_on="train"`` the embeddings the training steps compute (captured by a forward hook,
       detached) stream into the detector's sums; with a ``DataLoader`` the callback embeds it itself without
       gradients, each rank its share of the samples (``r, r + world_size, ...``).
    2. At the start of the next validation epoch the sums are all-reduced and the kept subspace formed
       (``refit="once"``: the first validation epoch only; ``"epoch"``: the first validation of every training
       epoch, on that epoch's embeddings alone; a ``fit_on`` loader is embedded again with the current model).
    3. The first validation epoch after a (re)fit sets the threshold to the ``ceil(tpr * n)``-th smallest
       in-distribution validation score (all ranks' scores); it stays fixed until the next refit.
    4. Every validation epoch logs ``{log_prefix}flagged_rate``, ``score_mean``, ``score_std``, ``threshold``,
       ``n_components`` and, per OOD set ``name``, ``{name}/flagged_rate``, ``{name}/score_mean``,
       ``{name}/auroc`` and ``{name}/fpr95`` (``fpr`` + ``100 * tpr``), each estimate with its standard error
       ``{key}_se`` in closed form for the scores of the fitted detector (`functional.ood`: binomial for a flagged
       rate at the fixed threshold, DeLong for AUROC, the order statistic's for ``threshold``, read from this
       epoch's in-distribution scores, and for the FPR, which moves with it; none for ``n_components``, a
       setting's consequence). On later epochs an in-distribution
       flagged rate above ``max_flagged_rate`` raises an
       [`OODDriftWarning`][lightning_spectral.callbacks.OODDriftWarning] (and stops training with
       ``stop_on_drift``).

    Validation dataloaders not listed in ``ood_val_dataloader_idx`` are in-distribution. The per-sample scores
    of one validation epoch (8 bytes per sample) are kept until its end, to calibrate and compute AUROC.

    Args:
        embedding: dotted name of the submodule whose output is the embedding (hooked during the module's own
            steps), or a function ``fn(pl_module, batch) -> Tensor (N, d)``; must be picklable for
            ``ddp_spawn``.
        batch_input: what to feed the submodule when the callback embeds a batch itself (a key, an index or a
            function of the batch; default: the batch if it is a tensor, else its first element).
        ood_dataloaders: out-of-distribution data the callback embeds at the end of each validation epoch: a
            ``DataLoader`` (named ``"ood"``) or a mapping ``{name: DataLoader}``.
        ood_val_dataloader_idx: indices of the trainer's validation dataloaders that are out-of-distribution:
            an int, a sequence (named ``val_dataloader_{i}``) or a mapping ``{index: name}``.
        fit_on: ``"train"`` (the training batches), a ``DataLoader`` of in-distribution data, or the name of a
            datamodule method returning one (e.g. ``"train_dataloader_for_eval"``), resolved at ``setup``.
        refit: ``"once"`` (fit on the first epoch, then monitor drift) or ``"epoch"`` (refit every epoch).
        mapping: detector feature map, see [`KernelPCAOOD`][lightning_spectral.metrics.KernelPCAOOD].
        sigma: Gaussian bandwidth on the unit sphere for ``"corp"``.
        n_frequencies: random frequencies r for ``"corp"`` (2r features).
        explained_variance: keep the fewest components reaching this explained-variance ratio.
        n_components: keep exactly this many components instead.
        seed: frequency seed (identical on every rank).
        tpr: fraction of in-distribution validation samples the calibrated threshold accepts, in (0, 1].
        max_flagged_rate: warn when more in-distribution validation samples than this fraction are flagged;
            must exceed ``1 - tpr``, the rate at calibration. Needs ``refit="once"``.
        stop_on_drift: also set ``trainer.should_stop`` when the bound is passed.
        log_prefix: prefix of every logged name.

    Attributes:
        detector: the [`KernelPCAOOD`][lightning_spectral.metrics.KernelPCAOOD]; after training, ``detector.score`` and
            ``detector.predict`` (with the calibrated ``detector.threshold_``) work on any embeddings.
        n_fits: how many times the detector was (re)fitted.

    Raises:
        ValueError: an argument out of range or of the wrong kind (the message names it); at ``setup``, an
            embedding submodule the LightningModule does not have.

    Examples:
        >>> import lightning as L, torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> class Module(L.LightningModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.encoder = torch.nn.Linear(4, 3)
        ...     def training_step(self, batch, _):
        ...         return self.encoder(batch[0]).square().mean()
        ...     def validation_step(self, batch, _):
        ...         self.encoder(batch[0])
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=0.01)
        >>> g = torch.Generator().manual_seed(0)
        >>> data = lambda n: DataLoader(TensorDataset(torch.randn(n, 4, generator=g)), batch_size=50)
        >>> monitor = KPCAOODMonitor("encoder", ood_dataloaders=data(100), n_frequencies=64, tpr=0.9)
        >>> trainer = L.Trainer(max_epochs=1, callbacks=[monitor], logger=False, enable_checkpointing=False,
        ...                     enable_progress_bar=False, enable_model_summary=False)
        >>> trainer.fit(Module(), data(200), data(100))
        >>> round(float(trainer.callback_metrics["ood/flagged_rate"]), 2)   # 1 - tpr at calibration
        0.1
        >>> monitor.detector.fitted, monitor.n_fits
        (True, 1)
    """

    def __init__(
        self,
        embedding: Union[str, EmbeddingFn] = "encoder",
        *,
        batch_input: BatchSelector = None,
        ood_dataloaders: Union[DataLoader, Mapping[str, DataLoader], None] = None,
        ood_val_dataloader_idx: Union[int, Sequence[int], Mapping[int, str]] = (),
        fit_on: Union[str, DataLoader] = "train",
        refit: str = "once",
        mapping: str = "corp",
        sigma: float = 0.5,
        n_frequencies: int = 1024,
        explained_variance: float = 0.9,
        n_components: Optional[int] = None,
        seed: int = 0,
        tpr: float = 0.95,
        max_flagged_rate: Optional[float] = None,
        stop_on_drift: bool = False,
        log_prefix: str = "ood/",
    ) -> None:
        check_embedding_source(embedding, "embedding", "KPCAOODMonitor")
        super().__init__(embedding, batch_input, owner="KPCAOODMonitor")
        if refit not in REFIT_POLICIES:
            raise ValueError(f"KPCAOODMonitor: `refit` must be one of {REFIT_POLICIES}, got {refit!r}.")
        if not (isinstance(fit_on, DataLoader) or (isinstance(fit_on, str) and fit_on)):
            raise ValueError(
                "KPCAOODMonitor: `fit_on` must be 'train', a DataLoader or the name of a datamodule method returning "
                f"one, got {type(fit_on).__name__}."
            )
        if not isinstance(log_prefix, str):
            raise ValueError(f"KPCAOODMonitor: `log_prefix` must be a string (e.g. 'ood/'), got {log_prefix!r}.")
        self.fit_on = fit_on
        self._fit_loader: Optional[DataLoader] = None if isinstance(fit_on, str) else fit_on
        self.refit = refit
        self.tpr = check_fraction(tpr, "tpr")
        self.stop_on_drift = check_bool(stop_on_drift, "stop_on_drift")
        self.max_flagged_rate = _drift_bound(max_flagged_rate, self.tpr, refit, self.stop_on_drift)
        self.log_prefix = log_prefix
        self._detector_args = dict(
            mapping=mapping, sigma=sigma, n_frequencies=n_frequencies, explained_variance=explained_variance,
            n_components=n_components, seed=seed,
        )
        self.detector = KernelPCAOOD(**self._detector_args)
        self.ood_dataloaders = _named_loaders(ood_dataloaders)
        self.ood_val_names = _named_indices(ood_val_dataloader_idx)
        clash = set(self.ood_dataloaders) & set(self.ood_val_names.values())
        if clash:
            raise ValueError(f"KPCAOODMonitor: OOD set names {sorted(clash)} are used twice; rename one of them.")
        # Score sets of a validation epoch: 0 = in-distribution, then one id per OOD set.
        names = list(self.ood_val_names.values()) + list(self.ood_dataloaders)
        self._set_ids = {name: i + 1 for i, name in enumerate(names)}
        # Progress, saved in `state_dict`: FITTING (the sums fill: training batches, or `fit_on` at the next
        # validation) -> CALIBRATING (fitted; the next validation sets the threshold) -> MONITORING; refit="epoch"
        # returns to FITTING at every training epoch.
        self.phase = FITTING
        self._fit_epoch = -1
        self.n_fits = 0
        self._world_size = 1
        self._scores: list[tuple[int, Tensor]] = []

    @property
    @override
    def state_key(self) -> str:
        return state_key_of(self, embedding=self._identity(), log_prefix=self.log_prefix)

    # ---- setup -------------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._world_size = trainer.world_size
        if self.fit_on != "train":
            self._fit_loader = self.resolve(trainer, self.fit_on, "fit_on", call=True)

    # ---- fitting on training batches --------------------------------------------------------------------------
    def _fits_on_train(self) -> bool:
        return self.fit_on == "train"

    @override
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.refit == "epoch" and self.phase != FITTING:
            if self._fits_on_train():
                with outside_inference_mode():
                    self.detector.reset()
            self.phase = FITTING

    @override
    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._fits_on_train() and self.phase == FITTING:
            with outside_inference_mode():
                self._on_device(pl_module).partial_fit(self.batch_embedding(pl_module, batch).detach())
        self.source.clear()  # drop the reference to the step's output

    # ---- validation ---------------------------------------------------------------------------------------------
    @override
    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._scores = []
        if trainer.sanity_checking:
            return
        self._on_device(pl_module)  # a restored detector arrives on the CPU
        training_batches = trainer.state.fn == TrainerFn.FITTING or not self._fits_on_train()
        if self.phase == FITTING and training_batches:
            self._fit(trainer, pl_module)

    def _fit(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Finalize the sums (after embedding ``fit_on`` when it is a loader): a collective on every rank."""
        detector = self._on_device(pl_module)
        with outside_inference_mode():
            if not self._fits_on_train():
                detector.reset()
                for embeddings, _ in self.embed_loader(self._fit_loader, trainer, pl_module):  # type: ignore[arg-type]
                    detector.partial_fit(embeddings)
            try:
                detector.finalize()
            except RuntimeError as error:  # fewer than 2 samples on all ranks together: the same on every rank
                detector.reset()
                self.warn_once("fit", f"KPCAOODMonitor: no detector fitted yet ({error}).")
                return
        self.phase = CALIBRATING
        self._fit_epoch = trainer.current_epoch
        self.n_fits += 1

    def _monitoring(self, trainer: L.Trainer) -> bool:
        return not trainer.sanity_checking and self.detector.fitted

    @override
    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._monitoring(trainer):
            with torch.no_grad():
                embeddings = self.batch_embedding(pl_module, batch)
                set_id = self._set_ids.get(self.ood_val_names.get(dataloader_idx, ""), 0)
                self._scores.append((set_id, self.detector.score(embeddings)))
        self.source.clear()

    @override
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if not self.detector.fitted:
            how = "after the first training epoch" if self._fits_on_train() else "at the first validation epoch"
            self.warn_once(
                "unfitted", f"KPCAOODMonitor: the detector is not fitted, nothing is logged (it is fitted {how})."
            )
            return
        for name, loader in self.ood_dataloaders.items():
            for embeddings, _ in self.embed_loader(loader, trainer, pl_module):
                self._scores.append((self._set_ids[name], self.detector.score(embeddings)))
        scores = self._gather(trainer)
        self._scores = []
        self._report(trainer, pl_module, scores)

    def _gather(self, trainer: L.Trainer) -> dict[int, Tensor]:
        """All ranks' scores of this epoch per set id, in one gather of ``(score, set id)`` rows."""
        rows = [torch.stack([s.double(), torch.full_like(s, i, dtype=torch.float64)], 1) for i, s in self._scores]
        local = torch.cat(rows).cpu() if rows else torch.zeros(0, 2, dtype=torch.float64)
        everything = self.gather(trainer, local)
        return {i: everything[everything[:, 1] == i, 0] for i in range(len(self._set_ids) + 1)}

    def _report(self, trainer: L.Trainer, pl_module: L.LightningModule, scores: dict[int, Tensor]) -> None:
        inside = scores[0]
        if inside.numel() == 0:
            self.warn_once(
                "no-ind", "KPCAOODMonitor: no in-distribution validation samples; nothing is calibrated or logged."
            )
            return
        calibrating = self.phase == CALIBRATING
        if calibrating:  # the scores are all ranks' already: no collective
            with outside_inference_mode():
                self.detector.calibrate_from_scores(inside, self.tpr)
            self.phase = MONITORING
        threshold = float(self.detector.threshold_)
        flagged_rate = float((inside > threshold).double().mean())
        spread = score_standard_errors(inside)
        metrics = {
            "threshold": threshold,
            "threshold_se": float(threshold_standard_error(inside, self.tpr)),
            "n_components": float(self.detector.components_.shape[1]),
            "flagged_rate": flagged_rate,
            "flagged_rate_se": float(rate_standard_error(flagged_rate, inside.numel())),
            "score_mean": float(inside.mean()),
            "score_mean_se": float(spread["mean_se"]),
            "score_std": float(inside.std(correction=0)),
            "score_std_se": float(spread["std_se"]),
        }
        fpr = f"fpr{100 * self.tpr:g}"
        for name, set_id in self._set_ids.items():
            outside = scores[set_id]
            if outside.numel() == 0:
                self.warn_once(f"empty-{name}", f"KPCAOODMonitor: the OOD set {name!r} had no samples this epoch.")
                continue
            detection = detection_metrics(inside, outside, self.tpr)
            errors = detection_standard_errors(inside, outside, self.tpr)
            rate = float((outside > threshold).double().mean())
            metrics[f"{name}/flagged_rate"] = rate
            metrics[f"{name}/flagged_rate_se"] = float(rate_standard_error(rate, outside.numel()))
            metrics[f"{name}/score_mean"] = float(outside.mean())
            metrics[f"{name}/score_mean_se"] = float(score_standard_errors(outside)["mean_se"])
            metrics[f"{name}/auroc"] = float(detection["auroc"])
            metrics[f"{name}/auroc_se"] = float(errors["auroc_se"])
            metrics[f"{name}/{fpr}"] = float(detection["fpr"])
            metrics[f"{name}/{fpr}_se"] = float(errors["fpr_se"])
        log_values(pl_module, metrics, self.log_prefix)  # global already: computed from gathered scores
        if not calibrating and self.max_flagged_rate is not None and flagged_rate > self.max_flagged_rate:
            self._drifted(trainer, flagged_rate)

    def _drifted(self, trainer: L.Trainer, flagged_rate: float) -> None:
        action = "stopping training (stop_on_drift=True)" if self.stop_on_drift else "training goes on"
        rank_zero_warn(
            f"KPCAOODMonitor: {flagged_rate:.1%} of in-distribution validation samples are flagged at epoch "
            f"{trainer.current_epoch}, above max_flagged_rate={self.max_flagged_rate:g} (calibrated to "
            f"{1 - self.tpr:.1%} at epoch {self._fit_epoch}): the embedding drifted from the one the detector was "
            f"fitted on; {action}.",
            category=OODDriftWarning,
        )
        if self.stop_on_drift:  # the rate is global, so every rank decides the same
            trainer.should_stop = True

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _on_device(self, pl_module: L.LightningModule) -> KernelPCAOOD:
        if self.detector.device != pl_module.device:
            with outside_inference_mode():
                self.detector.to(pl_module.device)
        return self.detector

    # ---- checkpointing -----------------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "detector": {name: value.detach().cpu() if isinstance(value, Tensor) else value
                         for name, value in self.detector.state_dict().items()},
            "phase": self.phase,
            "fit_epoch": self._fit_epoch,
            "n_fits": self.n_fits,
            "world_size": self._world_size,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore `state_dict`'s output into a new detector, checked whole first (a refused state leaves the
        callback as it was).

        Raises:
            ValueError: a missing key, an unknown phase, counters that are no integers, or a detector state that
                does not load; named, with the fix.
        """
        check_saved_state(
            state_dict, ("detector", "phase", "fit_epoch", "n_fits", "world_size"), self.owner, self.state_key
        )
        counters = {"fit_epoch": -1, "n_fits": 0, "world_size": 1}  # the least value each can hold
        for key, least in counters.items():
            value = state_dict[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(
                    f"{self.owner}.load_state_dict: the saved `{key}` must be an integer >= {least}, got {value!r}. "
                    + refusal_fix(self.owner, self.state_key)
                )
        if state_dict["phase"] not in (FITTING, CALIBRATING, MONITORING):
            raise ValueError(
                f"{self.owner}.load_state_dict: the saved `phase` must be one of {(FITTING, CALIBRATING, MONITORING)}, "
                f"got {state_dict['phase']!r}. " + refusal_fix(self.owner, self.state_key)
            )
        detector = KernelPCAOOD(**self._detector_args)
        load_all_or_none({"detector": detector}, {"detector": state_dict["detector"]}, self.owner, self.state_key,
                         what="state")
        self.detector = detector
        self.phase = state_dict["phase"]
        self._fit_epoch = state_dict["fit_epoch"]
        self.n_fits = state_dict["n_fits"]
        pending = self.phase == FITTING and float(detector.sums.samples.count) > 0  # local: no collective here
        if pending and state_dict["world_size"] > 1:
            # A mid-epoch checkpoint holds rank 0's partial sums only; adding them on every rank would be wrong.
            with outside_inference_mode():
                detector.sums.reset()
            rank_zero_warn(
                "KPCAOODMonitor: the checkpoint was written by a DDP run in the middle of a fit; the partial sums "
                "are dropped and the fit restarts from the remaining batches of the epoch."
            )


def _drift_bound(max_flagged_rate: Optional[float], tpr: float, refit: str, stop_on_drift: bool) -> Optional[float]:
    """``max_flagged_rate`` as a float, checked against ``tpr``, ``refit`` and ``stop_on_drift``."""
    if max_flagged_rate is None:
        if stop_on_drift:
            raise ValueError("KPCAOODMonitor: `stop_on_drift=True` needs a `max_flagged_rate` bound.")
        return None
    if isinstance(max_flagged_rate, bool) or not isinstance(max_flagged_rate, (int, float)) or not (
        1 - tpr < max_flagged_rate <= 1
    ):
        raise ValueError(
            f"KPCAOODMonitor: `max_flagged_rate` must be in (1 - tpr, 1] = ({1 - tpr:g}, 1], got {max_flagged_rate!r}: "
            "the calibrated threshold already flags a fraction 1 - tpr, so a lower bound would fire without any "
            "drift. Try 2 * (1 - tpr)."
        )
    if refit != "once":
        raise ValueError(
            "KPCAOODMonitor: `max_flagged_rate` needs refit='once'; with refit='epoch' every validation epoch "
            "recalibrates the threshold, so the flagged rate cannot drift."
        )
    return float(max_flagged_rate)


def _check_name(name: Any, what: str) -> None:
    if not (isinstance(name, str) and name) or "dataloader_idx" in name:
        raise ValueError(
            f"KPCAOODMonitor: {what} must be a non-empty string without 'dataloader_idx' (Lightning reserves it "
            f"in logged names), got {name!r}."
        )


def _named_loaders(loaders: Union[DataLoader, Mapping[str, DataLoader], None]) -> dict[str, DataLoader]:
    if loaders is None:
        return {}
    if isinstance(loaders, DataLoader):
        return {"ood": loaders}
    if isinstance(loaders, Mapping) and all(isinstance(v, DataLoader) for v in loaders.values()):
        for name in loaders:
            _check_name(name, "an `ood_dataloaders` name")
        return dict(loaders)
    raise ValueError(
        "KPCAOODMonitor: `ood_dataloaders` must be a DataLoader or a mapping {name: DataLoader}, got "
        f"{type(loaders).__name__}."
    )


def _named_indices(indices: Union[int, Sequence[int], Mapping[int, str]]) -> dict[int, str]:
    if isinstance(indices, int):
        indices = [indices]
    if not isinstance(indices, (Sequence, Mapping)) or isinstance(indices, (str, bytes)):
        raise ValueError(
            "KPCAOODMonitor: `ood_val_dataloader_idx` must be the index (an integer >= 0) of an OOD validation "
            f"dataloader, a sequence of them, or {{index: name}}, got {indices!r}."
        )
    if not isinstance(indices, Mapping):
        indices = {index: f"val_dataloader_{index}" for index in indices}
    for index, name in indices.items():
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"KPCAOODMonitor: `ood_val_dataloader_idx` entries must be integers >= 0, got {index!r}.")
        _check_name(name, f"the name of OOD validation dataloader {index}")
    if len(set(indices.values())) != len(indices):
        raise ValueError("KPCAOODMonitor: names in `ood_val_dataloader_idx` must be distinct.")
    return dict(indices)
