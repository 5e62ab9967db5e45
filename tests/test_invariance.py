"""Same answer under any order, batch size and sharding, for every number a user sees (scores, thresholds,
p-values, selected modes, top samples), in one process and as 2 real processes (gloo) against 1.

Lightning's DistributedSampler shards by stride, so the strided split is the one every DDP run meets; the
permuted, uneven split and rank-dependent batch sizes cover the rest. The data are float64, so the only
differences left are float64 summation orders (~1e-15 relative)."""

import pytest
import torch

from lightning_spectral.metrics import (
    ConditionalVendi,
    FastMMD,
    FINCNovelty,
    FKEAVendi,
    KernelPCAOOD,
    RFFCovariance,
    SPECDivergence,
)
from tests.data import mixture_means, sample_mixture
from tests.ddp import run_ddp

N = 900


def dataset():
    means = mixture_means(5, d=6, spread=10.0)
    gen, _ = sample_mixture(means, N, weights=[0.3, 0.3, 0.2, 0.2, 0.0], std=0.4, seed=1)  # mode 4 missing
    ref, _ = sample_mixture(means, N, weights=[0.2, 0.2, 0.2, 0.1, 0.3], std=0.4, seed=2)
    novel = means[0] + torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 30.0], dtype=torch.float64)
    gen[:120] = novel + 0.4 * torch.randn(120, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    second = gen[:, :4] @ torch.randn(4, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    probe = torch.randn(50, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 5
    return gen, ref, second, probe


def rows_of(rank, world_size, sharding):
    """This rank's sample indices under a sharding, in the order the rank sees them."""
    permutation = torch.randperm(N, generator=torch.Generator().manual_seed(11))
    if sharding == "whole":
        return torch.arange(N)
    if sharding == "shuffled":
        return permutation
    if sharding == "strided":  # DistributedSampler(shuffle=False)
        return torch.arange(rank, N, world_size)
    if sharding == "permuted_uneven":
        return permutation[:310] if rank == 0 else permutation[310:]
    raise ValueError(sharding)


def observe(rank, world_size, sharding):
    gen, ref, second, probe = dataset()
    rows = rows_of(rank, world_size, sharding)
    batch = 64 + 37 * rank + (13 if sharding == "shuffled" else 0)
    vendi = FKEAVendi(sigma=3.0, n_frequencies=96, alpha=[1, 2, "inf"], chunk_size=200)
    truncated = FKEAVendi(sigma=3.0, n_frequencies=96, alpha=[1, 2], chunk_size=200, truncation=4)
    finc = FINCNovelty(sigma=3.0, n_frequencies=96, chunk_size=200)
    mmd = FastMMD(sigma=[2.0, 5.0], n_frequencies=64, chunk_size=200)
    spec = SPECDivergence("cosine", chunk_size=200)  # widths learnt from the data, agreed across ranks
    conditional = ConditionalVendi(3.0, 2.0, 24, alpha=[1, 2], chunk_size=200, prompt_agnostic=True)
    covariance = RFFCovariance(3.0, 16, noise_draws=2, chunk_size=200)
    detectors = {m: KernelPCAOOD(m, sigma=0.7, n_frequencies=48, explained_variance=0.8) for m in ("corp", "cop", "linear")}
    for part in rows.split(batch):
        vendi.update(gen[part])
        truncated.update(gen[part])
        finc.update(gen[part], real=False)
        finc.update(ref[part], real=True)
        mmd.update(gen[part], real=False)
        mmd.update(ref[part], real=True)
        spec.update(gen[part], second[part])
        conditional.update(gen[part], second[part])
        covariance.update(gen[part])
        for detector in detectors.values():
            detector.partial_fit(ref[part])
    gen_batches = list(zip(gen[rows].split(batch), rows.split(batch), strict=True))
    ref_batches = list(zip(ref[rows].split(batch), rows.split(batch), strict=True))
    pair_batches = [((gen[ids], second[ids]), ids) for _, ids in gen_batches]
    test = mmd.reading().test()
    out = {
        "vendi": vendi.compute(),
        "vendi_summary": vendi.reading().summary(),  # the standard errors (multiplier draws) too
        "vendi_truncated": truncated.reading().summary(),
        "vendi_modes": vendi.reading().modes(4).eigenvalues,
        "vendi_top": [ids for ids, _ in vendi.reading().top_samples(gen_batches, k=3, per_mode=10)],
        "vendi_shares": torch.tensor([row.share for row in vendi.reading().galleries(gen_batches, 3, 10)["modes"].rows]),
        "finc": finc.reading().summary(),
        "finc_share_se": finc.reading().mode_share_standard_errors(3, missing=True),
        "finc_share_se_novel": finc.reading().mode_share_standard_errors(2),
        "threshold": finc.reading().threshold(),
        "threshold_missing": finc.reading().threshold(missing=True),
        "novel": finc.reading().novel_modes(4).significant,
        "missing": finc.reading().missing_modes(4).significant,
        "novel_p": finc.reading().novel_modes(4).p_values,
        "missing_p": finc.reading().missing_modes(4).p_values,
        "novel_top": [ids for ids, _ in finc.reading().top_samples(gen_batches, k=1, per_mode=20)],
        "missing_top": [ids for ids, _ in finc.reading().top_samples(ref_batches, k=1, per_mode=20, missing=True)],
        "novel_groups": [torch.tensor(group) for group in finc.reading().grouped_modes(gen_batches, k=4, per_mode=16).groups],
        "novel_group_top": [ids for ids, _ in finc.reading().grouped_modes(gen_batches, k=4, per_mode=16).samples],
        "missing_groups": [torch.tensor(group) for group in
                           finc.reading().grouped_modes(ref_batches, k=4, per_mode=16, missing=True).groups],  # (mode, sign)
        "missing_group_shares": finc.reading().grouped_modes(ref_batches, k=4, per_mode=16, missing=True).shares,
        "mmd": mmd.compute(),
        "mmd_summary": mmd.reading().summary(),
        "p_value": test.p_value,
        "reject": test.reject,
        "spec": spec.compute(),
        "spec_summary": spec.reading().summary(),  # its se from the joint draws (directions of the pair: cosine kernel)
        "spec_spectrum": spec.reading().spectrum()[:5],
        "spec_top": [ids for ids, _ in spec.reading().top_samples(pair_batches, k=2, sign=1, per_cluster=10)],
        "conditional_summary": conditional.reading().summary(),  # every score's se from the draws of all four sides
        "covariance_summary": covariance.reading().summary(),  # C and its entrywise se
    }
    for mapping, detector in detectors.items():
        detector.finalize()
        out[f"{mapping}_scores"] = detector.score(probe)
        out[f"{mapping}_q"] = detector.components_.shape[1]
        out[f"{mapping}_threshold"] = detector.calibrate(ref[rows], tpr=0.9)
    return out


def assert_same(got, want):
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, dict):
            assert_same(got[key], value)
        elif isinstance(value, list):
            assert [ids.tolist() for ids in got[key]] == [ids.tolist() for ids in value], key
        elif isinstance(value, torch.Tensor) and value.dtype == torch.bool:
            assert got[key].tolist() == value.tolist(), key
        elif isinstance(value, torch.Tensor):
            torch.testing.assert_close(got[key], value, rtol=1e-9, atol=1e-12, msg=key)
        else:
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.fixture(scope="module")
def one_process():
    want = observe(0, 1, "whole")
    # the comparison is not vacuous: every selection has something to select
    assert bool(want["novel"].any()) and bool(want["missing"].any()) and bool(want["reject"].all())
    assert float(want["finc"][""]) > 0 and float(want["spec"]) > 0.01
    assert all(float(se) > 0 for se in want["vendi_summary"]["se"].values())
    assert float(want["vendi_truncated"]["se"][1]) > 0
    assert bool((want["mmd_summary"]["se"] > 0).all()) and float(want["spec_summary"]["se"]) > 0
    conditional = want["conditional_summary"]
    assert all(float(conditional[key][order]) > 0 for key in ("se", "information_se", "vendi_se", "prompt_vendi_se")
               for order in (1, 2))
    assert float(conditional["prompt_agnostic_share_se"]) > 0
    assert float(want["covariance_summary"]["se"].min()) > 0
    assert bool((want["finc_share_se"] > 0).all()) and bool((want["finc_share_se_novel"] > 0).all())
    return want


def test_order_and_batch_size_do_not_change_any_number(one_process):
    assert_same(observe(0, 1, "shuffled"), one_process)


@pytest.mark.parametrize("sharding", ["strided", "permuted_uneven"])
def test_two_processes_equal_one(tmp_path, one_process, sharding):
    for status, *value in run_ddp(observe, sharding, tmp_path=tmp_path):
        assert status == "ok", value
        assert_same(value[0], one_process)


def empty_rank_with_other_settings(rank, world_size, what):
    x = torch.randn(40, 5, dtype=torch.float64)
    if what == "n_frequencies":
        metric = FKEAVendi(sigma=1.0, n_frequencies=32 if rank == 0 else 48)
        if rank == 0:
            metric.update(x)
        return float(metric.compute())
    detector = KernelPCAOOD("corp" if rank == 0 else "cop", n_frequencies=16)
    if rank == 0:
        detector.partial_fit(x)
    detector.finalize()
    return detector.components_.shape


@pytest.mark.parametrize("what", ["n_frequencies", "mapping"])
def test_a_rank_without_data_and_other_settings_gets_a_clear_error_not_an_abort(tmp_path, what):
    """The issue: gloo aborted both processes (SIGABRT, size mismatch) instead of raising."""
    results = run_ddp(empty_rank_with_other_settings, what, tmp_path=tmp_path)
    for status, *message in results:
        assert status == "error", message
        assert "different sizes on different ranks" in message[0] and "n_frequencies" in message[0], message


def local_counts_after_synced_reads(rank, world_size):
    gen, ref, _, _ = dataset()
    rows = rows_of(rank, world_size, "strided")
    finc = FINCNovelty(sigma=3.0, n_frequencies=96, chunk_size=200)
    finc.update(gen[rows], real=False)
    finc.update(ref[rows], real=True)
    reading = finc.reading()  # one sync; every read of the reading sees all ranks' sums
    inside = (reading.sample_count(), float(reading.streams["gen"].count))
    if rank == 0:  # no hidden collective after the reading: one rank alone reads everything (a collective would hang)
        reading.summary(), reading.novel_modes(2), reading.missing_modes(2), reading.threshold(), reading.headline()
    return inside, sum(float(a.count) for a in finc.gen), finc.sample_count()


def test_a_reading_sees_every_rank_restores_the_local_sums_and_hides_no_collective(tmp_path):
    for rank, (status, *value) in enumerate(run_ddp(local_counts_after_synced_reads, tmp_path=tmp_path)):
        assert status == "ok", value
        inside, local_after, total_after = value[0]
        assert inside == (N, float(N))  # the synced sums hold every rank's samples
        assert local_after == len(rows_of(rank, 2, "strided")) and total_after == N  # local sums back, counts global


def conditional_dataset():
    """Samples of 6 labelled prompts; prompt 4 collapsed to one point, prompt 5 to two."""
    generator = torch.Generator().manual_seed(21)
    labels = torch.randint(0, 6, (N,), generator=generator)
    centres = 6.0 * torch.randn(6, 5, generator=generator, dtype=torch.float64)
    x = centres[labels] + 1.5 * torch.randn(N, 5, generator=generator, dtype=torch.float64)
    x[labels == 4] = centres[4]
    x[labels == 5] = centres[5] + 4.0 * (torch.arange(N)[labels == 5] % 2)[:, None].double()
    captions = torch.nn.functional.one_hot(labels, 6).double() + 0.05 * torch.randn(N, 6, generator=generator)
    return x, labels, captions.double()


def observe_conditional(rank, world_size, sharding):
    from lightning_spectral.metrics import ConditionalVendi

    x, labels, captions = conditional_dataset()
    rows = rows_of(rank, world_size, sharding)
    batch = 50 + 29 * rank + (11 if sharding == "shuffled" else 0)
    by_label = ConditionalVendi(2.0, 0.3, 64, alpha=[1, 2], num_classes=6, per_prompt_frequencies=32, chunk_size=150)
    by_caption = ConditionalVendi(2.0, 0.5, 64, alpha=2, num_classes=6, per_prompt_frequencies=16, chunk_size=150,
                                  prompt_agnostic=True)
    from_counts = ConditionalVendi(2.0, 0.3, 64, alpha=[1, 2], num_classes=6, per_prompt_frequencies=8,
                                   unconditional=False, label_prompts=True, chunk_size=150)
    for part in rows.split(batch):
        by_label.update(x[part], labels[part])
        by_caption.update(x[part], captions[part], labels=labels[part])
        from_counts.update(x[part], labels[part])
    batches = [((x[ids], labels[ids]), ids) for ids in rows.split(batch)]
    return {
        "by_label": by_label.reading().summary(),
        "per_prompt": by_label.reading().per_prompt(),
        "least": [torch.tensor([label for label, _, _ in by_label.reading().least_diverse(3)])],
        "gallery": [ids for ids, _ in by_label.reading().galleries(batches, 2, 5)["least_diverse_prompts"].samples],
        "by_caption": by_caption.reading().summary(),
        "count": by_caption.sample_count(),
        "from_counts": from_counts.reading().summary(),
        "prompt_agnostic": by_caption.reading().prompt_agnostic_modes(3).eigenvalues,
        # the collapsed prompt's samples tie: compare the top scores, not which of the tied ids came first
        "prompt_agnostic_top": torch.stack([scores for _, scores in by_caption.reading().prompt_agnostic_top_samples(
            [(x[ids], ids) for ids in rows.split(batch)], k=2, per_mode=6)]),
    }


@pytest.fixture(scope="module")
def conditional_one_process():
    want = observe_conditional(0, 1, "whole")
    assert want["least"][0][:2].tolist() == [4, 5]  # the comparison is not vacuous: the collapsed prompts come first
    assert float(want["by_label"][""][1]) > 1.5 and want["count"] == N
    prompt_se = want["by_label"]["prompt_se"]  # per-label draws: compared with the rest of the summary
    assert bool((prompt_se[:4] > 0).all()) and float(want["by_label"]["min_prompt_vendi_se"]) >= 0
    return want


def sorted_gallery(value):
    value = dict(value)
    value["gallery"] = [ids.sort().values for ids in value["gallery"]]  # the first kept ids of a rank differ
    return value


def test_conditional_order_and_batch_size_do_not_change_any_number(conditional_one_process):
    got = observe_conditional(0, 1, "shuffled")
    got.pop("gallery")  # which samples of a prompt are shown follows the stream's order; the prompts do not
    want = dict(conditional_one_process)
    want.pop("gallery")
    assert_same(got, want)


@pytest.mark.parametrize("sharding", ["strided", "permuted_uneven"])
def test_conditional_two_processes_equal_one(tmp_path, conditional_one_process, sharding):
    for status, *value in run_ddp(observe_conditional, sharding, tmp_path=tmp_path):
        assert status == "ok", value
        got, want = dict(value[0]), dict(conditional_one_process)
        got.pop("gallery"), want.pop("gallery")
        assert_same(got, want)


def conditional_with_an_empty_rank(rank, world_size):
    from lightning_spectral.metrics import ConditionalVendi

    x, labels, captions = conditional_dataset()
    metric = ConditionalVendi(2.0, 0.5, 32, alpha=2, num_classes=6, per_prompt_frequencies=8)
    if rank == 0:  # rank 1 saw no sample: it builds its maps from rank 0's pair of widths and joins with zeros
        metric.update(x, captions, labels=labels)
    return metric.reading().summary()


def test_conditional_rank_without_samples_joins_with_zeros(tmp_path):
    from lightning_spectral.metrics import ConditionalVendi

    x, labels, captions = conditional_dataset()
    want = ConditionalVendi(2.0, 0.5, 32, alpha=2, num_classes=6, per_prompt_frequencies=8)
    want.update(x, captions, labels=labels)
    for status, *value in run_ddp(conditional_with_an_empty_rank, tmp_path=tmp_path):
        assert status == "ok", value
        assert_same(value[0], want.reading().summary())


def observe_auto(rank, world_size, sharding):
    """sigma="auto" metrics: the fitted sigma and every value, under any order, batching and sharding."""
    from lightning_spectral.metrics import ConditionalVendi

    gen, ref, second, probe = dataset()
    x, labels, captions = conditional_dataset()
    rows = rows_of(rank, world_size, sharding)
    batch = 64 + 37 * rank + (13 if sharding == "shuffled" else 0)
    spec = SPECDivergence("gaussian", "auto", "auto", n_frequencies=48, chunk_size=200)  # a sigma per embedding
    conditional = ConditionalVendi("auto", 0.5, 32, alpha=[1, 2], num_classes=6, per_prompt_frequencies=8)
    vendi = FKEAVendi(sigma="auto", n_frequencies=96, chunk_size=200)
    finc = FINCNovelty(sigma="auto", n_frequencies=96, chunk_size=200)
    mmd = FastMMD(sigma="auto", n_frequencies=64, chunk_size=200)
    detector = KernelPCAOOD("corp", sigma="auto", n_frequencies=48, explained_variance=0.8)
    for part in rows.split(batch):
        finc.update(gen[part], real=False)  # generated rows before the reference: held until the first read
        finc.update(ref[part], real=True)
        mmd.update(ref[part], real=True)
        mmd.update(gen[part], real=False)
        vendi.update(gen[part])
        detector.partial_fit(ref[part])
        spec.update(gen[part], second[part])
        conditional.update(x[part], captions[part], labels=labels[part])
    detector.finalize()
    return {
        "spec": spec.reading().summary(), "conditional": conditional.reading().summary(),
        "vendi": vendi.reading().summary(), "finc": finc.reading().summary(), "mmd": mmd.reading().summary(),
        "novel": finc.reading().novel_modes(4).significant, "detector_sigma": detector.sigma,
        "detector_scores": detector.score(probe),
    }


@pytest.fixture(scope="module")
def one_process_auto():
    want = observe_auto(0, 1, "whole")
    assert 0 < float(want["finc"]["sigma"]) != float(want["vendi"]["sigma"])  # the reference's rows, not FILE's
    assert float(want["finc"]["sigma"]) == float(want["mmd"]["sigma"])  # one rule, the same reference rows
    assert float(want["spec"]["sigma_a"]) == float(want["vendi"]["sigma"]) != float(want["spec"]["sigma_b"])
    assert 0 < float(want["conditional"]["sigma"]) != float(want["vendi"]["sigma"])  # the samples' rows
    return want


def test_auto_sigma_does_not_depend_on_order(one_process_auto):
    assert_same(observe_auto(0, 1, "shuffled"), one_process_auto)


@pytest.mark.parametrize("sharding", ["strided", "permuted_uneven"])
def test_auto_sigma_two_processes_equal_one(tmp_path, one_process_auto, sharding):
    for status, *value in run_ddp(observe_auto, sharding, tmp_path=tmp_path):
        assert status == "ok", value
        assert_same(value[0], one_process_auto)
