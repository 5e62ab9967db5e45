"""`lightning-spectral evaluate` on two folders of images against the same command on their saved embeddings,
measured side by side in one process.

    python benchmarks/bench_cli_images.py [--n 1000 4000] [--size 64] [--encoders pixels timm:resnet18]

Writes ``n`` generated and ``n`` real PNG images of ``size`` x ``size`` px (digits, enlarged, with noise) into a
temporary folder, then per encoder runs (1) ``evaluate generated/ --reference real/ --save-features DIR`` (list,
check every header, decode, resize, embed, then the metrics) and (2) ``evaluate DIR/file.npy --reference
DIR/reference.npy`` (the metrics only), and prints the seconds of each, the ratio, and images per second of the
embedding part. ``timm:ARCH`` runs the randomly initialised network (no weights can be downloaded here), which costs
what the trained one would.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from lightning_spectral.cli import main
from lightning_spectral.data import load_digit_images


def folders(root: Path, n: int, size: int) -> None:
    images, labels = load_digit_images()
    rng = np.random.default_rng(0)
    for folder, classes in (("real", 10), ("generated", 7)):
        pool = np.nonzero(labels.numpy() < classes)[0]
        (root / folder).mkdir(parents=True)
        for k in range(n):
            pixels = images[pool[k % len(pool)], 0].numpy()
            picture = np.kron(pixels, np.ones((size // 8, size // 8))) + 0.1 * rng.random((size, size))
            rgb = (np.repeat(picture[..., None], 3, 2).clip(0, 1) * 255).astype(np.uint8)
            Image.fromarray(rgb).save(root / folder / f"{k:06d}.png")


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    code = main(argv)
    if code != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return time.perf_counter() - start


def run() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--encoders", nargs="+", default=["pixels", "timm:resnet18"])
    parser.add_argument("--n-frequencies", type=int, default=512)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| images per folder | encoder | evaluate on the folders s | evaluate on saved embeddings s | ratio | "
          "images embedded per s |")
    print("|---|---|---|---|---|---|")
    for n in args.n:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            folders(root, n, args.size)
            for encoder in args.encoders:
                saved = root / f"features-{encoder.replace(':', '-')}"
                common = ["--sigma", "auto", "--n-frequencies", str(args.n_frequencies), "--no-progress",
                          "--output", str(root / "out.json")]
                images = timed(["evaluate", str(root / "generated"), "--reference", str(root / "real"),
                                "--encoder", encoder, "--save-features", str(saved), *common])
                embeddings = timed(["evaluate", str(saved / "file.npy"), "--reference", str(saved / "reference.npy"),
                                    *common])
                rate = 2 * n / max(images - embeddings, 1e-9)
                print(f"| {n} | {encoder} | {images:.1f} | {embeddings:.1f} | {images / embeddings:.1f} | "
                      f"{rate:.0f} |")


if __name__ == "__main__":
    run()
