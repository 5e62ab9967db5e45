"""A reference gallery searches the whole reference: with a reference ordered by class (as ``ImageFolder`` and
stratified splits give) and bigger than ``max_gallery_images``, the missing mode of a generator that never draws a 7
shows sevens and is named class 7, on one process and on two; a loader that shuffles between passes is refused by
name instead of showing images that are not the ones found."""

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import GeneratedSamples
from lightning_spectral.data import load_digit_images
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FINCNovelty
from tests.conftest import LinearModule

IMAGES, LABELS = load_digit_images()
ORDER = torch.argsort(LABELS, stable=True)  # every 0, then every 1, ...: the sevens come after row 1,200


def without_sevens(module, n, generator):
    """Real digits of every class but 7, drawn with the callback's generator."""
    pool = (LABELS != 7).nonzero().flatten()
    return IMAGES[pool[torch.randint(len(pool), (n,), generator=generator)]]


def by_class(shuffle=False):
    rows = [{"image": IMAGES[i], "label": LABELS[i]} for i in ORDER.tolist()]
    return DataLoader(rows, batch_size=256, shuffle=shuffle)


def measure(tmp_path, devices=1, shuffle=False):
    callback = GeneratedSamples(
        {"finc": FINCNovelty(sigma=3.0, n_frequencies=128, reset_real_features=False)},
        feature=PixelImageFeature(8), references={"finc": by_class(shuffle)}, sample=without_sevens, n_samples=800,
        sample_batch_size=500, label_key="label", gallery_modes=2, gallery_per_mode=10, max_gallery_images=200,
        log_detail=True,
    )
    trainer = L.Trainer(
        callbacks=[callback], logger=False, accelerator="cpu", devices=devices,
        strategy="ddp_spawn" if devices > 1 else "auto", enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=tmp_path,
    )
    trainer.validate(LinearModule(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=8), verbose=False)
    return callback, {name: float(value) for name, value in trainer.callback_metrics.items()}


def test_the_missing_gallery_of_a_class_ordered_reference_names_the_dropped_class(tmp_path):
    assert set(LABELS[ORDER[:200]].tolist()) <= {0, 1}
    callback, logged = measure(tmp_path)
    assert logged["gen/finc/detail/missing_class/0"] == 7.0  # the first 200 rows hold only 0s and 1s
    assert logged["gen/finc/detail/missing_purity/0"] >= 0.8
    gallery = callback.last_galleries["finc/missing"]
    assert gallery.labels[0].startswith("missing region 1: class 7")


@pytest.mark.timeout(300)
def test_two_processes_search_the_whole_reference_as_one(tmp_path):
    _, one = measure(tmp_path / "1")
    _, two = measure(tmp_path / "2", devices=2)
    for key in ("gen/finc/detail/missing_class/0", "gen/finc/detail/missing_purity/0"):
        assert two[key] == one[key], key
    assert two["gen/finc/detail/missing_share/0"] == pytest.approx(one["gen/finc/detail/missing_share/0"], rel=1e-4)


def test_a_reference_loader_that_shuffles_is_refused_by_name(tmp_path):
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match=r"references\['finc'\] gave other images on a second pass.*shuffle=False"):
        measure(tmp_path, shuffle=True)


# ---------------------------------------------------------------------------------------------------------------
# EmbeddingMetrics' kept validation samples: a uniform sample by dataset index, the same under any sharding
# ---------------------------------------------------------------------------------------------------------------


def kept_ids(batches, limit, strategy=None):
    from types import SimpleNamespace

    from lightning_spectral.callbacks.galleries import IndexedImages

    gallery = IndexedImages(lambda i: torch.zeros(1, 2, 2), 2, 3, limit=limit)
    for ids in batches:
        gallery.keep(ids[:, None].double(), None, ids)
    gallery.settle(SimpleNamespace(strategy=strategy))
    return torch.cat([ids for _, ids in gallery.batches("samples")]).sort().values


def test_the_kept_validation_samples_are_the_smallest_priorities_whatever_the_order_and_batches():
    from lightning_spectral.callbacks.galleries import index_priority

    ids = torch.arange(5000)  # ordered by class, as a sorted validation set: the first 300 are one class
    want = ids[index_priority(ids).argsort()[:300]].sort().values
    assert torch.equal(kept_ids(ids.split(64), 300), want)
    shuffled = ids[torch.randperm(5000, generator=torch.Generator().manual_seed(1))]
    assert torch.equal(kept_ids(shuffled.split(999), 300), want)
    assert float((want < 2500).double().mean()) == pytest.approx(0.5, abs=0.1)  # from the whole range, not its head
    assert torch.equal(kept_ids(ids[:200].split(50), 300), ids[:200])  # fewer than the limit: every one


def test_two_ranks_keep_together_what_one_keeps(monkeypatch):
    """Each rank keeps its shard's smallest priorities; `settle` gathers every rank's (here both shards' in one
    process, standing in for `all_gather_rows`) and keeps the global smallest: the union is one process's set."""
    from types import SimpleNamespace

    from lightning_spectral.callbacks import galleries
    from lightning_spectral.callbacks.galleries import IndexedImages

    shards = [torch.arange(5000)[rank::2] for rank in range(2)]
    kept = []
    for rank, ids in enumerate(shards):
        gallery = IndexedImages(lambda i: torch.zeros(1, 2, 2), 2, 3, limit=300)
        for part in ids.split(77):
            gallery.keep(part[:, None].double(), None, part)
        others = [galleries.index_priority(shard).sort().values[:300, None] for shard in shards]
        monkeypatch.setattr(galleries, "all_gather_rows", lambda rows, strategy: torch.cat(others))
        gallery.settle(SimpleNamespace(strategy=SimpleNamespace(world_size=2)))
        kept += torch.cat([part for _, part in gallery.batches("samples")]).tolist()
    assert sorted(kept) == kept_ids(torch.arange(5000).split(100), 300).tolist()


def test_the_reference_is_embedded_for_the_galleries_once_per_fit(tmp_path):
    """The extractor is frozen: the whole-reference search embeds the reference at the first measured epoch and
    reads the kept embeddings at the next (`KEPT_REFERENCE_BYTES`), with the same gallery."""

    class Counting(PixelImageFeature):
        rows = 0

        def forward(self, images):
            Counting.rows += len(images)
            return super().forward(images)

    callback = GeneratedSamples(
        {"finc": FINCNovelty(sigma=3.0, n_frequencies=128, reset_real_features=False)},
        feature=Counting(8), references={"finc": by_class()}, sample=without_sevens, n_samples=600,
        sample_batch_size=300, label_key="label", gallery_modes=2, gallery_per_mode=10, max_gallery_images=200,
    )
    trainer = L.Trainer(callbacks=[callback], logger=False, accelerator="cpu", devices=1, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path)
    module, loader = LinearModule(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=8)
    seen = []
    for _ in range(2):
        trainer.validate(module, loader, verbose=False)
        seen.append(Counting.rows - sum(seen))
    assert seen == [600 + 2 * len(IMAGES), 600], seen  # the sums' pass and the galleries' pass, then samples alone
    assert callback.last_galleries["finc/missing"].labels[0].startswith("missing region 1: class 7")
