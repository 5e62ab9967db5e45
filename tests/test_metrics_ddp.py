"""FKEAVendi and FINCNovelty under real 2-process DDP (gloo on CPU) equal one process on all the data."""

import torch

from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi
from tests.data import mixture_means, sample_mixture
from tests.ddp import run_ddp

N = 1200  # even shards of 600: each rank's reference alternation starts on an even global index


def dataset():
    means = mixture_means(5, d=6, spread=10.0)
    gen, labels = sample_mixture(means, N, weights=[0.3, 0.3, 0.2, 0.1, 0.1], std=0.4, seed=1)
    ref, _ = sample_mixture(means, N, weights=[0.2, 0.2, 0.2, 0.4, 0.0], std=0.4, seed=2)
    return gen, labels, ref


def run_metrics(rank, world_size):
    gen, _, ref = dataset()
    shard = slice(rank * N // world_size, (rank + 1) * N // world_size)
    ids = torch.arange(N)[shard]
    vendi = FKEAVendi(sigma=3.0, n_frequencies=128, alpha=[1, 2, "inf"])
    finc = FINCNovelty(sigma=3.0, n_frequencies=128, rho=1.0)
    mmd = FastMMD(sigma=[1.0, 3.0], n_frequencies=64)
    for batch in gen[shard].split(90 + 40 * rank):
        vendi.update(batch)
        finc.update(batch, real=False)
        mmd.update(batch, real=False)
    for batch in ref[shard].split(77):
        finc.update(batch, real=True)
        mmd.update(batch, real=True)
    batches = list(zip(gen[shard].split(100), ids.split(100), strict=True))
    return {
        "vendi": vendi.compute(),
        "modes": vendi.modes(3),
        "top": vendi.top_samples(batches, k=3, per_mode=20),
        "novelty": finc.compute(),
        "threshold": finc.threshold(),
        "novel": finc.novel_modes(3),
        "finc_top": finc.top_samples(batches, k=2, per_mode=20),
        "local_n": float(vendi.samples.count),
        "mmd": mmd.compute(),
        "mmd_test": mmd.test(),
    }


def test_two_processes_equal_one(tmp_path):
    results = run_ddp(run_metrics, tmp_path=tmp_path)
    expected = run_metrics(0, 1)  # the same function on one process: all the data
    for status, *value in results:
        assert status == "ok", value
        got = value[0]
        assert got["local_n"] == N / 2  # local states were restored after each synced call
        for order in (1, 2, "inf"):
            torch.testing.assert_close(got["vendi"][order], expected["vendi"][order], rtol=1e-10, atol=0)
        torch.testing.assert_close(got["modes"].eigenvalues, expected["modes"].eigenvalues, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(got["modes"].eigenvectors, expected["modes"].eigenvectors, rtol=0, atol=1e-7)
        for (ids, scores), (ids1, scores1) in zip(got["top"], expected["top"], strict=True):
            assert ids.tolist() == ids1.tolist()
            torch.testing.assert_close(scores, scores1)
        torch.testing.assert_close(got["novelty"], expected["novelty"], rtol=1e-9, atol=1e-12)
        assert float(got["novelty"]) > 0  # the test is not vacuous: a novel mode exists (mode 4)
        assert abs(got["threshold"] - expected["threshold"]) < 1e-9
        assert got["novel"].significant.tolist() == expected["novel"].significant.tolist()
        for (ids, _), (ids1, _) in zip(got["finc_top"], expected["finc_top"], strict=True):
            assert ids.tolist() == ids1.tolist()
        torch.testing.assert_close(got["mmd"], expected["mmd"], rtol=1e-9, atol=1e-12)
        assert float(got["mmd"].min()) > 0.01  # the sides differ: not a vacuous comparison
        for field in ("statistic", "p_value", "reject"):
            torch.testing.assert_close(getattr(got["mmd_test"], field), getattr(expected["mmd_test"], field))
