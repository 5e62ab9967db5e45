"""Split modes reported as one region (functional/mode_groups.py), and top samples whose ties break by id."""

import warnings

import pytest
import torch

from lightning_spectral.functional.mode_groups import ModeEnd, contrast_ends, end_groups, groups_of, mode_groups
from lightning_spectral.functional.modes import top_samples, top_samples_and_rows
from lightning_spectral.metrics import FINCNovelty


def blobs(seed):
    """A shared blob, and two novel tight blobs far apart (sd 0.1 at sigma 1: each clears rho = 2 as several
    modes)."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(300, 2, generator=g) * 0.1
    gen = torch.cat([
        torch.randn(200, 2, generator=g) * 0.1,
        torch.randn(100, 2, generator=g) * 0.1 + 10.0,
        torch.randn(100, 2, generator=g) * 0.1 - 10.0,
    ])
    return ref, gen


def test_a_tight_cluster_split_into_several_modes_is_one_region_and_two_clusters_stay_two():
    ref, gen = blobs(1)
    metric = FINCNovelty(sigma=1.0, n_frequencies=256, rho=2.0)
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    count = int(metric.reading().novel_modes(20).significant.sum())
    assert count >= 3  # the split the rule undoes
    grouped = metric.reading().grouped_modes([(gen, torch.arange(len(gen)))], k=count, per_mode=16)
    assert sorted({end.mode for group in grouped.groups for end in group}) == list(range(count))
    assert len(grouped.groups) == 2
    blob_of = torch.cat([torch.zeros(200), torch.ones(100), 2 * torch.ones(100)]).long()
    shown = [set(blob_of[ids].tolist()) for ids, _ in grouped.samples]
    assert sorted(map(tuple, shown)) == [(1,), (2,)]  # each row one novel blob, the two blobs both shown
    # each blob is 100 of the 400 generated samples; the first mode is their contrast (one blob at each end), whose
    # eigenvector reads a share of 0: each region reads along its own top samples' direction instead
    assert grouped.groups[1][0] == ModeEnd(0, -1)
    assert grouped.shares.shape == (2,) and all(0.15 < float(share) <= 0.25 for share in grouped.shares)
    galleries = metric.reading().galleries([(gen, torch.arange(len(gen)))], count, 16)
    assert len(galleries["novel"].labels) == 2 and "merged" in " ".join(galleries["novel"].labels)
    assert galleries["novel"].title.endswith("in 2 regions")


def test_a_contrast_of_two_regions_does_not_join_their_union():
    # mode 1 = the union of two groups (its top samples score -1 or +1 on mode 2), mode 2 = their contrast
    top = [(torch.arange(4), torch.full((4,), 4.0)), (torch.arange(4, 8), torch.full((4,), 2.0))]
    rows = [torch.tensor([[4.0, -2.0], [4.0, 2.0], [4.0, -2.0], [4.0, 2.0]]), torch.tensor([[3.0, 2.0]] * 4)]
    assert mode_groups(top, rows) == [0, 1]
    rows[0][:, 1] = 0.1  # mode 2 is near 0 on mode 1's centre: a within-region direction
    assert mode_groups(top, rows) == [0, 0]
    assert groups_of([0, 0, 2, 0]) == [[0, 1, 3], [2]]


def test_both_ends_of_a_contrast_are_regions_and_a_union_after_them_joins():
    # two groups A (ids 0-3) and B (4-7): mode 1 their contrast (A at +4, B at -4), mode 2 their union (+3 on both)
    score = torch.tensor([[4.0, 3.0]] * 4 + [[-4.0, 3.0]] * 4)
    columns = torch.cat([score, -score], 1)  # the ends: u_1, u_2, -u_1, -u_2
    samples, rows = top_samples_and_rows([(columns, torch.arange(8))], lambda x: x, 4, 4)
    assert contrast_ends(samples[:2], samples[2:]) == [True, False]  # the union's other end holds nothing
    groups, leading = end_groups(samples, rows)
    # A = mode 1's first end, B its other end; the union's top samples (A: ties go to the smaller ids) lie in A's
    # region without splitting it, so the union joins A's row
    assert groups == [[ModeEnd(0, 1), ModeEnd(1, 1)], [ModeEnd(0, -1)]] and leading == [0, 2]
    assert samples[2][0].tolist() == [4, 5, 6, 7]
    # union first, contrast second (A at even ids, B at odd ones): the union's top samples hold both groups, which
    # the contrast's two ends split, so each end is a region of its own
    score = torch.tensor([[3.0, 4.0], [3.0, -4.0]] * 6)
    columns = torch.cat([score, -score], 1)
    samples, rows = top_samples_and_rows([(columns, torch.arange(12))], lambda x: x, 4, 4)
    groups, _ = end_groups(samples, rows)
    assert groups == [[ModeEnd(0, 1)], [ModeEnd(1, 1)], [ModeEnd(1, -1)]]


def test_equal_scores_are_ranked_by_id_under_any_order_and_batch_size():
    x = torch.tensor([[1.0], [2.0], [2.0], [2.0], [0.5], [2.0]])  # four ties at the top
    ids = torch.tensor([50, 7, 3, 9, 1, 4])

    def score(features):
        return torch.cat([features, -features], 1)

    want = top_samples([(x, ids)], score, 2, 3)
    assert want[0][0].tolist() == [3, 4, 7]
    assert want[1][0].tolist() == [1, 50, 3]
    for seed in range(3):
        order = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
        for size in (1, 2, 4):
            batches = list(zip(x[order].split(size), ids[order].split(size), strict=True))
            got, rows = top_samples_and_rows(batches, score, 2, 3)
            assert [i.tolist() for i, _ in got] == [i.tolist() for i, _ in want]
            for (mode_ids, _), mode_rows in zip(got, rows, strict=True):  # rows: the top samples' scores
                position = {int(v): j for j, v in enumerate(ids)}
                expected = score(x[[position[int(i)] for i in mode_ids]]).double()
                assert torch.equal(mode_rows, expected)


def test_regions_of_dropped_digits_survive_float32_rounding_and_name_each_class_once_per_row():
    """The rows of a real case (digits, 3 classes dropped: trial 1 of tests/test_dropped_modes.py) do not move when
    the embeddings change in their last float32 bits, as another batch composition in an encoder does; and the
    case's other end (the 5s, the second end of the 3s' mode) is a row of its own."""
    from tests.conftest import digits

    x, y = digits()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    reference, rest = order[:900], order[900:]
    generated = rest[~torch.isin(y[rest], torch.tensor([3, 4, 5]))]

    def regions(noise):
        features = x.double() * (1 + noise)
        metric = FINCNovelty("auto", n_frequencies=256)
        metric.update(features[reference], real=True)
        metric.update(features[generated], real=False)
        count = int(metric.reading().missing_modes(10).significant.sum())
        batches = [(features[reference], torch.arange(900))]
        return metric.reading().grouped_modes(batches, k=count, per_mode=20, missing=True)

    exact = regions(0.0)
    rounded = regions(torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 2e-7)
    assert exact.groups == rounded.groups
    assert [ids.tolist() for ids, _ in exact.samples] == [ids.tolist() for ids, _ in rounded.samples]
    torch.testing.assert_close(exact.shares, rounded.shares, rtol=1e-4, atol=1e-6)
    labels = [y[reference][ids] for ids, _ in exact.samples]
    named = [(int(row.mode().values), float((row == row.mode().values).double().mean())) for row in labels]
    assert {label for label, purity in named if purity >= 0.8} == {3, 4, 5}
    assert all(label in (3, 4, 5) for label, _ in named)
    other = [i for i, group in enumerate(exact.groups) if group[0].sign < 0]
    assert [named[i][0] for i in other] == [5]


def test_a_pass_without_batches_gives_rows_without_samples_not_an_error():
    ref, gen = blobs(1)
    metric = FINCNovelty(sigma=1.0, n_frequencies=256, rho=2.0)
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    grouped = metric.reading().grouped_modes([], k=2, per_mode=8)  # every rank streamed nothing
    assert [len(ids) for ids, _ in grouped.samples] == [0, 0]
    assert grouped.shares.tolist() == [0.0, 0.0] and grouped.shares_se.tolist() == [0.0, 0.0]
    assert [row.share for row in metric.reading().galleries([], 2, 8)["novel"].rows] == [0.0, 0.0]


def test_per_mode_above_half_the_samples_warns_that_the_rows_read_alike():
    ref, gen = blobs(1)
    metric = FINCNovelty(sigma=1.0, n_frequencies=256, rho=2.0)
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    batches = [(gen, torch.arange(len(gen)))]
    with pytest.warns(UserWarning, match=r"two ends share top samples: per_mode=.*well below half the samples"):
        metric.reading().grouped_modes(batches, k=2, per_mode=len(gen))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metric.reading().grouped_modes(batches, k=2, per_mode=len(gen) // 4)


def test_a_row_led_by_a_modes_other_end_names_the_row_of_its_first_end():
    """The gallery rows are numbered as regions ("missing region 4"); a row led by a mode's other end says whose other
    end it is by that numbering: "the other end of region N" names row N, the row of that mode's first end, not the
    mode's own rank. Here each such row N is led by that first end (the same eigenvalue and p-value). Digits: a
    random half of all ten classes against the other half's 0-6, where modes 1 and 2 merge into row 1, so ranks and
    rows differ."""
    import re

    from tests.conftest import digits

    x, y = digits()
    x = x.double()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    real, rest = order[: len(x) // 2], order[len(x) // 2 :]
    generated = rest[y[rest] < 7]
    metric = FINCNovelty("auto", n_frequencies=256)
    metric.update(x[real], real=True)
    metric.update(x[generated], real=False)
    rows = metric.reading().galleries([(x[generated], generated)], k=10, per_mode=8, reference_batches=[(x[real], real)])
    details = [row.detail for row in rows["missing"].rows]
    assert "modes 1, 2 merged" in details[0]  # the case where ranks and rows differ
    others = [(i, re.match(r"\(the other end of region (\d+): (.*)\)", detail)) for i, detail in enumerate(details)]
    others = [(i, int(match.group(1)) - 1, match.group(2)) for i, match in others if match]
    assert len(others) >= 2
    for row, first_row, value in others:
        assert first_row < row and details[first_row] == f"({value})", details
