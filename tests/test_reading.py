"""A reading answers for the sums it was taken from: every answer computed once on it, frozen, untouched by later
updates; the metric hands the same reading back until its sums change."""

import pytest
import torch

from lightning_spectral.metrics import FINCNovelty, FKEAVendi
from lightning_spectral.metrics.finc_reading import FINCReading

g = torch.Generator().manual_seed(0)


def finc_metric():
    metric = FINCNovelty(sigma=2.0, n_frequencies=32)
    metric.update(torch.randn(200, 3, generator=g), real=True)
    metric.update(torch.randn(200, 3, generator=g) + 1.0, real=False)
    return metric


def test_every_answer_of_a_reading_reuses_its_decompositions_and_an_update_gives_a_new_reading(monkeypatch):
    calls = []
    original = FINCReading._decompose
    monkeypatch.setattr(FINCReading, "_decompose", lambda self, *a, **k: calls.append(a) or original(self, *a, **k))
    metric = finc_metric()
    value = metric.compute()
    reading = metric.reading()
    reading.threshold(), reading.summary(), reading.novel_modes(3), reading.missing_modes(3)
    first = len(calls)  # novel values, missing values, novel and missing modes: 4 at most
    assert first <= 4
    assert metric.reading() is reading  # the sums did not change: the same reading, nothing recomputed
    again = (metric.compute(), reading.threshold(), reading.summary(), reading.novel_modes(3), reading.missing_modes(3))
    assert len(calls) == first
    assert torch.equal(again[0], value)
    metric.update(torch.randn(5, 3, generator=g), real=False)  # new sums: a new reading
    fresh = metric.reading()
    assert fresh is not reading
    fresh.threshold()
    assert len(calls) == first + 1
    metric.reset()
    metric.update(torch.randn(200, 3, generator=g), real=True)
    metric.update(torch.randn(200, 3, generator=g), real=False)
    metric.compute()
    assert len(calls) == first + 2


def test_a_held_reading_keeps_its_numbers_after_updates_and_a_reset():
    """Copy on write: the metric copies the sums a reading holds before adding rows to them."""
    metric = finc_metric()
    reading = metric.reading()
    before = {key: value for key, value in reading.summary().items() if not isinstance(value, dict)}
    metric.update(torch.randn(300, 3, generator=g) * 4, real=False)
    after = metric.reading()
    assert after.sample_count() == 500 and reading.sample_count() == 200
    assert float(reading.value) == float(before[""])
    metric.reset()
    assert reading.sample_count() == 200 and float(reading.value) == float(before[""])


def test_the_metric_lets_go_of_its_reading_at_reset():
    """After ``reset()`` the metric holds its new sums only: the last reading (its sums and answers) is freed unless
    the caller keeps it."""
    import gc
    import weakref

    metric = finc_metric()
    reading = metric.reading()
    reading.summary()
    kept = weakref.ref(reading)
    del reading
    assert kept() is not None  # the metric keeps it while its sums are unchanged (a second call hands it back)
    metric.reset()
    gc.collect()
    assert kept() is None


def test_a_reading_is_frozen():
    reading = finc_metric().reading()
    with pytest.raises(AttributeError, match="frozen"):
        reading.rho = 5.0


def test_a_reading_read_again_costs_no_decomposition_and_no_state_sum(monkeypatch):
    """A second summary of the same reading recomputes nothing: no eigendecomposition and no sum over a (2r)^2
    state (the old cache keyed its results by such sums)."""
    metric = finc_metric()
    reading = metric.reading()
    reading.summary()
    sums = []
    original = torch.Tensor.sum
    monkeypatch.setattr(torch.Tensor, "sum", lambda self, *a, **k: sums.append(self.numel()) or original(self, *a, **k))
    reading.summary(), reading.novel_modes(3), reading.threshold(missing=True)
    assert not [n for n in sums if n >= 64 * 64]


def test_fkea_modes_are_computed_once_per_reading():
    vendi = FKEAVendi(sigma=1.0, n_frequencies=16)
    vendi.update(torch.randn(50, 2, generator=g))
    modes = vendi.reading().modes(3)
    vendi.compute()
    reading = vendi.reading()
    assert torch.equal(reading.modes(3).eigenvalues, modes.eigenvalues) and "modes" in reading._answers
    vendi.update(torch.randn(50, 2, generator=g) * 3)
    assert not torch.equal(vendi.reading().modes(3).eigenvalues, modes.eigenvalues)  # a new reading of new sums


def test_fkea_summary_decomposes_once_for_the_score_and_its_se(monkeypatch):
    """The se's ``eigh`` also gives the score's spectrum (no ``eigvalsh``); a repeat reads the reading; an update,
    a reset give a new one."""
    import lightning_spectral.metrics.accumulator as accumulator
    import lightning_spectral.metrics.vendi_reading as vendi_reading

    eighs = []
    original = vendi_reading.psd_eigh
    monkeypatch.setattr(vendi_reading, "psd_eigh", lambda *args, **kwargs: eighs.append(1) or original(*args, **kwargs))

    def no_eigvalsh(*args, **kwargs):
        raise AssertionError("a second eigendecomposition")

    monkeypatch.setattr(accumulator, "psd_eigenvalues", no_eigvalsh)
    vendi = FKEAVendi(sigma=1.0, n_frequencies=16, alpha=[1, "inf"])
    vendi.update(torch.randn(50, 2, generator=g))
    first = vendi.reading().summary()
    again = vendi.reading().summary()
    assert len(eighs) == 1 and torch.equal(again["se"][1], first["se"][1])
    assert torch.equal(vendi.compute()[1], first[""][1])
    vendi.update(torch.randn(50, 2, generator=g) * 3)
    assert not torch.equal(vendi.reading().summary()["se"][1], first["se"][1]) and len(eighs) == 2
    vendi.reset()
    vendi.update(torch.randn(50, 2, generator=g))
    vendi.reading().summary()
    assert len(eighs) == 3
