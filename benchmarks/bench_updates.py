"""Update throughput at small batches: buffered sides against the unbuffered path, side by side in one process.

Every metric (and ``KernelPCAOOD``, ``SPECDivergence``) queues rows until ``chunk_size`` are pending and then
maps and sums them in one product. The baseline is the previous code path: every ``update`` mapped its batch
and added its Gram into the (2r)^2 float64 total at once (here: the same metric with ``flush()`` after each
update, which is exactly that). Rates include the final flush; the target is >= 80 % of the batch-4096 rate at
batches 32, 64 and 256.

    python benchmarks/bench_updates.py [--d 768] [--n-frequencies 2048] [--rows 8192] [--device cpu]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
from typing import Callable

import torch

from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi, KernelPCAOOD, RFFCovariance, SPECDivergence

BATCHES = (32, 64, 256, 4096)


def subjects(d: int, r: int, device: torch.device) -> dict[str, tuple[Callable[[], object], Callable]]:
    """name -> (a fresh instance, ``update(instance, batch)``)."""
    def two(metric_class, **kwargs):
        return lambda: metric_class(sigma=10.0, n_frequencies=r, **kwargs).to(device), (
            lambda m, x: m.update(x, real=False)
        )

    return {
        "RFFCovariance": (lambda: RFFCovariance(10.0, r).to(device), lambda m, x: m.update(x)),
        "FKEAVendi": (lambda: FKEAVendi(10.0, r).to(device), lambda m, x: m.update(x)),
        "FINCNovelty": two(FINCNovelty),
        "FastMMD": two(FastMMD),
        "SPECDivergence": (
            lambda: SPECDivergence("gaussian", 10.0, 10.0, n_frequencies=r // 2).to(device),
            lambda m, x: m.update(x, x.flip(1)),
        ),
        "KernelPCAOOD": (lambda: KernelPCAOOD("corp", sigma=0.5, n_frequencies=r).to(device),
                         lambda m, x: m.partial_fit(x)),
    }


def flush_of(instance: object) -> Callable[[], None]:
    target = instance.sums if isinstance(instance, KernelPCAOOD) else instance
    return target.flush  # type: ignore[attr-defined]


def rate(make: Callable[[], object], update: Callable, x: torch.Tensor, batch: int, eager: bool) -> float:
    """Rows per second through ``update`` in batches of ``batch`` (plus the final flush)."""
    instance = make()
    update(instance, x[:batch])  # warm-up: the map is built, the first flush happens
    flush_of(instance)()
    _sync(x)
    start = time.perf_counter()
    for part in x.split(batch):
        update(instance, part)
        if eager:
            flush_of(instance)()
    flush_of(instance)()
    _sync(x)
    seconds = time.perf_counter() - start
    del instance
    gc.collect()  # torchmetrics metrics sit in reference cycles: free the (2r)^2 sums now
    return x.shape[0] / seconds


def _sync(x: torch.Tensor) -> None:
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--n-frequencies", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=8192, help="rows per timed pass")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", nargs="*", help="subset of the subjects")
    args = parser.parse_args()
    device = torch.device(args.device)
    x = torch.randn(args.rows, args.d, generator=torch.Generator().manual_seed(0)).to(device)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {device}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    print(f"d = {args.d}, 2r = {2 * args.n_frequencies}, {args.rows} rows per pass; rows/s, and % of the buffered "
          "batch-4096 rate")
    header = "| subject | path | " + " | ".join(f"batch {b}" for b in BATCHES) + " |"
    print(header)
    print("|" + "---|" * (2 + len(BATCHES)))
    for name, (make, update) in subjects(args.d, args.n_frequencies, device).items():
        if args.only and name not in args.only:
            continue
        rows = {}
        for eager in (False, True):
            rows[eager] = [rate(make, update, x, batch, eager) for batch in BATCHES]
        top = rows[False][-1]
        for eager, label in ((False, "buffered"), (True, "unbuffered (previous)")):
            cells = " | ".join(f"{r:,.0f} ({r / top:.0%})" for r in rows[eager])
            print(f"| {name} | {label} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
