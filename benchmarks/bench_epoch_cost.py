"""What a validation epoch of ``EmbeddingMetrics`` costs next to torchmetrics' KID + FID on the same samples.

    python benchmarks/bench_epoch_cost.py [--n 2000] [--data fashion|digits] [--no-pictures] [--r R]

The setting: ``n`` validation images (Fashion-MNIST's training images ``n .. 2n``, or the shipped 8 x 8 digits
enlarged to 28 x 28 with ``--data digits``) embedded as their 784 raw pixels (the module's ``encoder`` is
``nn.Flatten``), against a fixed reference of the ``n`` images before them (``reference_features``).

- Baseline, torchmetrics: ``KernelInceptionDistance`` and ``FrechetInceptionDistance`` at their defaults (KID: 100
  subsets of 1,000) with ``feature=`` an identity extractor on the same 784-d pixels (``num_features = 784``, so
  nothing is embedded twice): ``update`` with the reference (real) and the samples (fake) in batches, then
  ``compute()`` of each. Timed inside the same process, before and after the callback's run.
- ``EmbeddingMetrics`` at its defaults with ``FKEAVendi``, ``FINCNovelty`` and ``FastMMD`` at their defaults
  (``sigma="auto"``; 2r = 4096, 4096 and 2048 features; ``--r`` sets every ``n_frequencies``), galleries on
  (``images`` = the dataset, 4 modes x 8 images), inside ``Trainer.validate`` with a TensorBoard and a CSV logger.
  The callback's hooks are timed (the reference fed at the epoch's start, the batches' updates, the epoch end); the
  epoch end is split by ``report``'s
  own timings into the metrics (``summary()``, logging) and the pictures (galleries: the modes' eigenvectors, the
  second pass, the image grids and their PNGs).

Printed: each part in seconds, the callback's epoch over KID + FID, and the pictures' share of the callback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchmetrics.image.fid import FrechetInceptionDistance
from torchmetrics.image.kid import KernelInceptionDistance

from lightning_spectral.callbacks import EmbeddingMetrics
from lightning_spectral.data import load_digit_images
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi

sys.path.insert(0, str(Path(__file__).resolve().parent))
from idx_files import read_idx  # noqa: E402


class Identity(nn.Module):
    """torchmetrics' extractor for features given directly: (N, 1, 28, 28) images -> their (N, 784) pixels."""

    num_features = 784

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1).double()


class Images(Dataset):
    """Items ``{"image", "label", "index"}``; ``dataset[i]`` for a gallery's lookup is ``(image, label)``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, offset: int = 0) -> None:
        self.images, self.labels, self.offset = images, labels, offset

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> Any:
        return {"image": self.images[i], "label": self.labels[i], "index": i}

    def image_of(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i], self.labels[i]


class Flat(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Flatten()

    def validation_step(self, batch: dict, _: int) -> None:
        self.encoder(batch["image"])



def load(data: str, n: int, root: str) -> tuple[torch.Tensor, torch.Tensor]:
    """2n images (2n, 1, 28, 28) in [0, 1] and their classes: the first n the reference, the rest the samples."""
    if data == "fashion":
        images = torch.tensor(read_idx(Path(root) / "train-images-idx3-ubyte.gz")[: 2 * n].copy()).float() / 255
        labels = torch.tensor(read_idx(Path(root) / "train-labels-idx1-ubyte.gz")[: 2 * n].astype(np.int64))
        return images.unsqueeze(1), labels
    images, labels = load_digit_images()
    big = torch.nn.functional.interpolate(images, size=(28, 28), mode="bilinear")
    pick = torch.randint(len(big), (2 * n,), generator=torch.Generator().manual_seed(0))
    return big[pick], labels[pick]


def torchmetrics_cost(reference: torch.Tensor, samples: torch.Tensor, batch: int) -> float:
    start = time.perf_counter()
    kid = KernelInceptionDistance(feature=Identity(), subset_size=min(1000, len(samples)))  # the default at n >= 1000
    fid = FrechetInceptionDistance(feature=Identity())
    for metric in (kid, fid):
        for i in range(0, len(reference), batch):
            metric.update(reference[i : i + batch], real=True)
        for i in range(0, len(samples), batch):
            metric.update(samples[i : i + batch], real=False)
    kid.compute(), fid.compute()
    return time.perf_counter() - start


def timed_hooks(callback: EmbeddingMetrics, times: dict[str, float]) -> None:
    """Wrap the callback's hooks so that each adds its seconds to ``times``; the epoch end also keeps ``report``'s
    split (the metrics vs the pictures)."""
    import lightning_spectral.callbacks.embedding_metrics as module

    for hook, part in (
        ("on_validation_epoch_start", "reference"),
        ("on_validation_batch_end", "update"),
        ("on_validation_epoch_end", "epoch end"),
    ):
        original = getattr(callback, hook)

        def wrapper(*args: Any, _original: Any = original, _part: str = part, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = _original(*args, **kwargs)
            times[_part] = times.get(_part, 0.0) + time.perf_counter() - start
            return out

        setattr(callback, hook, wrapper)
    report = module.report

    def timed_report(*args: Any, **kwargs: Any) -> Any:
        return report(*args, **dict(kwargs, timings=times))

    module.report = timed_report  # type: ignore[assignment]


def callback_cost(
    images: torch.Tensor, labels: torch.Tensor, n: int, batch: int, pictures: bool, r: int = 0,
    noise_draws: Optional[int] = None,
) -> dict[str, float]:
    reference = images[:n].flatten(1)
    dataset = Images(images[n:], labels[n:])
    sizes = {"n_frequencies": r} if r else {}  # the metrics' defaults unless --r
    callback = EmbeddingMetrics(
        {
            "vendi": FKEAVendi("auto", **sizes, **({} if noise_draws is None else {"noise_draws": noise_draws})),
            "finc": FINCNovelty("auto", **sizes),
            "mmd": FastMMD("auto", **sizes),
        },
        embedding="encoder",
        reference_features=reference,
        index="index",
        images=dataset.image_of if pictures else None,
    )
    times: dict[str, float] = {}
    timed_hooks(callback, times)
    with tempfile.TemporaryDirectory() as folder:
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            logger=[TensorBoardLogger(folder), CSVLogger(folder)],
            callbacks=[callback],
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        start = time.perf_counter()
        trainer.validate(Flat(), DataLoader(dataset, batch_size=batch), verbose=False)
        times["validate"] = time.perf_counter() - start
    times["callback"] = times["reference"] + times["update"] + times["epoch end"]
    times["metrics"] = times["callback"] - times.get("pictures", 0.0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--data", choices=["fashion", "digits"], default="fashion")
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--no-pictures", action="store_true")
    parser.add_argument("--r", type=int, default=0, help="n_frequencies of every metric (0: their defaults)")
    parser.add_argument("--noise-draws", type=int, default=None,
                        help="FKEAVendi's noise_draws (default: its default, 2; 0: no standard error)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    images, labels = load(args.data, args.n, args.fashion)
    reference, samples = images[: args.n], images[args.n :]
    before = torchmetrics_cost(reference, samples, args.batch)
    times = callback_cost(images, labels, args.n, args.batch, not args.no_pictures, args.r, args.noise_draws)
    after = torchmetrics_cost(reference, samples, args.batch)
    baseline = (before + after) / 2
    print(f"{args.data}: {args.n} samples + {args.n} reference, 784-d, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"torchmetrics KID + FID: {before:.2f} s before, {after:.2f} s after (mean {baseline:.2f} s)")
    print("| reference s | updates s | summary s | pictures s | callback s | / (KID + FID) | pictures share |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {times['reference']:.2f} | {times['update']:.2f} | {times.get('compute', 0.0):.2f} | "
          f"{times.get('pictures', 0.0):.2f} | {times['callback']:.2f} | {times['callback'] / baseline:.2f}x | "
          f"{100 * times.get('pictures', 0.0) / times['callback']:.0f} % |")


if __name__ == "__main__":
    main()
