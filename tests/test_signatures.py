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

SHARED = {"feature": None, "normalize": None, "save_feature": False}


@pytest.mark.parametrize("metric", [FKEAVendi, FINCNovelty, FastMMD, RFFCovariance, ConditionalVendi, SpectralMetric])
def test_shared_options_are_in_the_signature_and_the_docstring(metric):
    parameters = inspect.signature(metric).parameters
    for name, default in SHARED.items():
        assert name in parameters and parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default is default or parameters[name].default == default, name
        assert f"{name}:" in inspect.getdoc(metric), name
    assert parameters["chunk_size"].default == inspect.signature(SpectralMetric).parameters["chunk_size"].default


def test_one_normalize_default_for_metrics_and_callbacks_read_from_the_dtype():
    import torch

    from lightning_spectral.callbacks import GeneratedSamples
    from lightning_spectral.encoders import PixelImageFeature

    assert inspect.signature(GeneratedSamples).parameters["normalize"].default is None
    images = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    as_uint8 = (images * 255).round().to(torch.uint8)
    floats, uint8 = (FKEAVendi(4.0, 16, feature=PixelImageFeature(8)) for _ in range(2))
    floats.update(as_uint8.float() / 255)  # floats: [0, 1]
    uint8.update(as_uint8)  # uint8: [0, 255]
    torch.testing.assert_close(floats.compute(), uint8.compute())
    with pytest.raises(ValueError, match=r"\[0, 1\]"):  # floats outside [0, 1] are still refused by name
        FKEAVendi(4.0, 16, feature=PixelImageFeature(8)).update(images * 255)
