"""The random-feature covariance of every sample seen so far, older batches decayed: what a diversity loss or a
guidance step compares a new batch against, in O((2r)^2) memory whatever the number of samples (no memory bank).

    S <- decay S + sum_i phi_i phi_i^T,     w <- decay w + n,     C = S / w

After ``t`` batches of ``n`` samples a batch ``k`` steps old weighs ``decay^k``: the covariance summarises about the
last ``n / (1 - decay)`` samples (10,000 at ``decay = 0.99`` and batches of 100; all of them at
``decay = 1``). Float64 sums; under DDP each
update sums every rank's batch with one all-reduce, so every rank holds the same ``C``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import all_finite, check_fraction, check_positive_int
from lightning_spectral.algebra.precision import full_precision
from lightning_spectral.sync.collectives import all_reduce_sum, collective_device, distributed_available


class RunningCovariance:
    """``C = S / w``, the decayed second moment of the features of every batch passed to `update` (module doc).

    Args:
        width: the feature width 2r.
        decay: in [0, 1]: how much of the earlier sums each update keeps (0: the last batch only; 1: every batch
            alike, the covariance of all samples seen).
        sync: sum every rank's batch under DDP (one all-reduce per `update`).

    Examples:
        >>> import torch
        >>> running = RunningCovariance(4, decay=0.5)
        >>> running.update(torch.eye(4)[:2])
        >>> running.update(torch.eye(4)[2:])
        >>> running.weight, running.covariance().diagonal().tolist()   # the first batch weighs half
        (3.0, [0.16666666666666666, 0.16666666666666666, 0.3333333333333333, 0.3333333333333333])
    """

    def __init__(self, width: int, decay: float = 0.99, sync: bool = True) -> None:
        self.width = check_positive_int(width, "width")
        self.decay = check_fraction(decay, "decay", low_open=False)
        self.sync = bool(sync)
        self.total = torch.zeros(width, width, dtype=torch.float64)
        self.weight = 0.0
        self._float32: Optional[Tensor] = None
        self._float32_stale = True

    def update(self, features: Tensor) -> None:
        """Add a batch's features (N, 2r) (detached; every rank's under DDP) after decaying the earlier sums."""
        if not isinstance(features, Tensor) or features.ndim != 2 or features.shape[1] != self.width:
            shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
            raise ValueError(f"RunningCovariance.update: `features` must be (N, {self.width}), got {shape}.")
        features = features.detach()
        if not all_finite(features):
            raise ValueError("RunningCovariance.update: `features` holds NaN or infinite values; nothing was added.")
        # the batch's product in float64 (the features' values exactly), into the float64 sums in place
        rows, count = features.double(), float(features.shape[0])
        self.total = self.total.to(rows.device)
        with torch.autocast(features.device.type, enabled=False), full_precision():
            if self.sync and distributed_available():  # one all-reduce of [outer, count]
                outer = rows.T @ rows
                packed = torch.cat([outer.flatten(), outer.new_tensor([count])]).to(collective_device(None))
                packed = all_reduce_sum(packed)[0].to(outer.device)
                outer, count = packed[:-1].view_as(outer), float(packed[-1])
                self.total.mul_(self.decay).add_(outer)
            else:  # decay S + Phi^T Phi in one pass over S
                self.total.addmm_(rows.T, rows, beta=self.decay)
        self.weight = self.decay * self.weight + count
        self._float32_stale = True

    def covariance_float32(self) -> Tensor:
        """`covariance` in float32 (a loss's product with float32 features, `diversity_loss`, which keeps no graph
        through it): one buffer, overwritten in place at the first call after each `update`."""
        if self._float32_stale:
            if self._float32 is None or self._float32.device != self.total.device:
                self._float32 = torch.empty(self.total.shape, dtype=torch.float32, device=self.total.device)
            # overwritten in place (a fresh 4 MiB each step cost as much as the products): a cast, a float32 pass
            self._float32.copy_(self.total).mul_(1.0 / self.weight if self.weight > 0 else 0.0)
            self._float32_stale = False
        return self._float32

    def covariance(self) -> Tensor:
        """``C = S / w`` (2r, 2r) float64 (zeros before any update)."""
        return self.total / self.weight if self.weight > 0 else torch.zeros_like(self.total)

    def state_dict(self) -> dict[str, Any]:
        """The sums, for a checkpoint (a resumed run continues from them)."""
        return {"total": self.total.cpu().clone(), "weight": self.weight, "decay": self.decay}

    def load_state_dict(self, state: dict[str, Any], device: Optional[torch.device] = None) -> None:
        """Restore `state_dict`; refuses one of another width or decay, leaving this one as it was."""
        total = state.get("total")
        if not isinstance(total, Tensor) or tuple(total.shape) != (self.width, self.width):
            raise ValueError(f"RunningCovariance.load_state_dict: the saved sums are not ({self.width}, {self.width}): "
                             "it was built for another feature width.")
        if float(state.get("decay", -1.0)) != self.decay:
            raise ValueError(f"RunningCovariance.load_state_dict: saved with decay={state.get('decay')}, this one "
                             f"has decay={self.decay}; build it with the saved decay to resume.")
        self.total = total.double().to(device or self.total.device).clone()
        self.weight = float(state["weight"])
        self._float32_stale = True
