"""Does SPEC-alignment to a reference reduce forgetting? A pretrained encoder fine-tuned on half the classes.

    python benchmarks/bench_forgetting.py                          # Fashion-MNIST, seeds 0 1 2
    python benchmarks/bench_forgetting.py --data digits --seeds 0 1 2 3 4

The tiny alignment config starts from random weights, so it has nothing to forget. Here the encoder is
*pretrained*: an MLP (pixels -> 256 -> 32, ReLU) with a linear head, trained on all ten classes; then a new
5-way head is fine-tuned (with the encoder, SGD with weight decay) on classes 0-4 only, under three settings:

- ``none``: the fine-tuning loss alone (SPECAlign weight 0);
- ``pixels``: + ``weight`` x SPEC-diff(encoder, raw pixels) (SPECAlign, cosine kernel), the recipe's kind of
  weight-free reference;
- ``start``: + ``weight`` x SPEC-diff(encoder, the frozen pretrained encoder): alignment to the start itself.

On a probe of held-out images of all ten classes (never trained on), a DriftMonitor logs SPEC-diff between the
start's embedding and the fine-tuned one, and this script measures retention: the leave-one-out 10-nearest-neighbour
accuracy of the probe's classes 5-9 (the forgotten half) in the encoder's embedding, and of classes 0-4 (the kept
half), each against the pretrained encoder's; and the share of the 3 most-lost clusters' top-20 members
(``DriftMonitor.drifted``) that are classes 5-9; and the top lost cluster's purity (the share of its top 20 in its
commonest class) and whether that class is a forgotten one. ``--encoders mlp cnn`` repeats it with a small CNN
(`encoder_of`). Prints one row per run and the mean and spread per encoder and setting; writes every row to
``--out`` (JSON).

Fashion-MNIST is read from the Debian package's files (``apt-get install dataset-fashion-mnist``), never from the
repository; ``--data digits`` uses scikit-learn's digits (in the repository's tests, so not held out).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import DriftMonitor, SPECAlign

sys.path.insert(0, str(Path(__file__).resolve().parent))
from idx_files import read_idx  # noqa: E402

SETTINGS = ("none", "pixels", "start")



def load(name: str, root: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train pixels, train labels, probe pixels, probe labels); pixels in [0, 1], flattened."""
    if name == "fashion":
        folder = Path(root)
        x = torch.tensor(read_idx(folder / "train-images-idx3-ubyte.gz").reshape(-1, 784) / 255.0, dtype=torch.float32)
        y = torch.tensor(read_idx(folder / "train-labels-idx1-ubyte.gz").astype(np.int64))
        xt = torch.tensor(read_idx(folder / "t10k-images-idx3-ubyte.gz").reshape(-1, 784) / 255.0, dtype=torch.float32)
        yt = torch.tensor(read_idx(folder / "t10k-labels-idx1-ubyte.gz").astype(np.int64))
        return x[:12000], y[:12000], xt[:2000], yt[:2000]
    from sklearn.datasets import load_digits

    data = load_digits()
    x, y = torch.tensor(data.data / 16.0, dtype=torch.float32), torch.tensor(data.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    return x[order[500:]], y[order[500:]], x[order[:500]], y[order[:500]]


def encoder_of(kind: str, inputs: int) -> nn.Module:
    """``mlp``: pixels -> 256 -> 32; ``cnn``: two 3 x 3 convolutions (16, 32 channels, ReLU, 2 x 2 max-pooling
    after the first) averaged over the image, then a linear map to 32."""
    if kind == "mlp":
        return nn.Sequential(nn.Linear(inputs, 256), nn.ReLU(), nn.Linear(256, 32))
    side = int(round(inputs**0.5))
    return nn.Sequential(
        nn.Unflatten(1, (1, side, side)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 32),
    )


class Classifier(L.LightningModule):
    """``encoder`` (`encoder_of`) and a linear ``head``; batches ``(pixels, labels)``."""

    def __init__(self, inputs: int, classes: int, lr: float, weight_decay: float, encoder: str = "mlp") -> None:
        super().__init__()
        self.encoder = encoder_of(encoder, inputs)
        self.head = nn.Linear(32, classes)
        self.lr, self.weight_decay = lr, weight_decay

    def training_step(self, batch, _):
        return nn.functional.cross_entropy(self.head(self.encoder(batch[0])), batch[1])

    def validation_step(self, batch, _):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9, weight_decay=self.weight_decay)


def trainer(root: str, callbacks: list, epochs: int) -> L.Trainer:
    return L.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks, default_root_dir=root,
        num_sanity_val_steps=0,
    )


@torch.no_grad()
def knn_hits(z: torch.Tensor, y: torch.Tensor, k: int = 10) -> torch.Tensor:
    """Whether each row of ``z`` (N, d) is classed right by its ``k`` nearest other rows (cosine similarity, majority
    vote), (N,) bool: the leave-one-out k-nearest-neighbour test."""
    z = nn.functional.normalize(z.double(), dim=1)
    similarity = z @ z.T
    similarity.fill_diagonal_(-float("inf"))
    neighbours = similarity.topk(k, dim=1).indices
    votes = nn.functional.one_hot(y[neighbours], int(y.max()) + 1).sum(1)
    return votes.argmax(1) == y


def knn_accuracy(z: torch.Tensor, y: torch.Tensor, k: int = 10) -> float:
    """Leave-one-out k-nearest-neighbour accuracy of the rows ``z`` (N, d) (`knn_hits`)."""
    return float(knn_hits(z, y, k).double().mean())


@torch.no_grad()
def retention(encoder: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    z = encoder(x)
    forgotten, kept = y >= 5, y < 5
    return {"knn_5_9": knn_accuracy(z[forgotten], y[forgotten]), "knn_0_4": knn_accuracy(z[kept], y[kept])}


def pretrained(x: torch.Tensor, y: torch.Tensor, seed: int, encoder: str, args, root: str) -> Classifier:
    """A ``Classifier`` with an ``encoder`` (`encoder_of`), seeded with ``seed``, trained on all ten classes."""
    L.seed_everything(seed, verbose=False)
    module = Classifier(x.shape[1], 10, lr=args.lr, weight_decay=0.0, encoder=encoder)
    trainer(root, [], args.pretrain_epochs).fit(module, DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True))
    return module


def fine_tune(module: Classifier, x: torch.Tensor, y: torch.Tensor, kept: torch.Tensor, args, root: str,
              callbacks: list = (), val: DataLoader | None = None) -> float:
    """A new 5-way head, fine-tuned with the encoder on the ``kept`` rows (labels ``y % 5``), with weight decay;
    returns the seconds it took."""
    module.head, module.weight_decay = nn.Linear(32, 5), args.weight_decay
    began = time.perf_counter()
    trainer(root, list(callbacks), args.finetune_epochs).fit(
        module, DataLoader(TensorDataset(x[kept], y[kept] % 5), batch_size=128, shuffle=True), val)
    return time.perf_counter() - began


def run(setting: str, seed: int, data, args, encoder: str = "mlp") -> dict:
    x, y, probe_x, probe_y = data
    with tempfile.TemporaryDirectory() as root:
        module = pretrained(x, y, seed, encoder, args, root)
        start = retention(module.encoder, probe_x, probe_y)
        frozen_start = copy.deepcopy(module.encoder).requires_grad_(False).eval()
        monitor = DriftMonitor(probe_x, embedding="encoder", kernel=args.kernel)
        callbacks: list = [monitor]
        if setting != "none":
            reference = nn.Flatten() if setting == "pixels" else frozen_start
            callbacks.append(SPECAlign(reference, weight=args.weight, student="encoder", student_input=0,
                                       reference_input=0, seed=seed))
        seconds = fine_tune(module, x, y, y < 5, args, root, callbacks,
                            DataLoader(TensorDataset(probe_x[:128], probe_y[:128]), batch_size=128))
    now = retention(module.encoder, probe_x, probe_y)
    clusters = monitor.drifted(3, per_cluster=20)
    members = torch.cat([ids for ids, _ in clusters]) if clusters else torch.zeros(0, dtype=torch.long)
    lost_in_5_9 = float((probe_y[members] >= 5).double().mean()) if len(members) else float("nan")
    # the top lost cluster's purity: the share of its top-20 members in its commonest class, and whether that class
    # is a forgotten one (5-9)
    top = probe_y[clusters[0][0]] if clusters else torch.zeros(0, dtype=torch.long)
    commonest = int(top.mode().values) if len(top) else -1
    return {
        "encoder": encoder, "setting": setting, "seed": seed,
        "spec_diff": monitor.last_values.get("spec/spec_diff", float("nan")),
        "knn_5_9_start": start["knn_5_9"], "knn_5_9": now["knn_5_9"],
        "knn_0_4_start": start["knn_0_4"], "knn_0_4": now["knn_0_4"],
        "lost_members_in_5_9": lost_in_5_9,
        "top_purity": float((top == commonest).double().mean()) if len(top) else float("nan"),
        "top_class_forgotten": float(commonest >= 5), "top_class": float(commonest), "finetune_s": seconds,
    }


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The forgetting case's data and training settings (shared with ``bench_drift_kernels.py``)."""
    parser.add_argument("--data", choices=["fashion", "digits"], default="fashion")
    parser.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--pretrain-epochs", type=int, default=5)
    parser.add_argument("--finetune-epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--weight-decay", type=float, default=0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_training_arguments(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--encoders", nargs="+", choices=("mlp", "cnn"), default=["mlp"])
    parser.add_argument("--weight", type=float, default=1.0, help="SPECAlign's weight in the aligned settings")
    parser.add_argument("--kernel", choices=("gaussian", "cosine"), default="gaussian",
                        help="DriftMonitor's kernel (gaussian: its default, sigma='auto')")
    parser.add_argument("--out", default="forgetting.json")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    data = load(args.data, args.fashion)
    rows = []
    keys = ("spec_diff", "knn_5_9_start", "knn_5_9", "knn_0_4_start", "knn_0_4", "lost_members_in_5_9", "top_purity",
            "top_class_forgotten", "top_class", "finetune_s")
    print("encoder setting seed " + " ".join(keys), flush=True)
    for encoder in args.encoders:
        for seed in args.seeds:
            for setting in args.settings:
                row = run(setting, seed, data, args, encoder)
                rows.append(row)
                print(f"{encoder} {setting} {seed} " + " ".join(f"{row[k]:.4f}" for k in keys), flush=True)
    print("\nmean (spread = standard deviation over seeds)")
    for encoder in args.encoders:
        for setting in args.settings:
            chosen = [r for r in rows if r["setting"] == setting and r["encoder"] == encoder]
            cells = []
            for key in keys:
                values = [r[key] for r in chosen]
                spread = statistics.stdev(values) if len(values) > 1 else float("nan")
                cells.append(f"{key}={statistics.mean(values):.4f}+-{spread:.4f}")
            print(encoder, setting, " ".join(cells))
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
