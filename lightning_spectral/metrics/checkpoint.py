"""Compact checkpoints of a metric's sums: an empty accumulator writes its count only, a covariance its upper triangle.

The sums travel in the metric's extra state (``nn.Module.get_extra_state``, public API), beside what a resume needs
to read them: the input width (so that a metric that saw no sample yet can size its sums), the shifts of centred
accumulators, and a fingerprint of the frequencies, which are not written (they are redrawn from the seed): it
catches a checkpoint written with another ``seed``, ``sigma`` or ``n_frequencies``.
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_spectral.sync.agreement import frequency_fingerprint


def extra_state(metric: Any, sums: bool = True) -> dict[str, Any]:
    """What a resume needs: the input width, the frequencies' fingerprint, the shifts and (with ``sums``) the packed
    sums of every accumulator ([`pack`][lightning_spectral.metrics.Accumulator.pack])."""
    metric.flush()  # pending rows join the sums (and fix a centred accumulator's shift) before anything is read
    state: dict[str, Any] = {"in_features": metric.in_features, "frequencies": frequency_fingerprint(metric)}
    state["shifts"] = {
        name: accumulator.shift.detach().cpu()
        for name, accumulator in metric.accumulators.items()
        if accumulator.centre and accumulator.shift is not None
    }
    if sums:
        packed = {name: accumulator.pack(accumulator.state) for name, accumulator in metric.accumulators.items()}
        state["sums"] = {name: value.detach().cpu() for name, value in packed.items()}
    return state


def load_extra_state(metric: Any, state: Any) -> None:
    """Restore `extra_state`'s output: size the sums from the input width, check the frequencies, unpack.

    Raises:
        RuntimeError: the checkpoint's frequencies differ (another ``seed``, ``sigma`` or ``n_frequencies``), or its
            sums are not this metric's (another configuration or version), checked before anything is restored.
        ValueError: a packed sum of another size than these settings need.
    """
    if not isinstance(state, dict):
        raise RuntimeError(f"{type(metric).__name__}: the checkpoint holds no state of this metric.")
    if "sums" in state and set(state["sums"]) != set(metric.accumulators):
        raise RuntimeError(
            f"{type(metric).__name__}: the checkpoint holds the sums {sorted(state['sums'])} where this metric keeps "
            f"{sorted(metric.accumulators)}: it was written by another configuration or version of the metric (e.g. "
            "a FINCNovelty with content groups, which kept `gen_0` .. `ref_3`, or one from before its significance "
            "level, which kept `ref_a` / `ref_b`). "
            "Build the metric as it was saved, or accumulate its data again instead of resuming these sums."
        )
    if state.get("in_features") is not None and metric.in_features is None:
        metric.build(state["in_features"])
    saved, mine = state.get("frequencies"), frequency_fingerprint(metric)
    if saved is not None and mine is not None:
        mine = mine.cpu()
        if bool(((saved.cpu() - mine).abs() > 1e-9 * mine.abs().clamp_min(1.0)).any()):
            raise RuntimeError(
                f"{type(metric).__name__}: the checkpoint was written with other random frequencies; build the "
                "metric with the `seed`, `sigma` and `n_frequencies` it was saved with."
            )
    unpacked = {}  # every sum checked (unpacked) before any is restored
    for name, packed in state.get("sums", {}).items():
        accumulator = metric.accumulators[name]
        device = getattr(metric, accumulator.state_name).device
        unpacked[name] = accumulator.unpack(packed.to(device=device, dtype=torch.float64))
    for name, flat in unpacked.items():
        accumulator = metric.accumulators[name]
        accumulator.discard()
        setattr(metric, accumulator.state_name, flat)
    for name, shift in state.get("shifts", {}).items():
        accumulator = metric.accumulators[name]
        accumulator.shift = shift.to(device=getattr(metric, accumulator.state_name).device, dtype=torch.float64)
