"""Real 2-process DDP (gloo on CPU): all-reduced states equal one process on the concatenated data."""

import torch

from lightning_spectral.metrics import RFFCovariance
from lightning_spectral.sync import all_gather_rows, all_reduce_sum, disagreeing_ranks, fingerprint
from tests.ddp import run_ddp

N_PER_RANK = 300


def data(dtype=torch.float64):
    return torch.randn(2 * N_PER_RANK, 5, generator=torch.Generator().manual_seed(0), dtype=dtype)


def metric_on_shard(rank, world_size, dtype):
    metric = RFFCovariance(sigma=1.5, n_frequencies=64, seed=11, chunk_size=100)
    shard = data(dtype)[rank * N_PER_RANK : (rank + 1) * N_PER_RANK]
    for batch in torch.split(shard, 70 + 30 * rank):  # different batching on each rank
        metric.update(batch)
    cov = metric.compute()
    return cov, float(metric.samples.count)  # local states are restored after compute


def rank_one_sees_nothing(rank, world_size):
    metric = RFFCovariance(sigma=1.5, n_frequencies=64, seed=11)
    if rank == 0:
        metric.update(data()[:N_PER_RANK])
    return metric.compute()


def nobody_sees_anything(rank, world_size):
    return RFFCovariance(sigma=1.5, n_frequencies=64).compute()


def seeds_differ(rank, world_size):
    metric = RFFCovariance(sigma=1.5, n_frequencies=64, seed=rank)
    metric.update(data()[:10])
    return metric.compute()


def helpers(rank, world_size):
    summed = all_reduce_sum(torch.tensor([1.0, float(rank)], dtype=torch.float64))
    same = disagreeing_ranks(torch.arange(6.0).reshape(2, 3))
    abstaining = disagreeing_ranks(None if rank == 1 else torch.arange(3.0))  # a rank without a vote agrees
    return summed, same, abstaining, disagreeing_ranks(torch.arange(6.0) + rank)


def test_all_reduced_covariance_equals_one_process_on_concatenated_data(tmp_path):
    results = run_ddp(metric_on_shard, torch.float64, tmp_path=tmp_path)
    single = RFFCovariance(sigma=1.5, n_frequencies=64, seed=11)
    single.update(data())
    expected = single.compute()
    for status, *value in results:
        assert status == "ok", value
        cov, local_count = value[0]
        assert float((cov - expected).norm() / expected.norm()) < 1e-12
        assert local_count == N_PER_RANK


def test_float32_ddp_matches_within_float32_rounding(tmp_path):
    results = run_ddp(metric_on_shard, torch.float32, tmp_path=tmp_path)
    single = RFFCovariance(sigma=1.5, n_frequencies=64, seed=11)
    single.update(data(torch.float32))
    expected = single.compute()
    for status, *value in results:
        assert status == "ok", value
        assert float((value[0][0] - expected).norm() / expected.norm()) < 1e-6


def test_rank_without_samples_neither_hangs_nor_gives_nan(tmp_path):
    results = run_ddp(rank_one_sees_nothing, tmp_path=tmp_path)
    single = RFFCovariance(sigma=1.5, n_frequencies=64, seed=11)
    single.update(data()[:N_PER_RANK])
    for status, *value in results:
        assert status == "ok", value
        assert bool(torch.isfinite(value[0]).all())
        torch.testing.assert_close(value[0], single.compute())


def test_no_samples_anywhere_raises_on_every_rank(tmp_path):
    for status, *value in run_ddp(nobody_sees_anything, tmp_path=tmp_path):
        assert status == "error" and "no samples were accumulated (on any rank)" in value[0]


def test_mismatched_seeds_raise_on_every_rank(tmp_path):
    for status, *value in run_ddp(seeds_differ, tmp_path=tmp_path):
        assert status == "error"
        assert "RuntimeError: RFFCovariance: random Fourier frequencies differ across ranks" in value[0]
        assert "same `seed`" in value[0]


def test_sync_helpers(tmp_path):
    for status, *value in run_ddp(helpers, tmp_path=tmp_path):
        assert status == "ok", value
        summed, same, abstaining, shifted = value[0]
        torch.testing.assert_close(summed[0], torch.tensor([2.0, 1.0], dtype=torch.float64))
        assert same == [] and abstaining == [] and shifted == [0, 1]  # rank 1 disagrees with rank 0, on every rank


def test_fingerprint_tells_seeds_sigmas_and_shapes_apart():
    base = torch.randn(4, 5)
    assert torch.equal(fingerprint(base), fingerprint(base.clone()))
    assert not torch.equal(fingerprint(base), fingerprint(base * 1.01))
    assert not torch.equal(fingerprint(base), fingerprint(base.reshape(5, 4)))
    assert not torch.equal(fingerprint(base), fingerprint(base.flip(0)))


def gathers(rank, world_size):
    """The one gather of rows, through torch.distributed and through the Lightning strategy a Trainer holds."""
    from lightning.fabric.plugins.environments import LightningEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    environment = LightningEnvironment()
    environment.set_world_size(world_size)
    environment.set_global_rank(rank)
    strategy = DDPStrategy(
        parallel_devices=[torch.device("cpu")] * world_size, cluster_environment=environment,
        process_group_backend="gloo",
    )
    rows = torch.arange(6.0 * rank).reshape(3 * rank, 2) + 100 * rank  # rank 0 holds no row, rank 1 three
    results = {"plain": all_gather_rows(rows), "strategy": all_gather_rows(rows, strategy=strategy)}
    for name, given in (("plain_grad", None), ("strategy_grad", strategy)):
        leaf = torch.ones(rank + 1, 2, dtype=torch.float64, requires_grad=True)
        gathered = all_gather_rows(leaf * (rank + 1), sync_grads=True, strategy=given)
        (gathered * torch.arange(1.0, gathered.shape[0] + 1, dtype=torch.float64)[:, None]).sum().backward()
        results[name] = (gathered.detach(), leaf.grad)
    return results


def test_one_gather_inside_and_outside_a_trainer(tmp_path):
    """``all_gather_rows`` gives the same rows, and sends each rank the same gradient, whether it runs through
    torch.distributed (outside a Trainer) or through the Lightning strategy (inside one)."""
    outcomes = run_ddp(gathers, tmp_path=tmp_path)
    want = torch.arange(6.0).reshape(3, 2) + 100
    for rank, (status, *value) in enumerate(outcomes):
        assert status == "ok", value
        results = value[0]
        assert torch.equal(results["plain"], want) and torch.equal(results["strategy"], want)
        plain, grad = results["plain_grad"]
        through, strategy_grad = results["strategy_grad"]
        torch.testing.assert_close(plain, torch.tensor([[1.0, 1.0], [2.0, 2.0], [2.0, 2.0]], dtype=torch.float64))
        assert torch.equal(plain, through) and torch.equal(grad, strategy_grad)
        # rank r's rows sit at positions 1.. of the gathered rows; each rank's loss weighs row i by i + 1
        assert grad.shape == (rank + 1, 2) and bool((grad != 0).all())


def test_one_process_gathers_nothing():
    """In one process the gather returns its rows, with or without a (single-device) strategy."""
    from lightning.pytorch.strategies import SingleDeviceStrategy

    rows = torch.randn(4, 3)
    assert all_gather_rows(rows) is rows
    assert all_gather_rows(rows, strategy=SingleDeviceStrategy(torch.device("cpu"))) is rows
