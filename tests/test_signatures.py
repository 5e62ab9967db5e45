"""The shared options are explicit: every metric names ``feature``, ``normalize``, ``save_feature`` and ``chunk_size``
in its signature (IDE completion, ``help()``) and documents them; the defaults are the same everywhere."""

import inspect

import pytest

from lightning_spectral.metrics import (
    ConditionalVendi,
    FastMMD,
    FINCNovelty,
    FKEAVendi,
    RFFCovariance,
    SpectralMetric,
)

SHARED = {"feature": None, "normalize": False, "save_feature": False}


@pytest.mark.parametrize("metric", [FKEAVendi, FINCNovelty, FastMMD, RFFCovariance, ConditionalVendi, SpectralMetric])
def test_shared_options_are_in_the_signature_and_the_docstring(metric):
    parameters = inspect.signature(metric).parameters
    for name, default in SHARED.items():
        assert name in parameters and parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default is default or parameters[name].default == default, name
        assert f"{name}:" in inspect.getdoc(metric), name
    assert parameters["chunk_size"].default == inspect.signature(SpectralMetric).parameters["chunk_size"].default
