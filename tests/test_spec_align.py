"""SPECAlign inside a real Trainer.fit on CPU: the penalty reaches the loss, aligns, and behaves under
gradient accumulation, bf16-mixed, DDP (2 processes) and resume."""

import math

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import SPECAlign
from lightning_spectral.functional import spec, spec_align_loss
from tests.conftest import quiet_trainer


def toy_data(n=512, seed=0):
    """Inputs whose first 4 coordinates hold 3 clusters and whose last 12 are loud nuisance; the reference
    embedding groups the clusters."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3
    centers = 3.0 * torch.randn(3, 4, generator=g)
    x = torch.cat([centers[labels] + 0.3 * torch.randn(n, 4, generator=g), 4.0 * torch.randn(n, 12, generator=g)], 1)
    reference = torch.nn.functional.one_hot(labels, 8).float() + 0.1 * torch.randn(n, 8, generator=g)
    return x, labels, reference


class ToyModule(L.LightningModule):
    """A linear encoder with a task loss (reconstructing the nuisance-free part is NOT asked: a weak decoder
    loss keeps the task term non-trivial)."""

    def __init__(self, lr=0.02):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(16, 8)
        self.decoder = torch.nn.Linear(8, 16)
        self.lr = lr
        self.backward_losses = []

    def training_step(self, batch, batch_idx):
        x = batch[0]
        loss = 1e-3 * torch.nn.functional.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("task", loss)
        return loss

    def on_before_backward(self, loss):
        self.backward_losses.append(float(loss.detach()))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def loader(x, batch_size=128, shuffle=False):
    return DataLoader(TensorDataset(x, torch.arange(len(x))), batch_size=batch_size, shuffle=shuffle)


def make_trainer(tmp_path, **kwargs):
    return quiet_trainer(tmp_path, **kwargs)


def knn_accuracy(z, labels, k=5):
    z = torch.nn.functional.normalize(z, dim=1)
    similarity = z @ z.T - 2 * torch.eye(len(z))
    return float((labels[similarity.topk(k, dim=1).indices].mode(dim=1).values == labels).float().mean())


def measure(module, x, labels, reference):
    with torch.no_grad():
        z = module.encoder(x)
    return float(spec(z, reference, "cosine").spec_diff), knn_accuracy(z, labels)


def test_alignment_in_trainer_fit_lowers_spec_diff_and_raises_knn(tmp_path):
    x, labels, reference = toy_data()
    module, baseline = ToyModule(), ToyModule()
    before = measure(module, x, labels, reference)
    align = SPECAlign(reference=reference, weight=1.0, student="encoder", index=1)
    trainer = make_trainer(tmp_path, max_epochs=20, callbacks=[align])
    trainer.fit(module, loader(x, shuffle=True))
    make_trainer(tmp_path, max_epochs=20).fit(baseline, loader(x, shuffle=True))
    after, without = measure(module, x, labels, reference), measure(baseline, x, labels, reference)
    print("SPECAlign toy: (spec_diff, knn) before", before, "aligned", after, "weight 0", without)
    assert after[0] <= 0.5 * before[0] and after[0] < 0.5 * without[0]
    assert after[1] > without[1] + 0.1
    logged = trainer.callback_metrics
    assert {"spec_align/spec_diff", "spec_align/penalty", "spec_align/task_loss", "spec_align/weight"} <= set(logged)
    assert "training_step" not in vars(module)  # the wrapper is gone after fit
    assert align.penalised_steps == 20 * 4


def test_penalty_is_added_to_the_loss_with_accumulation(tmp_path):
    """The loss Lightning backpropagates is (task + weight * SPEC-diff) / accumulate_grad_batches."""
    x, _, reference = toy_data(n=256)
    module = ToyModule(lr=0.0)  # frozen weights: every quantity can be recomputed afterwards
    align = SPECAlign(reference=reference, weight=0.3, index=1)
    make_trainer(tmp_path, callbacks=[align], accumulate_grad_batches=2).fit(module, loader(x, 64))
    expected = []
    for start in range(0, 256, 64):
        batch = x[start : start + 64]
        with torch.no_grad():
            task = 1e-3 * torch.nn.functional.mse_loss(module.decoder(module.encoder(batch)), batch)
            penalty = 0.3 * spec_align_loss(module.encoder(batch), reference[start : start + 64])
        expected.append(float(task + penalty) / 2)
    assert module.backward_losses == pytest.approx(expected, rel=1e-5)


def test_every_n_steps_warmup_and_reference_module(tmp_path):
    x, _, _ = toy_data(n=256)
    frozen = torch.nn.Linear(16, 6)  # a reference encoder run on the same input
    align = SPECAlign(reference=frozen, weight=1.0, every_n_steps=2, warmup_steps=2)
    module = ToyModule(lr=0.0)
    make_trainer(tmp_path, callbacks=[align]).fit(module, loader(x, 64))
    assert align.penalised_steps == 1  # steps 0 and 2 are due; the warm-up weight at step 0 is 0
    assert not any(p.requires_grad for p in frozen.parameters())
    batch = x[128:192]
    with torch.no_grad():
        task = 1e-3 * torch.nn.functional.mse_loss(module.decoder(module.encoder(batch)), batch)
        penalty = spec_align_loss(module.encoder(batch), frozen(batch))
    assert module.backward_losses[2] == pytest.approx(float(task + penalty), rel=1e-5)
    assert module.backward_losses[1] == pytest.approx(
        1e-3 * float(torch.nn.functional.mse_loss(module.decoder(module.encoder(x[64:128])), x[64:128])), rel=1e-5
    )


def test_two_instances_share_one_fit_and_each_adds_its_penalty(tmp_path):
    """Two references in one fit (the issue: Lightning refused two stateful SPECAlign callbacks with one
    state_key, and the second teardown's `del training_step` raised AttributeError)."""
    x, _, reference = toy_data(n=256)
    frozen = torch.nn.Linear(16, 6)
    by_table = SPECAlign(reference=reference, weight=0.3, index=1, log_prefix="spec_align/table/")
    by_module = SPECAlign(reference=frozen, weight=0.7, log_prefix="spec_align/module/")
    assert by_table.state_key != by_module.state_key
    module = ToyModule(lr=0.0)
    trainer = make_trainer(tmp_path, callbacks=[by_table, by_module])
    trainer.fit(module, loader(x, 64))
    assert "training_step" not in vars(module) and by_table.penalised_steps == by_module.penalised_steps == 4
    batch = x[192:256]
    with torch.no_grad():
        z = module.encoder(batch)
        task = 1e-3 * torch.nn.functional.mse_loss(module.decoder(z), batch)
        both = task + 0.3 * spec_align_loss(z, reference[192:256]) + 0.7 * spec_align_loss(z, frozen(batch))
    assert module.backward_losses[-1] == pytest.approx(float(both), rel=1e-5)
    assert {"spec_align/table/spec_diff", "spec_align/module/spec_diff"} <= set(trainer.callback_metrics)
    trainer = make_trainer(tmp_path, callbacks=[by_table, by_module])  # a second fit installs and removes again
    trainer.fit(module, loader(x, 64))
    assert "training_step" not in vars(module)
    clash = [SPECAlign(reference=reference, index=1), SPECAlign(reference=frozen, weight=0.5)]
    with pytest.raises(ValueError, match="log_prefix='spec_align/'; give each its own"):
        make_trainer(tmp_path, callbacks=clash).fit(ToyModule(lr=0.0), loader(x, 64))


def test_the_users_training_step_is_restored_at_teardown_and_after_a_failed_fit(tmp_path):
    """SPECAlign wraps `training_step` while it fits (no public hook can add to the loss, see its docstring): the
    user's step comes back when the fit ends, when it raises (Lightning then calls `on_exception` but no
    `teardown`), and when it was an instance attribute."""
    x, _, reference = toy_data(n=128)
    align = SPECAlign(reference=reference, weight=0.3, index=1)
    module = ToyModule(lr=0.0)

    class Fails(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            assert "training_step" in vars(pl_module)  # wrapped during the fit
            raise RuntimeError("the fit fails")

    with pytest.raises(RuntimeError, match="the fit fails"):
        make_trainer(tmp_path, callbacks=[align, Fails()]).fit(module, loader(x, 64))
    assert align.penalised_steps == 1 and not {"training_step", "_lightning_spectral_penalties"} & set(vars(module))
    make_trainer(tmp_path).fit(module, loader(x, 64))  # a later fit without SPECAlign backpropagates the task alone
    with torch.no_grad():
        task = [1e-3 * float(torch.nn.functional.mse_loss(module.decoder(module.encoder(b)), b)) for b in x.split(64)]
    assert module.backward_losses[-2:] == pytest.approx(task, rel=1e-6)

    def own_step(batch, batch_idx):  # a step set on the instance: the wrapper calls it, teardown puts it back
        return ToyModule.training_step(module, batch, batch_idx)

    module.training_step = own_step
    make_trainer(tmp_path, callbacks=[align]).fit(module, loader(x, 64))
    assert vars(module)["training_step"] is own_step and align.penalised_steps == 3


def test_student_function_and_dict_output(tmp_path):
    x, _, reference = toy_data(n=128)

    class DictModule(ToyModule):
        def training_step(self, batch, batch_idx):
            return {"loss": super().training_step(batch, batch_idx), "other": 1}

    align = SPECAlign(
        reference=lambda batch: reference[batch[1].cpu()],
        weight=0.5,
        student=lambda module, batch: module.encoder(batch[0]),
    )
    module = DictModule(lr=0.0)
    make_trainer(tmp_path, callbacks=[align]).fit(module, loader(x, 64))
    with torch.no_grad():
        penalty = 0.5 * spec_align_loss(module.encoder(x[:64]), reference[:64])
    assert module.backward_losses[0] > float(penalty) > 0


def test_bf16_mixed_precision(tmp_path):
    x, labels, reference = toy_data()
    module = ToyModule()
    before = measure(module, x, labels, reference)
    align = SPECAlign(reference=reference, weight=1.0, index=1)
    make_trainer(tmp_path, max_epochs=10, callbacks=[align], precision="bf16-mixed").fit(
        module, loader(x, shuffle=True)
    )
    after = measure(module, x, labels, reference)
    assert after[0] < 0.6 * before[0]


def test_checkpoint_round_trip_of_callback_state(tmp_path):
    x, _, reference = toy_data(n=256)
    align = SPECAlign(reference=reference, weight=1.0, index=1)
    trainer = make_trainer(tmp_path, callbacks=[align])
    trainer.fit(ToyModule(), loader(x, 64))
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    resumed = SPECAlign(reference=reference, weight=1.0, index=1)
    make_trainer(tmp_path, max_epochs=2, callbacks=[resumed]).fit(
        ToyModule(), loader(x, 64), ckpt_path=tmp_path / "run.ckpt"
    )
    assert resumed.penalised_steps == 8  # 4 before the checkpoint, 4 after


def test_bad_configuration_raises(tmp_path):
    reference = torch.randn(10, 4)
    with pytest.raises(ValueError, match="index"):
        SPECAlign(reference=reference)
    with pytest.raises(ValueError, match="weight"):
        SPECAlign(reference=reference, index=1, weight=-1.0)
    with pytest.raises(ValueError, match="sigma_student"):
        SPECAlign(reference=reference, index=1, kernel="gaussian")
    with pytest.raises(ValueError, match="reference"):
        SPECAlign(reference="dinov2")
    x, _, _ = toy_data(n=64)
    with pytest.raises(ValueError, match="no submodule 'backbone'"):
        make_trainer(tmp_path, callbacks=[SPECAlign(reference=torch.randn(64, 4), index=1, student="backbone")]).fit(
            ToyModule(), loader(x, 32)
        )
    with pytest.raises(IndexError, match="outside"):
        make_trainer(tmp_path, callbacks=[SPECAlign(reference=torch.randn(10, 4), index=1)]).fit(
            ToyModule(), loader(x, 32)
        )


class ShardedModule(ToyModule):
    """Rank r trains on samples r, r + 2, ... in order (Lightning's own distributed sampler would shuffle)."""

    def __init__(self, x):
        super().__init__()
        self.x = x

    def train_dataloader(self):
        dataset = TensorDataset(self.x, torch.arange(len(self.x)))
        sampler = torch.utils.data.DistributedSampler(dataset, shuffle=False)
        return DataLoader(dataset, batch_size=64, sampler=sampler)


def test_ddp_training_matches_single_process_on_the_global_batch(tmp_path):
    """2 processes x batch 64 (gathered) = 1 process x batch 128: same samples per step, same SPEC penalty,
    same averaged gradients, hence the same weights after training."""
    x, _, reference = toy_data(n=512)
    single, ddp = ToyModule(), ShardedModule(x)
    make_trainer(tmp_path, max_epochs=2, callbacks=[SPECAlign(reference=reference, weight=1.0, index=1)]).fit(
        single, loader(x, 128)
    )
    make_trainer(
        tmp_path,
        max_epochs=2,
        devices=2,
        strategy="ddp_spawn",
        use_distributed_sampler=False,
        callbacks=[SPECAlign(reference=reference, weight=1.0, index=1)],
    ).fit(ddp)
    for p_single, p_ddp in zip(single.parameters(), ddp.parameters(), strict=True):
        assert torch.allclose(p_single, p_ddp, atol=1e-4), (p_single - p_ddp).abs().max()
    untrained = ToyModule().encoder.weight
    assert (single.encoder.weight - untrained).abs().max() > 0.1  # it did train: the match is not trivial


def test_open_clip_and_timm_towers_as_frozen_references(tmp_path):
    """Real encoders as the reference module: an open_clip image tower and a timm ViT (random init)."""
    import open_clip
    import timm

    images = torch.randn(64, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    clip_visual = open_clip.create_model(
        "ViT-B-32",
        pretrained=None,
        embed_dim=32,
        vision_cfg=dict(image_size=32, layers=1, width=64, patch_size=8, head_width=32),
        text_cfg=dict(context_length=8, vocab_size=100, width=32, heads=2, layers=1),
    ).visual
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=32, patch_size=8)

    class ImageModule(ToyModule):
        def __init__(self):
            super().__init__(lr=0.0)
            self.encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 8))

        def training_step(self, batch, batch_idx):
            return 1e-3 * self.encoder(batch[0]).square().mean()

    for reference in (clip_visual, vit):
        align = SPECAlign(reference=reference, weight=1.0)
        module = ImageModule()
        make_trainer(tmp_path, callbacks=[align]).fit(module, loader(images, 32))
        with torch.no_grad():
            z = module.encoder(images[:32])
            expected = 1e-3 * z.square().mean() + spec_align_loss(z, reference(images[:32]))
        assert module.backward_losses[0] == pytest.approx(float(expected), rel=1e-5)
        assert not any(p.requires_grad for p in reference.parameters()) and not reference.training


@pytest.mark.parametrize("last_rows", [1, 3])
def test_whole_epochs_with_a_small_last_batch(tmp_path, last_rows):
    """Every batch of two whole epochs is penalised, the last one holding 1 or 3 rows (fewer than the solver's
    Krylov space): the loss stays finite and each step logs its SPEC-diff."""
    x, _, reference = toy_data(n=64 + last_rows)
    module = ToyModule()
    align = SPECAlign(reference=reference, weight=0.5, student="encoder", index=1)
    trainer = make_trainer(tmp_path, callbacks=[align], max_epochs=2)
    trainer.fit(module, loader(x, batch_size=16))
    assert trainer.num_training_batches == 5 and align.penalised_steps == 10
    assert align.solver.small_batches == 2 and math.isfinite(align.last_spec_diff)
    assert all(math.isfinite(loss) for loss in module.backward_losses)
