"""Compact checkpoints of a metric's sums: an empty accumulator writes its count only, a covariance its upper triangle.

The sums travel in the metric's extra state (``nn.Module.get_extra_state``, public API), beside what a resume needs
to read them: the input width (so that a metric that saw no sample yet can size its sums), the shifts of centred
accumulators, and a fingerprint of the frequencies, which are not written (they are redrawn from the seed): it
catches a checkpoint written with another ``seed``, ``sigma`` or ``n_frequencies``; a metric's other settings the
sums depend on (``_checkpoint_settings``, e.g. ConditionalVendi's ``num_classes``) travel with them.

A load checks the whole state before it changes anything: sizes, finiteness and the identities sums of samples obey
(a count is a non-negative integer, accumulators that see the same samples count alike, unit-norm features give
``tr Q = n``; see [`violation`][lightning_spectral.metrics.Accumulator.violation]); a refused load leaves the metric
as it was.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from lightning_spectral.sync.agreement import frequency_fingerprint


def extra_state(metric: Any, sums: bool = True) -> dict[str, Any]:
    """What a resume needs: the input width, the frequencies' fingerprint, the shifts and (with ``sums``) the packed
    sums of every accumulator ([`pack`][lightning_spectral.metrics.Accumulator.pack])."""
    metric._flush()  # pending rows join the sums (and fix a centred accumulator's shift) before anything is read
    state: dict[str, Any] = {"in_features": metric.in_features, "frequencies": frequency_fingerprint(metric)}
    settings = metric._checkpoint_settings()
    if settings:
        state["settings"] = settings
    if getattr(metric, "auto_sigma", False) and not metric.feature_map.awaits_bandwidth:
        state["sigma"] = metric._fitted_bandwidth()  # sigma="auto"'s fitted value: the frequencies are Z / sigma
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
    """Restore `extra_state`'s output, all or nothing: check the whole state first (the sums' names, the settings,
    the input width, the frequencies, every sum's size and identities), then size the sums and unpack them.

    A refused checkpoint leaves the metric as it was (a metric that had no input width yet gets none).

    Raises:
        RuntimeError: the checkpoint's frequencies differ (another ``seed``, ``sigma`` or ``n_frequencies``), or its
            sums or settings are not this metric's (another configuration or version).
        ValueError: a packed sum of another size than these settings need, or sums that break the identities
            sums of samples obey ([`violation`][lightning_spectral.metrics.Accumulator.violation]: edited or
            corrupted).
    """
    owner = type(metric).__name__
    if not isinstance(state, dict):
        raise RuntimeError(f"{owner}: the checkpoint holds no state of this metric.")
    if "sums" in state and set(state["sums"]) != set(metric.accumulators):
        raise RuntimeError(
            f"{owner}: the checkpoint holds the sums {sorted(state['sums'])} where this metric keeps "
            f"{sorted(metric.accumulators)}: it was written by another configuration or version of the metric (e.g. "
            "a FINCNovelty with content groups, which kept `gen_0` .. `ref_3`, or one from before its significance "
            "level, which kept `ref_a` / `ref_b`). "
            "Build the metric as it was saved, or accumulate its data again instead of resuming these sums."
        )
    if state.get("sigma") is not None and metric.feature_map.awaits_bandwidth:  # sigma="auto"'s fitted value
        metric._set_bandwidth(state["sigma"])
    _check_settings(metric, state.get("settings"))
    building = state.get("in_features") is not None and metric.in_features is None
    undo = Snapshot(metric) if building else None
    try:
        if building:
            metric._build(state["in_features"])
        flats = _checked_sums(metric, state)
    except BaseException:
        if undo is not None:
            undo.restore()
        raise
    for name, flat in flats.items():
        accumulator = metric.accumulators[name]
        accumulator.discard()
        setattr(metric, accumulator.state_name, flat)
    for name, shift in state.get("shifts", {}).items():
        accumulator = metric.accumulators[name]
        accumulator.shift = shift.to(device=getattr(metric, accumulator.state_name).device, dtype=torch.float64)


def _check_settings(metric: Any, saved: Any) -> None:
    """The checkpoint's `_checkpoint_settings` (absent from older checkpoints) against the metric's."""
    if saved is None:
        return
    mine = metric._checkpoint_settings()
    differ = [key for key in sorted(set(saved) | set(mine)) if saved.get(key) != mine.get(key)]
    if differ:
        raise RuntimeError(
            f"{type(metric).__name__}: the checkpoint was written with "
            + ", ".join(f"{key}={saved.get(key)!r}" for key in differ)
            + " where this metric has "
            + ", ".join(f"{key}={mine.get(key)!r}" for key in differ)
            + "; build the metric with the settings it was saved with."
        )


def _checked_sums(metric: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Every packed sum unpacked on the metric's device, after the frequencies were checked; nothing assigned.

    Raises:
        RuntimeError / ValueError: see `load_extra_state`.
    """
    owner = type(metric).__name__
    saved_widths = state.get("in_features")
    if saved_widths is not None and metric.in_features is not None and _widths(saved_widths) != _widths(
        metric.in_features
    ):
        raise RuntimeError(
            f"{owner}: the checkpoint was written for inputs of width {saved_widths} where this metric takes "
            f"{metric.in_features}; build the metric as it was saved, or resume with the embeddings it was fed."
        )
    saved, mine = state.get("frequencies"), frequency_fingerprint(metric)
    if saved is not None and mine is not None:
        mine = mine.cpu()
        if bool(((saved.cpu() - mine).abs() > 1e-9 * mine.abs().clamp_min(1.0)).any()):
            raise RuntimeError(
                f"{owner}: the checkpoint was written with other random frequencies; build the "
                "metric with the `seed`, `sigma` and `n_frequencies` it was saved with."
            )
    counted = {name: float(packed.reshape(-1)[0]) for name, packed in state.get("sums", {}).items()}
    for name, other in getattr(metric, "same_samples", {}).items():
        if name in counted and other in counted and counted[name] != counted[other]:
            raise ValueError(
                f"{owner}: the checkpoint's {name!r} sums count {counted[name]:g} samples and its {other!r} sums "
                f"{counted[other]:g}, where both see the same samples (the file was edited or corrupted); resume "
                "from another checkpoint, or accumulate the data again."
            )
    shifts = state.get("shifts", {})
    flats = {}
    for name, packed in state.get("sums", {}).items():
        accumulator = metric.accumulators[name]
        device = getattr(metric, accumulator.state_name).device
        flat = accumulator.unpack(packed.to(device=device, dtype=torch.float64))
        shift = shifts.get(name)
        problem = accumulator.violation(flat, None if shift is None else shift.to(flat.device, torch.float64))
        if problem:
            raise ValueError(
                f"{owner}: the checkpoint's {name!r} sums {problem}: they are not sums of samples this metric "
                "accumulated (the file was edited or corrupted); resume from another checkpoint, or accumulate the "
                "data again."
            )
        flats[name] = flat
    return flats


def _widths(in_features: Any) -> Any:
    return tuple(in_features) if isinstance(in_features, (tuple, list)) else in_features


class Snapshot:
    """What building a metric's map changes (every submodule's attributes and tensors, every accumulator's width
    and state), to restore when a checkpoint read after the build is refused."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.modules = [
            (module, {key: copy.copy(value) if key in _MODULE_DICTS else value for key, value in vars(module).items()})
            for module in metric.feature_map.modules()
        ]
        self.accumulators = [
            (accumulator, accumulator.width, accumulator.shift, getattr(metric, accumulator.state_name))
            for accumulator in metric.accumulators.values()
        ]

    def restore(self) -> None:
        for module, attributes in self.modules:
            vars(module).clear()
            vars(module).update(attributes)
        for accumulator, width, shift, value in self.accumulators:
            accumulator.width, accumulator.shift = width, shift
            setattr(self.metric, accumulator.state_name, value)


_MODULE_DICTS = ("_buffers", "_parameters", "_modules", "_non_persistent_buffers_set")
