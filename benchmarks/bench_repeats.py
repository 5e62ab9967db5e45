"""What one epoch's reading costs against ``compute()`` alone, and what a repeat costs, side by side in one process.

    python benchmarks/bench_repeats.py [--n 2000] [--r 2048] [--k 4] [--novel] [--repeats 5] [--profile]

The digits' pixels (scikit-learn's 8 x 8 digits enlarged to 28 x 28: d = 784, as the issue's setting): a reference of
``n`` rows and ``n`` generated rows (digits 0-6 only), FINCNovelty at its defaults but ``n_frequencies = r`` (2048,
its default: 2r = 4,096). The rows are summed first (``update``'s work, not a reading's), then two copies of the same
filled metric: on the first ``compute()`` alone is timed; on the
second one ``reading()`` and everything a callback's epoch end reads off it (``callbacks.report``), in its order: the
value, the summary with its standard errors, the headline and the galleries' modes (``k`` on each side with a
significant mode; here the missing side, or both with ``--novel``: a tenth of the generated rows mirrored left to
right, a mode the reference lacks); then the same reads again on
the same reading (the repeat) and ``metric.reading()`` again (the metric hands the same reading back), then one
``update`` and a new reading's ``threshold()`` (which must recompute). With ``--profile`` the first reads run under
cProfile and its 15 costliest calls (cumulative) are printed. The same ratio with every row still pending (mapped
inside ``compute()``, as right after these updates at this n) is printed too. The ratio the target reads is the median
over ``--repeats`` pairs of fresh copies, ``compute()`` alone and the whole epoch's reading timed alternately (one
pair's ratio moves by +-0.3x with the machine's other load).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import functools
import pstats
import statistics
import time

import torch

from lightning_spectral.data import load_digit_images
from lightning_spectral.metrics import FINCNovelty


def rows(n: int, novel: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = load_digit_images()
    big = torch.nn.functional.interpolate(images, size=(28, 28), mode="bilinear").flatten(1)
    generator = torch.Generator().manual_seed(0)
    pick = torch.randint(len(big), (2 * n,), generator=generator)
    x = big[pick] + 0.05 * torch.randn(2 * n, big.shape[1], generator=generator)
    generated = x[n:][labels[pick[n:]] < 7][: n // 2].repeat(2, 1)[:n].clone()
    if novel:  # mirrored left to right: a mode the reference lacks
        generated[: n // 10] = generated[: n // 10].view(-1, 28, 28).flip(-1).flatten(1)
    return x[:n], generated


def timed(call) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def gallery_modes(metric: FINCNovelty, missing: bool, k: int) -> None:
    """The modes ``reading.galleries`` reads on one side (``k``): only where one is significant (a side without a
    row is skipped before any eigenvector is found)."""
    reading = metric.reading()
    if reading.summary()["missing_modes" if missing else "novel_modes"] > 0:
        reading.missing_modes(k) if missing else reading.novel_modes(k)


def everything(metric: FINCNovelty, k: int) -> None:
    """Every read of one epoch off one reading, as the callbacks' ``report`` makes them."""
    reading = metric.reading()
    reading.value, reading.summary(), reading.headline(), gallery_modes(metric, False, k), gallery_modes(metric, True, k)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--r", type=int, default=2048)
    parser.add_argument("--k", type=int, default=4, help="modes read per side (the galleries' default: 4)")
    parser.add_argument("--novel", action="store_true", help="a tenth of the generated rows mirrored: novel modes")
    parser.add_argument("--repeats", type=int, default=5, help="fresh copies timed for the median ratio")
    parser.add_argument("--profile", action="store_true", help="profile the first reads")
    args = parser.parse_args()
    real, generated = rows(args.n, args.novel)
    finc = FINCNovelty(sigma=10.0, n_frequencies=args.r)
    finc.update(real, real=True)
    finc.update(generated, real=False)
    pending = copy.deepcopy(finc)  # every row still waits to be mapped (2,000 + 2,000 < chunk_size 4,096)
    pending_first = timed(pending.compute)  # compute() as a user calls it right after these updates
    pending_epoch = timed(functools.partial(everything, pending, args.k)) + pending_first
    del pending
    finc._flush()  # from here the rows are summed: what is timed is reading, not mapping
    alone, whole = [], []  # compute() alone and a whole epoch's reading, each on fresh copies, alternated
    for _ in range(args.repeats):
        fresh = copy.deepcopy(finc)
        alone.append(timed(fresh.compute))
        fresh = copy.deepcopy(finc)
        whole.append(timed(functools.partial(everything, fresh, args.k)))
        del fresh
    first = statistics.median(alone)
    reads = {
        "reading()": lambda: finc.reading(),
        "value": lambda: finc.reading().value,
        "summary()": lambda: finc.reading().summary(),
        "headline()": lambda: finc.reading().headline(),
        f"galleries' novel_modes({args.k})": lambda: gallery_modes(finc, False, args.k),
        f"galleries' missing_modes({args.k})": lambda: gallery_modes(finc, True, args.k),
    }
    print(f"n = {args.n} + {args.n}, d = {real.shape[1]}, 2r = {2 * args.r}; FINC compute() alone {first:.3f} s")
    print("| read | first s | share of compute() | repeat s | share of compute() |")
    print("|---|---|---|---|---|")
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    once = {name: timed(call) for name, call in reads.items()}
    if profile is not None:
        profile.disable()
    again = {name: timed(call) for name, call in reads.items()}
    for name in reads:
        print(f"| {name} | {once[name]:.3f} | {once[name] / first:.0%} | {again[name]:.4f} | {again[name] / first:.2%} |")
    epoch, repeat = sum(once.values()), sum(again.values())
    print(f"one epoch's reading (every read above): {epoch:.3f} s = {epoch / first:.2f}x compute() alone; its repeat "
          f"{repeat:.4f} s = {repeat / epoch:.2%} of the first (target <= 10 %)")
    ratios = ", ".join(f"{w / a:.2f}x" for a, w in zip(alone, whole))
    print(f"median of {args.repeats} fresh copies, alternated: compute() {first:.3f} s, the epoch's reading "
          f"{statistics.median(whole):.3f} s = {statistics.median(whole) / first:.2f}x (target <= 2.5x; each pair: {ratios})")
    print(f"with the rows still pending (mapped inside compute(), as right after these updates): compute() "
          f"{pending_first:.3f} s, the epoch's reading {pending_epoch:.3f} s = {pending_epoch / pending_first:.2f}x")
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(int(__import__("os").environ.get("NSTATS", 15)))
    finc.update(generated[:10], real=False)
    print(f"after one update: a new reading's threshold() {timed(lambda: finc.reading().threshold()):.3f} s "
          "(recomputed)")


if __name__ == "__main__":
    main()
