"""Issue 12 benchmark: the per-validation-epoch cost of GeneratedSamples at 10,000 generated samples.

    python benchmarks/bench_generated.py [--device cpu] [--n-samples 10000] [--frequencies 256 512 1024]

The callback runs inside ``Trainer.validate`` on a DigitsVAE (8x8 digits) with FKEAVendi (alpha 1 and 2),
FINCNovelty against the 1,438 training digits and FastMMD against the 359 held-out digits, all at one ``r``.
Each setting is validated twice: the first pass also embeds the references (cached afterwards,
``reset_real_features=False``); the second is the steady state of every later epoch. The callback times its own
parts (``last_timings``): sampling (excluded from the cost), embedding with the extractor, the metrics' updates
(the three covariance sums), their ``summary()`` (the eigendecompositions), the pictures (galleries, with the
eigenvectors they need, and spectrum figures, logged to TensorBoard) and, in the first pass, the references.
Extractors: the pixels (``PixelImageFeature(8)``, 64-d) and the tiny open_clip ViT of ``recipes/configs/tiny.yaml``
(random weights, 32 x 32 input, 64-d), so the embedding share of a real extractor shows. Everything runs side by
side in one process.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from lightning_spectral.callbacks import GeneratedSamples

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))
from digits_vae import DigitsVAE  # noqa: E402  (the generative recipe's model)

from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import ClipImageFeature, PixelImageFeature
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi

TINY_CLIP = dict(
    embed_dim=64,
    vision_cfg=dict(image_size=32, patch_size=8, layers=2, width=128, head_width=32),
    text_cfg=dict(context_length=16, width=64, heads=2, layers=2),
)


def extractors() -> dict[str, torch.nn.Module]:
    logging.getLogger().setLevel(logging.ERROR)  # open_clip: "initialized randomly"
    return {"pixels (64-d)": PixelImageFeature(8), "tiny CLIP ViT (64-d)": ClipImageFeature(model_kwargs=TINY_CLIP)}


def measure(feature: torch.nn.Module, r: int, args: argparse.Namespace, folder: str) -> list[dict[str, float]]:
    """The callback's timings on two validation passes (references embedded in the first)."""
    sigma = 1.52 if isinstance(feature, PixelImageFeature) else 1.0
    callback = GeneratedSamples(
        {
            "vendi": FKEAVendi(sigma, r, alpha=[1, 2]),
            "finc": FINCNovelty(sigma, r, rho=2.0, reset_real_features=False),
            "mmd": FastMMD(sigma, r, reset_real_features=False),
        },
        feature=feature,
        references={"finc": "reference_dataloader", "mmd": "val_dataloader"},
        n_samples=args.n_samples,
        sample_batch_size=args.sample_batch_size,
        label_key="label",
    )
    trainer = L.Trainer(
        accelerator="gpu" if args.device.startswith("cuda") else "cpu",
        devices=1,
        logger=TensorBoardLogger(folder),
        callbacks=[callback],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    torch.manual_seed(0)
    module, data = DigitsVAE(), DigitsImages()
    passes = []
    for _ in range(2):
        start = time.perf_counter()
        trainer.validate(module, datamodule=data, verbose=False)
        timings = dict(callback.last_timings, wall=time.perf_counter() - start)
        passes.append(timings)
    return passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--n-samples", type=int, default=10_000)
    parser.add_argument("--sample-batch-size", type=int, default=500)
    parser.add_argument("--frequencies", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    print(f"device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.n_samples} generated samples in chunks of {args.sample_batch_size}")
    print(f"{'extractor':<22} {'r':>5} | {'embed s':>7} {'update s':>8} {'summary s':>9} {'pictures s':>10} "
          f"{'epoch s':>7} {'(sampling s)':>12} | first epoch: {'references s':>12} {'epoch s':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for name, feature in extractors().items():
            for r in args.frequencies:
                first, steady = measure(feature, r, args, folder)
                parts = ("embed", "update", "compute", "pictures", "reference")
                cost, first_cost = (sum(timings[part] for part in parts) for timings in (steady, first))
                print(f"{name:<22} {r:>5} | {steady['embed']:>7.2f} {steady['update']:>8.2f} {steady['compute']:>9.2f} "
                      f"{steady['pictures']:>10.2f} {cost:>7.2f} {steady['sample']:>12.2f} | "
                      f"{'':13}{first['reference']:>12.2f} {first_cost:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
