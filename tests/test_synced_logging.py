"""Lightning's sync_dist advice is silenced for the values the callbacks log after syncing them, and only for those."""

import warnings

from lightning.pytorch.utilities.warnings import PossibleUserWarning

from lightning_spectral.callbacks.synced_logging import quiet_sync_advice


def advice(name: str) -> str:  # Lightning's message (trainer/connectors/logger_connector/result.py)
    return (
        f"It is recommended to use `self.log({name!r}, ..., sync_dist=True)` when logging on epoch level in "
        "distributed setting to accumulate the metric across devices."
    )


def test_the_advice_is_counted_out_for_synced_names_only():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_sync_advice("gen/vendi/1")
        quiet_sync_advice("gen/vendi/1")  # once per name
        for name in ("gen/vendi/1", "gen/vendi/1", "train/loss", "gen/vendi/10"):
            warnings.warn(advice(name), PossibleUserWarning, stacklevel=1)
    shown = [str(w.message) for w in caught if issubclass(w.category, PossibleUserWarning)]
    assert shown == [advice("train/loss"), advice("gen/vendi/10")]  # a user's own value, another name: kept


def test_the_advice_is_counted_out_again_after_a_catch_warnings_block_dropped_the_filter():
    """A catch_warnings block restores the filters on exit, so the filter added inside it is gone afterwards: the
    next report must install it again (a remembered 'already done' would leave the advice on)."""
    with warnings.catch_warnings():
        quiet_sync_advice("gen/mmd")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_sync_advice("gen/mmd")
        warnings.warn(advice("gen/mmd"), PossibleUserWarning, stacklevel=1)
    assert not [w for w in caught if issubclass(w.category, PossibleUserWarning)]
