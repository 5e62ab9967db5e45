"""Lightning's ``sync_dist`` advice silenced for the values this library has already synced, and only for them.

Under DDP, Lightning warns at epoch end about every tensor logged with ``sync_dist=False`` ("It is recommended to use
`self.log('gen/vendi/1', ..., sync_dist=True)`"). The callbacks log values computed from all-reduced sums or
gathered rows, identical on every rank: syncing them again would cost one all-reduce per value and could change
their last bits (Lightning's mean divides a sum), so they are logged with ``sync_dist=False`` and the advice, which
does not apply to them, is filtered out by exact name. The advice for any other name (a user's own ``self.log``)
stays.
"""

from __future__ import annotations

import re
import warnings

from lightning.pytorch.utilities.warnings import PossibleUserWarning


def advice_pattern(name: str) -> str:
    """The regular expression of Lightning's ``sync_dist`` advice for the logged key ``name``.

    Examples:
        >>> bool(re.match(advice_pattern("gen/vendi/1"), "It is recommended to use `self.log('gen/vendi/1', ..., "
        ...                                               "sync_dist=True)` when logging on epoch level"))
        True
    """
    return re.escape(f"It is recommended to use `self.log({name!r}, ..., sync_dist=True)`")


def quiet_sync_advice(name: str) -> None:
    """Filter out Lightning's ``sync_dist`` advice for the key ``name`` (a value already the same on every rank),
    unless that filter is in place already. The live filter list is read each time, not remembered: a
    ``warnings.catch_warnings()`` block (pytest runs every test in one) removes the filters added inside it."""
    pattern = advice_pattern(name)
    for action, message, category, _, _ in warnings.filters:
        if action == "ignore" and message is not None and message.pattern == pattern and category is PossibleUserWarning:
            return
    warnings.filterwarnings("ignore", message=pattern, category=PossibleUserWarning)
