"""The memory a metric holds after ``update``: its sums once, or its sums plus torchmetrics' full-size defaults.

    python benchmarks/bench_state_memory.py [--widths 4096 8192] [--rows 256]

For FKEAVendi (the covariance sum and 2 noise draws) and FINCNovelty (both sides' sums, 3 draws and the mean draws)
at each 2r, after one ``update`` of ``--rows`` rows (of 16-d embeddings) per side: the bytes of the sums
(``metric_state``), every tensor storage reachable from the metric (its states, what torchmetrics keeps for
``reset()``, the frequencies), and the process's resident memory grown since just before the metric was built
(``VmRSS``). One metric at a time, freed before the next. Run it on a checkout of each version to compare.
"""

from __future__ import annotations

import argparse
import gc

import torch

from lightning_spectral.metrics import FINCNovelty, FKEAVendi


def resident_bytes() -> int:
    """The process's resident memory (Linux ``/proc/self/status`` ``VmRSS``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def held_bytes(root: object) -> int:
    """Bytes of every tensor storage reachable from ``root``, each storage once."""
    storages, seen, stack, total = set(), set(), [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in storages:
                storages.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.extend(vars(obj).values())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[4096, 8192], help="2r")
    parser.add_argument("--rows", type=int, default=256)
    args = parser.parse_args()
    x = torch.randn(args.rows, 16, generator=torch.Generator().manual_seed(0))
    print("| metric | 2r | sums (GB) | held (GB) | held / sums | resident growth (GB) |")
    print("|---|---|---|---|---|---|")
    for width in args.widths:
        for cls in (FKEAVendi, FINCNovelty):
            gc.collect()
            before = resident_bytes()
            metric = cls(sigma=4.0, n_frequencies=width // 2, chunk_size=args.rows)  # each update adds its rows
            if cls is FINCNovelty:
                metric.update(x, real=True)
                metric.update(x + 0.5, real=False)
            else:
                metric.update(x)
            states = [v for v in metric.metric_state.values() if isinstance(v, torch.Tensor)]
            sums = sum(v.numel() * v.element_size() for v in states)
            held, grown = held_bytes(metric), resident_bytes() - before
            print(f"| {cls.__name__} | {width} | {sums / 1e9:.2f} | {held / 1e9:.2f} | {held / sums:.2f} | "
                  f"{grown / 1e9:.2f} |")
            del metric
            gc.collect()


if __name__ == "__main__":
    main()
