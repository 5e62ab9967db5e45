"""Generative pieces: the digits datamodule with dropped classes, the VAE, and a short run of the experiment."""

import sys
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch
from digits_vae import DigitsVAE

from lightning_spectral.data import DigitsImages, DropClassesSampler, load_digit_images

ROOT = Path(__file__).resolve().parents[1]


def labels_of(loader):
    return torch.cat([batch["label"] for batch in loader])


def epoch_labels(data, epoch):
    loader = data.train_dataloader()
    loader.sampler.set_epoch(epoch)
    return labels_of(loader)


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------


def test_digit_images_are_grey_8x8_in_unit_range():
    images, labels = load_digit_images()
    assert images.shape == (1797, 1, 8, 8) and images.dtype == torch.float32
    assert float(images.min()) == 0.0 and float(images.max()) == 1.0
    assert labels.dtype == torch.int64 and sorted(labels.unique().tolist()) == list(range(10))


def test_batches_have_images_labels_and_dataset_indices():
    data = DigitsImages(batch_size=32)
    batch = next(iter(data.train_dataloader()))  # setup happens on first use
    assert batch["image"].shape == (32, 1, 8, 8) and batch["image"].dtype == torch.float32
    assert batch["label"].dtype == torch.int64 and batch["index"].dtype == torch.int64
    images, labels = load_digit_images()
    torch.testing.assert_close(batch["image"], images[batch["index"]], rtol=0, atol=0)
    assert torch.equal(batch["label"], labels[batch["index"]])


def test_split_is_stratified_disjoint_and_seeded():
    data = DigitsImages(val_fraction=0.2, seed=0)
    data.setup()
    train, val = set(data.train_set.rows), set(data.val_set.rows)
    assert not train & val and len(train | val) == 1797
    per_class = Counter(labels_of(data.val_dataloader()).tolist())
    _, labels = load_digit_images()
    for digit, total in Counter(labels.tolist()).items():
        assert per_class[digit] == round(0.2 * total)
    again, other = DigitsImages(seed=0), DigitsImages(seed=1)
    again.setup(), other.setup()
    assert again.val_set.rows == data.val_set.rows and other.val_set.rows != data.val_set.rows


def test_reference_loader_is_the_whole_training_split_in_a_fixed_order():
    data = DigitsImages(drop_classes=[3, 7], drop_after_epoch=0)
    ids = torch.cat([batch["index"] for batch in data.reference_dataloader()])
    assert ids.tolist() == data.train_set.rows
    assert {3, 7} <= set(labels_of(data.reference_dataloader()).tolist())


def test_dropped_classes_leave_the_stream_from_the_given_epoch():
    data = DigitsImages(batch_size=128, drop_classes=[3, 7], drop_after_epoch=2)
    for epoch in range(4):
        labels = epoch_labels(data, epoch)
        assert len(labels) == len(data.train_set)  # every epoch has the same length
        dropped = int(torch.isin(labels, torch.tensor([3, 7])).sum())
        assert dropped > 0 if epoch < 2 else dropped == 0
    sampler = data.train_dataloader().sampler
    assert sorted(sampler) == list(range(len(data.train_set)))  # before the drop: a permutation
    sampler.set_epoch(3)
    assert max(Counter(sampler).values()) == 2  # after it, the other digits fill the epoch


def test_starved_classes_keep_a_fixed_share():
    sampler = DropClassesSampler([0] * 50 + [1] * 50, seed=0, drop_classes=[1], drop_after_epoch=1, keep_fraction=0.2)
    sampler.set_epoch(1)
    first = {i for i in sampler if i >= 50}
    sampler.set_epoch(5)
    assert len(first) == 10 and {i for i in sampler if i >= 50} == first


def test_stream_is_deterministic_per_seed_and_epoch():
    def order(seed, epoch):
        sampler = DropClassesSampler(list(range(10)) * 20, seed=seed, drop_classes=[4], drop_after_epoch=1)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(0, 0) == order(0, 0) and order(0, 3) == order(0, 3)
    assert order(0, 0) != order(1, 0) and order(0, 2) != order(0, 3)


class LabelRecorder(L.LightningModule):
    """Records the labels of every training batch by epoch (no learning)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: dict[int, list[int]] = {}

    def training_step(self, batch, batch_idx):
        self.seen.setdefault(self.current_epoch, []).extend(batch["label"].tolist())
        return self.weight * 0.0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_lightning_sets_the_epoch_of_the_stream():
    data = DigitsImages(batch_size=256, drop_classes=[3, 7], drop_after_epoch=1)
    module = LabelRecorder()
    trainer = L.Trainer(
        max_epochs=3, limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(module, datamodule=data)
    assert {3, 7} <= set(module.seen[0])
    assert not {3, 7} & (set(module.seen[1]) | set(module.seen[2]))
    assert len(module.seen[0]) == len(module.seen[2]) == len(data.train_set)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"drop_classes": [3, 3]}, "drop_classes"),
        ({"drop_classes": [10]}, "drop_classes"),
        ({"drop_after_epoch": -1}, "drop_after_epoch"),
        ({"keep_fraction": 1.0}, "keep_fraction"),
        ({"val_fraction": 1.5}, "val_fraction"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DigitsImages(**kwargs)


def test_dropping_every_class_is_refused():
    with pytest.raises(ValueError, match="removes every sample"):
        DropClassesSampler([0, 1, 0, 1], drop_classes=[0, 1])


# ---------------------------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------------------------


def test_samples_are_images_in_unit_range_and_seeded():
    model = DigitsVAE(hidden=32, n_components=5)
    x = model.sample(16, generator=torch.Generator().manual_seed(0))
    assert x.shape == (16, 1, 8, 8) and float(x.min()) >= 0 and float(x.max()) <= 1
    torch.testing.assert_close(x, model.sample(16, generator=torch.Generator().manual_seed(0)), rtol=0, atol=0)
    assert not torch.equal(x, model.sample(16, generator=torch.Generator().manual_seed(1)))


def test_a_checkpointed_model_samples_the_same_images():
    model = DigitsVAE(hidden=32, n_components=5)
    with torch.no_grad():
        model.prior_logits.copy_(torch.arange(5.0))  # a non-default prior must travel too
    copy = DigitsVAE(hidden=32, n_components=5)
    copy.load_state_dict(model.state_dict())
    first, second = (m.sample(8, generator=torch.Generator().manual_seed(3)) for m in (model, copy))
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_one_training_and_validation_step_run_and_learn():
    L.seed_everything(0, verbose=False)
    model = DigitsVAE(hidden=64, n_components=5)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = L.Trainer(fast_dev_run=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=DigitsImages(batch_size=16))
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert {"train/loss", "val/loss", "val/reconstruction", "val/kl"} <= set(trainer.logged_metrics)


def test_loss_terms_are_finite_and_shapes_are_checked():
    model = DigitsVAE(hidden=32, n_components=5)
    terms = model.loss(torch.rand(4, 1, 8, 8))
    assert all(torch.isfinite(value) and value.ndim == 0 for value in terms.values())
    with pytest.raises(ValueError, match=r"\(N, 1, 8, 8\)"):
        model.loss(torch.rand(4, 3, 8, 8))


@pytest.mark.parametrize("kwargs", [{"hidden": 0}, {"n_components": 1.5}, {"beta": 0.0}, {"lr": -1.0}])
def test_bad_model_arguments_name_themselves(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DigitsVAE(**kwargs)


def test_sample_count_is_checked():
    with pytest.raises(ValueError, match="`n`"):
        DigitsVAE(hidden=8).sample(0)


# ---------------------------------------------------------------------------------------------------------------
# the experiment (recipes/generative_experiment.py), shortened
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_finc_names_the_dropped_digits_and_nothing_in_the_normal_run(capsys):
    sys.path.insert(0, str(ROOT / "recipes"))
    from generative_experiment import checks, main

    short = ["--seeds", "0", "--epochs", "60", "--drop-after", "20", "--n-frequencies", "256", "--kid-subsets", "20"]
    rows = main(short)[0]
    assert all(checks(rows["normal"], rows["collapse"]).values()), capsys.readouterr().out
    normal, collapse = rows["normal"], rows["collapse"]
    assert sorted(name.split()[0] for name in collapse["named"][:2]) == ["3", "7"]
    assert collapse["kid"][0] > normal["kid"][0]  # KID also sees the collapse, as one number


def train_briefly(model, global_seed):
    torch.manual_seed(global_seed)  # the global RNG after initialisation differs between the runs
    trainer = L.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=DigitsImages(batch_size=32))
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("noise_seed", [0, None])
def test_noise_seed_makes_training_independent_of_the_global_random_state(noise_seed):
    torch.manual_seed(0)
    first = DigitsVAE(hidden=32, n_components=5, noise_seed=noise_seed)
    second = DigitsVAE(hidden=32, n_components=5, noise_seed=noise_seed)
    second.load_state_dict(first.state_dict())
    same = all(torch.equal(a, b) for a, b in zip(train_briefly(first, 1), train_briefly(second, 2)))
    assert same == (noise_seed is not None)  # without it, the noise follows the global generator


def test_loss_noise_from_a_generator_is_reproducible_and_noise_seed_is_checked():
    model, images = DigitsVAE(hidden=32, n_components=5), torch.rand(4, 1, 8, 8)
    first, second = (model.loss(images, torch.Generator().manual_seed(5))["loss"] for _ in range(2))
    assert torch.equal(first, second)
    with pytest.raises(ValueError, match="noise_seed"):
        DigitsVAE(noise_seed=1.5)
