"""DiversityRegularizer: ``weight * diversity_loss`` of a generator's samples against the samples of earlier steps,
added to the generator's loss.

The step that makes the samples adds one line (any optimisation, a GAN's manual two-optimiser step included)::

    g_loss = g_loss + diversity_term(self, fake)

`diversity_term` finds the Trainer's `DiversityRegularizer`, which embeds the samples (``feature``, frozen, or
the samples' own pixels), maps them to Gaussian random features, returns ``weight * log s``
(`functional.diversity_loss`: minus the log RKE of the batch against itself and the running covariance of earlier
batches), then adds the batch to that covariance. No callback hook can change the loss Lightning backpropagates
(see `SPECAlign`'s class doc), and a generator's samples are made inside the user's step, so the step calls it.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import lightning as L
import torch
import torch.distributed as dist
from torch import Tensor, nn

from lightning_spectral._checks import check_positive, check_positive_int, check_seed
from lightning_spectral.algebra.precision import full_precision
from lightning_spectral.functional.diversity import diversity_loss
from lightning_spectral.functional.running_covariance import RunningCovariance
from lightning_spectral.kernels.gaussian_rff import GaussianRFF
from lightning_spectral.metrics.auto_bandwidth import reference_bandwidth
from lightning_spectral.sync.collectives import distributed_available

#: ``sigma="auto"`` is this fraction of the metrics' bandwidth on the reference. Chosen on the 8 x 8 digits' GAN
#: (``benchmarks/bench_diversity_gan.py``: at the metrics' bandwidth (1.53) the generator still collapsed to 1-2
#: classes at weight 5-20; at 1.0 it kept 6 classes, at 0.5 all 8 of 10 seen in 1,000 steps); Fashion-MNIST was
#: measured after the choice.
BANDWIDTH_FRACTION = 1.0 / 3.0


class DiversityRegularizer(L.Callback):
    """Adds ``weight * diversity_loss`` of each batch of generated samples to the generator's loss, against the
    decayed random-feature covariance of the earlier batches (module doc).

    Args:
        weight: the loss's weight (> 0; ``log s`` runs from ``-log n`` to 0, a GAN's loss is of order 1).
        feature: a frozen embedding of the generator's output (an encoder, as `GeneratedSamples`' ``feature``;
            put in eval mode, its parameters get no gradient; the samples' gradient flows through it), or ``None``:
            the samples' own values, flattened.
        n_frequencies: r (2r random features; 1,024 by default, the state a (2r)^2 float64 matrix, 8 MiB).
        reference: real samples (N, ...) (as many as at hand; a few thousand suffice) for ``sigma="auto"``.
        sigma: the Gaussian bandwidth in the embedding's units, or ``"auto"``: `BANDWIDTH_FRACTION` of the
            metrics' rule (`metrics.auto_bandwidth`) on the embedded ``reference``, fixed at the first call and
            kept (and checkpointed). Narrower than the metrics' (which measure): the loss's pull apart of two
            samples at distance ``t`` grows as ``t / sigma^2``, and a collapsing generator's samples are close.
            Not from the generated samples: a generator starts near one point.
        decay: how much of the earlier batches' covariance each step keeps, in [0, 1]: it summarises about the last
            ``batch / (1 - decay)`` samples (`RunningCovariance`).
        seed: the random features' seed.
        log_prefix: the step's logged values: ``{prefix}loss`` (``log s``) and ``{prefix}rke`` (``1 / s``, the RKE
            the batch sees), on step and as epoch means.

    Raises:
        RuntimeError: at the end of a training epoch in which the step never called it (`diversity_term`).

    Examples:
        >>> import torch
        >>> regularizer = DiversityRegularizer(weight=0.5, sigma=1.0, n_frequencies=64)  # or reference=real samples
        >>> samples = torch.randn(16, 2, requires_grad=True)
        >>> term = regularizer(samples)           # weight * log s of the first batch (no earlier samples)
        >>> term.backward()
        >>> bool(term < 0) and samples.grad.shape == (16, 2) and regularizer.running.weight == 16.0
        True
    """

    def __init__(
        self,
        weight: float = 1.0,
        feature: Optional[nn.Module] = None,
        *,
        reference: Optional[Tensor] = None,
        n_frequencies: int = 512,
        sigma: Union[float, str] = "auto",
        decay: float = 0.99,
        seed: int = 0,
        log_prefix: str = "diversity/",
    ) -> None:
        self.weight = check_positive(weight, "weight")
        if feature is not None and not isinstance(feature, nn.Module):
            raise ValueError("DiversityRegularizer: `feature` must be an nn.Module (a frozen encoder) or None, got "
                             f"{type(feature).__name__}.")
        self.feature = feature
        if feature is not None:
            feature.eval().requires_grad_(False)
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        if sigma != "auto":
            sigma = check_positive(sigma, "sigma")  # type: ignore[arg-type]
        elif not isinstance(reference, Tensor) or reference.ndim < 2 or reference.shape[0] < 2:
            raise ValueError("DiversityRegularizer: sigma='auto' fits the bandwidth to real samples; pass them as "
                             "`reference` (an (N, ...) tensor, N >= 2), or pass a number as `sigma`.")
        self.reference = reference if sigma == "auto" else None
        self.rff = GaussianRFF(None, self.n_frequencies, sigma=sigma, seed=check_seed(seed))
        self.running = RunningCovariance(2 * self.n_frequencies, decay)
        self.log_prefix = str(log_prefix)
        self._module: Optional[L.LightningModule] = None
        self._calls = 0

    def __call__(self, samples: Tensor) -> Tensor:
        """``weight * log s`` of ``samples`` (n, ...) with their graph (module doc); then the batch joins the running
        covariance. Under DDP the value is the whole batch's (every rank's rows) and the gradient is scaled so that
        DDP's averaging of the ranks' gradients gives one process's."""
        if not isinstance(samples, Tensor) or samples.ndim < 2:
            kind = tuple(samples.shape) if isinstance(samples, Tensor) else type(samples).__name__
            raise ValueError(f"DiversityRegularizer: `samples` must be a (n, ...) tensor of generated samples, got "
                             f"{kind}.")
        embedded = samples if self.feature is None else self.feature.to(samples.device)(samples)
        embedded = embedded.flatten(1)
        if self.rff.awaits_bandwidth:  # the first call (every rank's, under DDP): the reference's bandwidth
            with torch.no_grad():
                rows = self.reference.to(samples.device)  # type: ignore[union-attr]
                rows = rows if self.feature is None else torch.cat([self.feature(part) for part in rows.split(256)])
            sigma = BANDWIDTH_FRACTION * reference_bandwidth(rows.flatten(1).float(), "DiversityRegularizer")
            self.rff.set_bandwidth(sigma)
            self.reference = None  # its work is done: sigma is kept (and checkpointed)
        with torch.autocast(embedded.device.type, enabled=False), full_precision():  # the features at float32
            features = self.rff(embedded if embedded.dtype == torch.float64 else embedded.float())
            loss = diversity_loss(features, self.running if self.running.weight > 0 else None)
            self.running.update(features)
        ranks = dist.get_world_size() if distributed_available() else 1
        term = self.weight * (loss + (ranks - 1) * (loss - loss.detach()))  # the value of 1, the gradient x ranks
        self._calls += 1
        if self._module is not None and self._module.trainer.training:  # inside the user's training step
            values = {f"{self.log_prefix}loss": loss.detach(), f"{self.log_prefix}rke": torch.exp(-loss.detach())}
            self._module.log_dict(values, on_step=True, on_epoch=True)  # every rank holds the same value
        return term

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._module = pl_module

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._calls = 0
        if self.feature is not None:  # a feature inside the module was put back in train mode with it
            self.feature.eval()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._calls == 0 and trainer.num_training_batches:
            raise RuntimeError(
                "DiversityRegularizer: a whole training epoch passed without a call, so it added nothing. In the "
                "step that makes the generator's samples add `loss = loss + diversity_term(self, samples)` "
                "(from lightning_spectral.callbacks import diversity_term)."
            )

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._module = None

    def state_dict(self) -> dict[str, Any]:
        return {"running": self.running.state_dict(), "sigma": self.rff.sigma}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.running.load_state_dict(state_dict["running"])  # refuses another width or decay, changing nothing
        if state_dict.get("sigma") is not None:
            self.rff.set_bandwidth(float(state_dict["sigma"]))


def diversity_term(module: L.LightningModule, samples: Tensor) -> Tensor:
    """``weight * log s`` of a generator's ``samples`` from the Trainer's `DiversityRegularizer`: the one line a
    training step adds to the generator's loss (``g_loss = g_loss + diversity_term(self, fake)``).

    Raises:
        RuntimeError: the module is not attached to a Trainer, or its Trainer has no (or more than one)
            `DiversityRegularizer`.
    """
    trainer = getattr(module, "_trainer", None)
    found = [] if trainer is None else [c for c in trainer.callbacks if isinstance(c, DiversityRegularizer)]
    if len(found) != 1:
        raise RuntimeError(
            f"diversity_term: the module's Trainer holds {len(found)} DiversityRegularizer callbacks"
            + (" (it is not attached to a Trainer)" if trainer is None else "")
            + "; pass exactly one: `Trainer(callbacks=[DiversityRegularizer(weight=0.1)])`."
        )
    return found[0](samples)
