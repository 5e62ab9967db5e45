"""The README's two-folder command at the automatic width against wider maps, side by side in one process.

    python benchmarks/bench_width.py [--n 1000] [--widths auto 512 1000 2048] [--seeds 0]

Writes the README's folders at ``n`` + ``n`` images (``real/``: the first ``n`` of scikit-learn's digits, 0-9, in
class sub-folders; ``generated/``: ``n`` digits 0-6 from the end of the set), 32 x 32 PNGs, embeds them once with
the pixels (``--save-features``), then runs ``evaluate generated/ --reference real/ --encoder pixels --sigma auto
--missing-modes --plot-dir DIR`` (the README's command; ``--n-frequencies`` per width, ``auto`` the default) and
prints per width and frequency seed: wall and CPU seconds, r, Vendi-1, RKE, FINC's novelty and significant novel /
missing modes, MMD^2 and its p-value.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from lightning_spectral.cli import main
from lightning_spectral.data import load_digit_images


def folders(root: Path, n: int) -> None:
    images, labels = load_digit_images()
    generated = [i for i in range(len(labels) - 1, -1, -1) if int(labels[i]) < 7][:n]
    for folder, chosen in (("real", range(min(n, len(labels)))), ("generated", generated)):
        for i in chosen:
            where = root / folder / f"class{int(labels[i])}" if folder == "real" else root / folder
            where.mkdir(parents=True, exist_ok=True)
            pixels = (images[i, 0].numpy() * 255).astype(np.uint8)
            Image.fromarray(pixels).resize((32, 32), Image.NEAREST).save(where / f"{i}.png")


def evaluate(root: Path, width: str, seed: int) -> tuple[dict, float, float]:
    argv = ["evaluate", str(root / "generated"), "--reference", str(root / "real"), "--encoder", "pixels",
            "--sigma", "auto", "--missing-modes", "--plot-dir", str(root / f"plots-{width}"), "--no-progress",
            "--seed", str(seed), "--output", str(root / "scores.json")]  # fmt: skip
    if width != "auto":
        argv += ["--n-frequencies", width]
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if code != 0:
        raise SystemExit(f"evaluate failed at width {width}")
    return json.loads((root / "scores.json").read_text()), wall, cpu


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="images per folder")
    parser.add_argument("--widths", nargs="+", default=["auto", "512", "1000", "2048"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, n = {args.n} + {args.n} images")
    print("| width | seed | r | wall s | CPU s | Vendi-1 | RKE | novelty | novel modes | missing modes | MMD^2 | p |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        folders(root, args.n)
        for width in args.widths:
            for seed in args.seeds:
                out, wall, cpu = evaluate(root, width, seed)
                finc, mmd = out["finc"], out["mmd"]
                print(f"| {width} | {seed} | {out['n_frequencies']} | {wall:.1f} | {cpu:.1f} | {out['vendi']['1']:.3f} "
                      f"| {out['vendi']['2']:.4f} | {finc['novelty']:.4f} | {finc['n_significant']} "
                      f"| {finc['missing']['n_significant']} | {mmd['mmd2']:.5f} | {mmd['p_value']:.2g} |", flush=True)


if __name__ == "__main__":
    main_()
