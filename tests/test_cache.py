"""What ``compute()`` worked out is reused by the readers after it (``threshold``, ``summary``, the modes) until the
sums change: an update, a reset or a load empties the cache."""

import torch

from lightning_spectral.metrics import FINCNovelty, FKEAVendi

g = torch.Generator().manual_seed(0)


def counting(metric, name):
    calls = []
    original = getattr(metric, name)

    def wrapped(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    setattr(metric, name, wrapped)
    return calls


def test_readers_after_compute_reuse_its_spectra_and_an_update_invalidates_them():
    metric = FINCNovelty(sigma=2.0, n_frequencies=32)
    metric.update(torch.randn(200, 3, generator=g), real=True)
    metric.update(torch.randn(200, 3, generator=g) + 1.0, real=False)
    decompositions = counting(metric, "_decompose")
    value = metric.compute()
    metric.threshold(), metric.summary(), metric.novel_modes(3), metric.missing_modes(3)
    first = len(decompositions)  # novel values, missing values, novel and missing modes: 4 at most
    assert first <= 4
    again = (metric.compute(), metric.threshold(), metric.summary(), metric.novel_modes(3), metric.missing_modes(3))
    assert len(decompositions) == first  # nothing recomputed
    assert torch.equal(again[0], value)
    metric.update(torch.randn(5, 3, generator=g), real=False)  # new sums: recomputed
    metric.threshold()
    assert len(decompositions) == first + 1
    metric.reset()
    metric.update(torch.randn(200, 3, generator=g), real=True)
    metric.update(torch.randn(200, 3, generator=g), real=False)
    metric.compute()
    assert len(decompositions) == first + 2


def test_fkea_modes_are_computed_once_per_state():
    vendi = FKEAVendi(sigma=1.0, n_frequencies=16)
    vendi.update(torch.randn(50, 2, generator=g))
    modes = vendi.modes(3)
    vendi.compute()
    assert torch.equal(vendi.modes(3).eigenvalues, modes.eigenvalues)
    vendi.update(torch.randn(50, 2, generator=g) * 3)
    assert not torch.equal(vendi.modes(3).eigenvalues, modes.eigenvalues)  # the update invalidated the cache


def test_fkea_summary_decomposes_once_for_the_score_and_its_se(monkeypatch):
    """The se's ``eigh`` also gives the score's spectrum (no ``eigvalsh``); a repeat reads the cache; an update,
    a reset empty it."""
    import lightning_spectral.metrics.accumulator as accumulator
    import lightning_spectral.metrics.fkea as fkea

    eighs = []
    original = fkea.psd_eigh
    monkeypatch.setattr(fkea, "psd_eigh", lambda *args, **kwargs: eighs.append(1) or original(*args, **kwargs))

    def no_eigvalsh(*args, **kwargs):
        raise AssertionError("a second eigendecomposition")

    monkeypatch.setattr(accumulator, "psd_eigenvalues", no_eigvalsh)
    vendi = FKEAVendi(sigma=1.0, n_frequencies=16, alpha=[1, "inf"])
    vendi.update(torch.randn(50, 2, generator=g))
    first = vendi.summary()
    again = vendi.summary()
    assert len(eighs) == 1 and torch.equal(again["se"][1], first["se"][1])
    assert torch.equal(vendi.compute()[1], first[""][1])
    vendi.update(torch.randn(50, 2, generator=g) * 3)
    assert not torch.equal(vendi.summary()["se"][1], first["se"][1]) and len(eighs) == 2
    vendi.reset()
    vendi.update(torch.randn(50, 2, generator=g))
    vendi.summary()
    assert len(eighs) == 3


def test_one_reading_block_sums_each_state_once():
    """Inside one ``synced()`` block the cache's key (every state's total) is read once, however many readers look
    up the cache (summary: scores, standard errors, biases, shares); a block after an update reads it afresh."""
    metric = FINCNovelty(sigma=2.0, n_frequencies=32)
    metric.update(torch.randn(200, 3, generator=g), real=True)
    metric.update(torch.randn(200, 3, generator=g) + 1.0, real=False)
    keys = counting(metric, "_sums_key")
    with metric.synced():
        metric.summary(), metric.novel_modes(3), metric.missing_modes(3), metric.threshold(missing=True)
        first_key, second_key = metric._sums_key(), metric._sums_key()
        assert first_key is second_key  # kept for the block, not summed again
    assert len(keys) > 5  # looked up many times...
    first = metric.summary()
    metric.update(torch.randn(5, 3, generator=g), real=False)
    with metric.synced():
        assert metric.summary()["n"] == first["n"] + 5  # ...but never stale
