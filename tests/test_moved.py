"""Module paths of release 0.1 still import, with a FutureWarning naming the new place (lightning_spectral/_moved.py)."""

from __future__ import annotations

import importlib
import sys

import pytest

import lightning_spectral
from lightning_spectral import _moved
from lightning_spectral.algebra import psd_eigenvalues
from lightning_spectral.functional import detection_metrics
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import KernelPCAOOD
from lightning_spectral.pictures import log_picture


@pytest.fixture
def fresh(monkeypatch):
    """Forget the old paths imported by earlier tests, so each import here runs the finder again."""
    for name in _moved.MOVED:
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.mark.parametrize(
    "old, name, new",
    [
        ("lightning_spectral.features", "GaussianRFF", GaussianRFF),
        ("lightning_spectral.linalg", "psd_eigenvalues", psd_eigenvalues),
        ("lightning_spectral.ood", "KernelPCAOOD", KernelPCAOOD),
        ("lightning_spectral.ood", "detection_metrics", detection_metrics),
        ("lightning_spectral.loggers", "log_picture", log_picture),
    ],
)
def test_an_old_path_gives_the_same_object_and_names_the_new_place(fresh, old, name, new):
    with pytest.warns(FutureWarning, match=rf"{old} moved to lightning_spectral\."):
        module = importlib.import_module(old)
    assert getattr(module, name) is new


def test_names_that_left_the_package_say_where_they_are(fresh):
    with pytest.warns(FutureWarning):
        with pytest.raises(ImportError, match=r"recipes/digits_vae\.py"):
            from lightning_spectral.generative import DigitsVAE  # noqa: F401
    with pytest.raises(ImportError, match="log_picture"):
        from lightning_spectral.viz import log_image  # noqa: F401
    with pytest.raises(ImportError):
        importlib.import_module("lightning_spectral.no_such_module")  # only the listed paths are served


def test_every_old_path_is_listed_in_the_changelog():
    text = (lightning_spectral.__path__[0] + "/../docs/changelog.md")
    with open(text, encoding="utf-8") as handle:
        changelog = handle.read()
    for old in _moved.MOVED:
        assert f"`{old}`" in changelog or f"`{old}." in changelog, old
