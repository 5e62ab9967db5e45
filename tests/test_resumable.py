"""ResumableDataLoader: a run resumed from a mid-epoch checkpoint trains on exactly the batches an uninterrupted run
trains on (lightning_spectral/data/resumable.py)."""

import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import TensorDataset

from lightning_spectral.data import EpochShuffle, LoaderPosition, ResumableDataLoader, ResumesMidEpoch

N, BATCH = 22, 4  # 6 batches an epoch, the last of 2 rows


def ids(batches):
    return [batch.tolist() for batch in batches]


def test_a_loader_resumes_inside_the_saved_epoch_only():
    sampler = EpochShuffle(N, seed=0)
    loader = ResumableDataLoader(list(range(N)), batch_size=BATCH, sampler=sampler)
    sampler.set_epoch(2)
    whole = ids(loader)
    assert loader.state_dict() == {"epoch": 2, "batches": 6}
    passes = iter(loader)
    first = ids([next(passes) for _ in range(4)])
    state = loader.state_dict()
    assert state == {"epoch": 2, "batches": 4} and first == whole[:4]

    again = ResumableDataLoader(list(range(N)), batch_size=BATCH, sampler=EpochShuffle(N, seed=0))
    again.load_state_dict(state)
    again.sampler.set_epoch(2)
    assert ids(again) == whole[4:] and len(again) == 6  # the rest of epoch 2; the length stays an epoch's
    assert again.state_dict() == {"epoch": 2, "batches": 6}
    assert ids(again) == whole  # the saved position is used once

    other = ResumableDataLoader(list(range(N)), batch_size=BATCH, sampler=EpochShuffle(N, seed=0))
    other.load_state_dict(state)
    other.sampler.set_epoch(3)  # a checkpoint of an earlier epoch (its end): the new epoch starts at batch 0
    assert len(ids(other)) == 6


def test_each_ddp_rank_resumes_its_own_shard():
    """Under DDP Lightning rebuilds the loader with a DistributedSampler (sharing the `position`); every rank
    resumes its own shard of the epoch at the saved batch."""
    from torch.utils.data import DistributedSampler

    for rank in (0, 1):
        def loader(position=None):
            sampler = DistributedSampler(list(range(N)), num_replicas=2, rank=rank, shuffle=True, seed=3)
            sampler.set_epoch(5)
            return ResumableDataLoader(list(range(N)), batch_size=BATCH, sampler=sampler, position=position)

        whole = ids(loader())
        first = loader()
        batches = iter(first)
        _ = next(batches), next(batches)
        position = LoaderPosition()
        position.load_state_dict(first.state_dict())
        assert first.state_dict() == {"epoch": 5, "batches": 2}
        rebuilt = loader(position)  # what Lightning's re-instantiation passes along
        assert ids(rebuilt) == whole[2:] and len(whole) == 3


def test_skipped_batches_are_not_loaded():
    loaded = []

    class Recording(torch.utils.data.Dataset):
        def __len__(self):
            return N

        def __getitem__(self, i):
            loaded.append(i)
            return i

    loader = ResumableDataLoader(Recording(), batch_size=BATCH)
    loader.load_state_dict({"epoch": None, "batches": 5})
    assert ids(loader) == [[20, 21]] and loaded == [20, 21]


@pytest.mark.parametrize(
    "state",
    [{"batches": 3}, {"epoch": "1", "batches": 3}, {"epoch": 1, "batches": -1}, [1, 3], {"epoch": 1, "batches": 1.5}],
)
def test_a_foreign_loader_state_is_a_clear_error(state):
    with pytest.raises(ValueError, match="loader state must be"):
        ResumableDataLoader(list(range(N)), batch_size=BATCH).load_state_dict(state)
    with pytest.raises(ValueError, match="datamodule"):
        LoaderPosition().load_state_dict(state)


# ---------------------------------------------------------------------------------------------------------------
# inside Trainer.fit
# ---------------------------------------------------------------------------------------------------------------


class Data(ResumesMidEpoch, L.LightningDataModule):
    def train_dataloader(self):
        data = TensorDataset(torch.arange(N), torch.linspace(-1, 1, N))
        return ResumableDataLoader(data, batch_size=BATCH, sampler=EpochShuffle(N, seed=0),
                                   position=self.train_position)


class Module(L.LightningModule):
    """Linear regression that records the sample ids of every batch it trains on; its learning rate follows
    ``trainer.estimated_stepping_batches`` (which makes Lightning build the loader before the checkpoint's loop
    state is restored)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen = []

    def training_step(self, batch, batch_idx):
        index, x = batch
        self.seen.append(index.tolist())
        loss = ((self.weight * x - 2 * x + 0.5) ** 2).mean()
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=len(index))
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        total = self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / (total + 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class Crash(RuntimeError):
    pass


class CrashAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise Crash


def fit(folder, ckpt_path=None, crash_at=None, every=None):
    module = Module()
    callbacks = [] if crash_at is None else [CrashAt(crash_at)]
    if every is not None:
        callbacks.append(ModelCheckpoint(dirpath=folder, every_n_train_steps=every, save_top_k=-1, filename="{step}"))
    trainer = L.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=every is not None, callbacks=callbacks, num_sanity_val_steps=0)
    try:
        trainer.fit(module, datamodule=Data(), ckpt_path=ckpt_path)
    except Crash:
        pass
    return module, trainer


@pytest.mark.parametrize("crash_at", [4, 6, 11])  # inside epoch 0, at its end (its last batch), inside epoch 1
def test_a_fit_resumed_mid_epoch_trains_on_the_batches_of_an_uninterrupted_fit(tmp_path, recwarn, crash_at):
    whole, whole_trainer = fit(tmp_path / "whole")
    assert len(whole.seen) == 18 and [len(b) for b in whole.seen[:6]] == [4] * 5 + [2]
    interrupted, _ = fit(tmp_path / "first", crash_at=crash_at, every=crash_at)
    assert interrupted.seen == whole.seen[:crash_at]
    resumed, trainer = fit(tmp_path / "resumed", ckpt_path=tmp_path / "first" / f"step={crash_at}.ckpt")
    assert resumed.seen == whole.seen[crash_at:]  # the rest of the interrupted epoch, then whole epochs
    assert float(resumed.weight) == float(whole.weight)  # same batches and learning rates: the same weights
    assert not [w for w in recwarn if "not resumable" in str(w.message)]
    assert math.isfinite(float(trainer.callback_metrics["train/loss"]))
