"""What a repeat call costs after ``compute()``: FINC's ``threshold``, ``novel_modes``, ``missing_modes``,
``summary`` and FKEA's ``modes`` against ``compute()`` itself, side by side in one process.

    python benchmarks/bench_repeats.py [--n 2000] [--d 784] [--r 1024] [--profile]

The digits' pixels (scikit-learn's 8 x 8 digits enlarged to 28 x 28: d = 784, as the issue's setting) or any
``n`` rows: a reference of ``n`` and ``n`` generated rows, the metrics at their defaults but ``n_frequencies = r``.
Each call is timed once in this order (what a callback's epoch end does): ``compute()``, then every reader, then the
same readers again (the repeats), then one ``update`` and ``threshold()`` (which must recompute). With ``--profile``
the first reads after ``compute()`` run under cProfile and its 15 costliest calls (cumulative) are printed.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

from lightning_spectral.data import load_digit_images
from lightning_spectral.metrics import FINCNovelty, FKEAVendi


def rows(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = load_digit_images()
    big = torch.nn.functional.interpolate(images, size=(28, 28), mode="bilinear").flatten(1)
    generator = torch.Generator().manual_seed(0)
    pick = torch.randint(len(big), (2 * n,), generator=generator)
    x = big[pick] + 0.05 * torch.randn(2 * n, big.shape[1], generator=generator)
    return x[:n], x[n:][labels[pick[n:]] < 7][: n // 2].repeat(2, 1)[:n]


def timed(call) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--r", type=int, default=1024)
    parser.add_argument("--profile", action="store_true", help="profile the first reads after compute()")
    args = parser.parse_args()
    real, generated = rows(args.n)
    finc = FINCNovelty(sigma=10.0, n_frequencies=args.r)
    finc.update(real, real=True)
    finc.update(generated, real=False)
    vendi = FKEAVendi(sigma=10.0, n_frequencies=args.r)
    vendi.update(generated)
    first = timed(finc.compute)
    readers = {
        "threshold()": lambda: finc.threshold(),
        "threshold(missing=True)": lambda: finc.threshold(missing=True),
        "novel_modes(5)": lambda: finc.novel_modes(5),
        "missing_modes(5)": lambda: finc.missing_modes(5),
        "summary()": finc.summary,
        "compute()": finc.compute,
    }
    print(f"n = {args.n} + {args.n}, d = {real.shape[1]}, 2r = {2 * args.r}; FINC compute() {first:.3f} s")
    print("| call | first after compute() s | share of compute() | repeat s | share of compute() |")
    print("|---|---|---|---|---|")
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    once = {name: timed(call) for name, call in readers.items()}
    if profile is not None:
        profile.disable()
    again = {name: timed(call) for name, call in readers.items()}
    for name in readers:
        share, repeat = once[name] / first, again[name] / first
        print(f"| FINC {name} | {once[name]:.3f} | {share:.0%} | {again[name]:.4f} | {repeat:.1%} |")
    base = timed(vendi.compute)
    modes = [timed(lambda: vendi.modes(5)) for _ in range(2)]
    print(f"| FKEA modes(5) (compute() {base:.3f} s) | {modes[0]:.3f} | {modes[0] / base:.0%} | {modes[1]:.4f} | "
          f"{modes[1] / base:.1%} |")
    print(f"FINC compute() and every first read: {(first + sum(once.values())) / first:.2f}x compute()")
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(15)
    finc.update(generated[:10], real=False)
    print(f"after one update: threshold() {timed(lambda: finc.threshold()):.3f} s (recomputed)")


if __name__ == "__main__":
    main()
