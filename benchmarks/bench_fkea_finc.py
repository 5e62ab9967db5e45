"""Issue 3 benchmarks: FKEA against the exact Vendi, FKEA streaming at n = 1e6, FINC at n = m = 250k.

    python benchmarks/bench_fkea_finc.py exact [--sigma 16]  # (a) n in {2k, 5k, 10k}: time ratio, relative error
    python benchmarks/bench_fkea_finc.py stream  # (b) n = 1,000,000, d = 768, 2r = 4096: time, peak memory
    python benchmarks/bench_fkea_finc.py finc    # (c) n = m = 250,000, d = 2048, 2r = 4000: time

Embeddings are synthetic Gaussian mixtures generated batch by batch from a seed (no dataset is held in
memory); generation time is measured and reported apart from the metric's time. Peak memory is the
process's maximum resident set size (``ru_maxrss``), everything included (Python, torch, buffers).
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Iterator

import torch

from lightning_spectral.functional import fkea_vendi, vendi_exact
from lightning_spectral.metrics import FINCNovelty, FKEAVendi


def peak_memory_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux reports KiB


def mixture_batches(
    n: int, d: int, k: int, batch: int, seed: int, skip: tuple[int, ...] = ()
) -> Iterator[torch.Tensor]:
    """n samples of a k-component mixture in d dimensions (means ~ N(0, 4 I), unit within-mode std), by batch."""
    means = 2.0 * torch.randn(k, d, generator=torch.Generator().manual_seed(1234))
    allowed = torch.tensor([c for c in range(k) if c not in skip])
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, n, batch):
        size = min(batch, n - start)
        labels = allowed[torch.randint(len(allowed), (size,), generator=generator)]
        yield means[labels] + torch.randn(size, d, generator=generator)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def bench_exact(args: argparse.Namespace) -> None:
    d, sigma = 64, args.sigma
    print(f"(a) FKEA vs exact Vendi: d={d}, 20-mode mixture, sigma={sigma}, float32 input")
    print(f"{'n':>6} {'2r':>5} | {'exact s':>8} {'FKEA s':>7} {'speed-up':>8} | "
          f"{'Vendi-1 exact':>13} {'FKEA':>8} {'rel err':>8} | {'RKE exact':>9} {'FKEA':>8} {'rel err':>8}")
    for n in args.sizes:
        x = next(mixture_batches(n, d, 20, n, seed=n))
        exact, exact_s = timed(lambda x=x: vendi_exact(x, sigma=sigma, alpha=[1, 2]))
        for r in args.frequencies:
            approx, fkea_s = timed(lambda x=x, r=r: fkea_vendi(x, sigma=sigma, n_frequencies=r, alpha=[1, 2]))
            errors = [float(approx[o]) / float(exact[o]) - 1 for o in (1, 2)]
            print(f"{n:>6} {2 * r:>5} | {exact_s:>8.1f} {fkea_s:>7.1f} {exact_s / fkea_s:>7.2f}x | "
                  f"{float(exact[1]):>13.2f} {float(approx[1]):>8.2f} {errors[0]:>+8.2%} | "
                  f"{float(exact[2]):>9.2f} {float(approx[2]):>8.2f} {errors[1]:>+8.2%}", flush=True)


def bench_stream(args: argparse.Namespace) -> None:
    n, d, r, batch = args.n, 768, 2048, 4096
    metric = FKEAVendi(sigma=40.0, n_frequencies=r, alpha=[1, 2])
    generate_s = update_s = 0.0
    batches = mixture_batches(n, d, 50, batch, seed=0)
    while True:
        x, generate = timed(lambda: next(batches, None))
        generate_s += generate
        if x is None:
            break
        update_s += timed(lambda x=x: metric.update(x))[1]
    scores, compute_s = timed(metric.compute)
    print(f"(b) FKEA streaming: n={n:,}, d={d}, 2r={2 * r}, batches of {batch}")
    print(f"    update {update_s:.1f} s + compute {compute_s:.1f} s = {update_s + compute_s:.1f} s "
          f"({n / update_s:,.0f} samples/s); data generation {generate_s:.1f} s (not counted)")
    print(f"    Vendi-1 {float(scores[1]):.2f}, RKE {float(scores[2]):.2f}; "
          f"peak resident memory {peak_memory_gb():.2f} GB (target: <= 200 s, <= 2 GB)")


def bench_finc(args: argparse.Namespace) -> None:
    n, d, r, batch = args.n, 2048, 2000, 2500
    metric = FINCNovelty(sigma=60.0, n_frequencies=r, rho=1.0)
    generate_s = update_s = 0.0
    # generated: 20 modes; reference: the same minus mode 0 (a novel mode holding 1/20 of the generated mass)
    for real, skip in ((False, ()), (True, (0,))):
        batches = mixture_batches(n, d, 20, batch, seed=int(real), skip=skip)
        while True:
            x, generate = timed(lambda batches=batches: next(batches, None))
            generate_s += generate
            if x is None:
                break
            update_s += timed(lambda x=x, real=real: metric.update(x, real=real))[1]
    score, compute_s = timed(metric.compute)
    modes = metric.reading().novel_modes(3)
    print(f"(c) FINC: n = m = {n:,}, d={d}, 2r={2 * r}, batches of {batch}")
    print(f"    update {update_s:.1f} s + compute {compute_s:.1f} s = {update_s + compute_s:.1f} s; "
          f"data generation {generate_s:.1f} s (not counted); peak resident memory {peak_memory_gb():.2f} GB")
    print(f"    novelty {float(score):.4f}; top eigenvalues {[round(v, 4) for v in modes.eigenvalues.tolist()]}, "
          f"significant {modes.significant.tolist()} (target: <= 300 s; the paper reports 3090 s on its CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["exact", "stream", "finc"])
    parser.add_argument("--n", type=int, default=None, help="samples (stream: 1e6, finc: 250k per side)")
    parser.add_argument("--sigma", type=float, default=16.0, help="exact: bandwidth (16: tight modes, 8: diffuse)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10000], help="exact: the values of n")
    parser.add_argument("--frequencies", type=int, nargs="+", default=[2048, 4096], help="exact: the values of r")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.which == "exact":
        bench_exact(args)
    elif args.which == "stream":
        args.n = args.n or 1_000_000
        bench_stream(args)
    else:
        args.n = args.n or 250_000
        bench_finc(args)


if __name__ == "__main__":
    main()
