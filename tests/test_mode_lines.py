"""The lines a person reads about modes, from a real fit: GeneratedSamples against a reference with class labels, a
generator that never draws the digit 7; the missing mode's line names class 7, its purity and its share of the
reference, in a CSV logger's text file and in TensorBoard's event file, and its share, class and purity as scalars."""

import glob
import os

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import GeneratedSamples
from lightning_spectral.data import load_digit_images
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FINCNovelty
from tests.conftest import LinearModule

IMAGES, LABELS = load_digit_images()
SHARE_OF_SEVENS = float((LABELS == 7).double().mean())


def without_sevens(module, n, generator):
    """Real digits of every class but 7, drawn with the callback's generator."""
    pool = (LABELS != 7).nonzero().flatten()
    return IMAGES[pool[torch.randint(len(pool), (n,), generator=generator)]]


def reference():
    return DataLoader([{"image": image, "label": label} for image, label in zip(IMAGES, LABELS, strict=True)],
                      batch_size=300)


def test_a_fit_with_labels_writes_the_missing_modes_line_to_csv_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    callback = GeneratedSamples(
        {"finc": FINCNovelty(sigma=3.0, n_frequencies=128, reset_real_features=False)},
        feature=PixelImageFeature(8), references={"finc": reference()}, sample=without_sevens, n_samples=3000,
        sample_batch_size=1000, label_key="label", gallery_modes=2, gallery_per_mode=10, max_gallery_images=1797,
        log_detail=True,  # the rows' class, purity and share as scalars too
    )
    csv, board = CSVLogger(tmp_path / "csv"), TensorBoardLogger(tmp_path / "tb")
    trainer = L.Trainer(
        callbacks=[callback], logger=[csv, board], accelerator="cpu", devices=1, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
    )
    trainer.validate(LinearModule(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=8))

    logged = {name: float(value) for name, value in trainer.callback_metrics.items()}
    assert logged["gen/finc/detail/missing_class/0"] == 7.0
    assert logged["gen/finc/detail/missing_purity/0"] >= 0.8
    share = logged["gen/finc/detail/missing_share/0"]
    assert 0.5 * SHARE_OF_SEVENS <= share <= 1.5 * SHARE_OF_SEVENS  # a class of 10 % reads about 10 %

    purity = round(logged["gen/finc/detail/missing_purity/0"] * 10)
    line = f"missing region 1: class 7 ({purity} of its top 10), about {100 * share:.0f} % of the reference"
    text_file = os.path.join(csv.log_dir, "gen_finc_missing.txt")
    with open(text_file, encoding="utf-8") as file:
        written = file.read()
    assert line in written, written
    assert written.startswith("[step 0]\n")

    events = EventAccumulator(board.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    texts = [event.tensor_proto.string_val[0].decode() for event in events.Tensors("gen/finc/missing/text_summary")]
    assert len(texts) == 1 and line in texts[0], texts
    assert glob.glob(os.path.join(csv.log_dir, "gen_finc_missing-step0.png"))  # the picture went too
    gallery = callback.last_galleries["finc/missing"]
    assert gallery.labels[0].startswith(line)
