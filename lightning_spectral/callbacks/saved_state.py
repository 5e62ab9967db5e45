"""A callback's saved state checked whole before any of it loads: a missing key is named, and the metrics it holds
load all or none (a refused state leaves the callback as it was)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any


def state_key_of(callback: object, **keys: Any) -> str:
    """A callback's checkpoint key, ``ClassName{'key': value, ...}``: the form of Lightning's own keys (e.g.
    ``EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}``), written here because Lightning's helper for it is
    private.

    Examples:
        >>> class Monitor: ...
        >>> state_key_of(Monitor(), embedding="image", prefix="drift/")
        "Monitor{'embedding': 'image', 'prefix': 'drift/'}"
    """
    return f"{type(callback).__qualname__}{keys!r}"


def refusal_fix(owner: str, state_key: str) -> str:
    """The fix every refusal of a saved callback state names."""
    return (
        "Nothing was loaded. Resume from a checkpoint this version wrote with the callback configured as now, or "
        f"start {owner} afresh by deleting `checkpoint['callbacks'][{state_key!r}]` from the checkpoint."
    )


def check_saved_state(state_dict: Any, required: Iterable[str], owner: str, state_key: str) -> None:
    """Refuse a callback state that is not a mapping holding every ``required`` key.

    A state written by an older version, by another callback, or edited by hand otherwise fails with a bare
    ``KeyError`` halfway through ``load_state_dict``.

    Raises:
        ValueError: naming ``owner``, the missing keys, the keys present and the fix.

    Examples:
        >>> check_saved_state({"metrics": {}}, ["metrics", "history"], "GeneratedSamples", "GeneratedSamples")
        Traceback (most recent call last):
        ...
        ValueError: GeneratedSamples.load_state_dict: the saved state lacks 'history' (it holds 'metrics'): ...
    """
    if not isinstance(state_dict, Mapping):
        raise ValueError(
            f"{owner}.load_state_dict: the saved state must be the dict `state_dict()` returned, got "
            f"{type(state_dict).__name__}. " + refusal_fix(owner, state_key)
        )
    missing = [key for key in required if key not in state_dict]
    if missing:
        held = ", ".join(repr(key) for key in state_dict) or "nothing"
        raise ValueError(
            f"{owner}.load_state_dict: the saved state lacks {', '.join(repr(key) for key in missing)} (it holds "
            f"{held}): it was written by another version or another callback, or cut short. "
            + refusal_fix(owner, state_key)
        )


def saved_mapping(state_dict: Mapping[str, Any], key: str, owner: str, state_key: str) -> Mapping[str, Any]:
    """``state_dict[key]``, refused unless it is a mapping.

    Raises:
        ValueError: naming ``owner``, ``key``, what it holds and the fix.
    """
    value = state_dict[key]
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{owner}.load_state_dict: the saved `{key}` must be a dict, got {type(value).__name__}. "
            + refusal_fix(owner, state_key)
        )
    return value


def load_all_or_none(
    modules: Mapping[str, Any], states: Any, owner: str, state_key: str, what: str = "metrics"
) -> None:
    """``modules[name].load_state_dict(states[name])`` for every name, or for none: each state is first loaded into
    a copy of its module, so a missing or refused one raises before any module changed.

    Raises:
        ValueError: ``states`` is no mapping, lacks a name, or a module refuses its state (the module's own
            error is chained); the message names ``owner``, ``what`` and the name.
    """
    if not isinstance(states, Mapping):
        raise ValueError(
            f"{owner}.load_state_dict: the saved `{what}` must be a {{name: state}} dict, got "
            f"{type(states).__name__}. " + refusal_fix(owner, state_key)
        )
    missing = [name for name in modules if name not in states]
    if missing:
        raise ValueError(
            f"{owner}.load_state_dict: the saved `{what}` lack {', '.join(repr(name) for name in missing)} (saved: "
            f"{', '.join(repr(name) for name in states) or 'none'}). " + refusal_fix(owner, state_key)
        )
    for name, module in modules.items():
        try:
            copy.deepcopy(module).load_state_dict(states[name])
        except (KeyError, RuntimeError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(
                f"{owner}.load_state_dict: the saved state of {name!r} does not load ({type(error).__name__}: "
                f"{error}). " + refusal_fix(owner, state_key)
            ) from error
    for name, module in modules.items():
        module.load_state_dict(states[name])
