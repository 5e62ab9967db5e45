"""StderrProgressBar: progress on stderr (bars on a terminal, quiet lines otherwise); stdout keeps the results."""

import re

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import StderrProgressBar
from lightning_spectral.callbacks.progress import duration


class Slow(L.LightningModule):
    """A regression whose steps take ``pause`` seconds, so that a run lasts long enough for periodic lines."""

    def __init__(self, pause=0.0):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.pause = pause

    def training_step(self, batch, batch_idx):
        import time

        time.sleep(self.pause)
        (x,) = batch
        loss = ((self.weight - x) ** 2).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(bar, epochs=3, pause=0.0):
    loader = DataLoader(TensorDataset(torch.linspace(0, 1, 10)), batch_size=4)  # 3 batches, the last of 2
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_model_summary=False,
                        callbacks=[bar])
    trainer.fit(Slow(pause), loader)
    return trainer


def test_without_a_terminal_progress_is_a_few_lines_on_stderr(capsys):
    fit(StderrProgressBar(every_s=30), epochs=4)
    out, err = capsys.readouterr()
    assert out == "" and "\r" not in err
    lines = [line for line in err.splitlines() if line]
    assert lines[0].startswith("training: 4 epochs of 3 batches")
    assert re.match(r"epoch 0 \(1 of 4\) done, \d+ s elapsed, about \d+ s left: train/loss \d", lines[1]), lines
    assert lines[2].startswith("epoch 3 (4 of 4) done") and lines[3].startswith("training done in")
    assert len(lines) == 4  # quiet: epochs 2 and 3 took less than every_s


def test_long_epochs_report_inside_the_epoch(capsys):
    fit(StderrProgressBar(every_s=0.05), epochs=2, pause=0.06)
    _, err = capsys.readouterr()
    inside = [line for line in err.splitlines() if re.match(r"epoch \d \(\d of 2\): \d/3 batches, ", line)]
    assert inside and "\r" not in err


def test_on_a_terminal_the_bars_draw_on_stderr(capsys):
    fit(StderrProgressBar(bars=True), epochs=1)
    out, err = capsys.readouterr()
    assert out == "" and "\r" in err and "Epoch 0" in err


@pytest.mark.parametrize("kwargs, match", [({"every_s": 0}, "every_s"), ({"bars": "yes"}, "bars")])
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StderrProgressBar(**kwargs)


def test_durations_read_naturally():
    assert [duration(s) for s in (0.4, 59, 99, 100, 750, 7200)] == ["0 s", "59 s", "99 s", "1.7 min", "12.5 min",
                                                                     "2.0 h"]
