"""Issue 22 benchmarks: ConditionalVendi against the exact n x n formulas on the digits, and its cost against FKEAVendi.

    python benchmarks/bench_conditional.py agreement  # n = 1,797 digits (pixels, d = 64), 2r in {1024, 2048, 4096}
    python benchmarks/bench_conditional.py cost       # update and compute time, ConditionalVendi / FKEAVendi, same r
                                                      # (full, and with unconditional=False, label_prompts=True)

Data: scikit-learn's 1,797 8x8 digits (offline, ``load_digit_images``), pixels flattened (d = 64, values in [0, 1]);
prompts are the one-hot labels ("a photo of the digit k" as a label). ``sigma = 1.52`` (the generative recipes' pixel
bandwidth); two prompt bandwidths: 0.1 (distinct captions unrelated, K_T ~ 0/1) and 1.0 (k_T = exp(-1) = 0.37
between different captions). The exact values come from the n x n kernel matrices
(:func:`~lightning_spectral.functional.conditional.conditional_spectra_exact`); the estimates from the metric fed
in batches of 256, for three frequency seeds. Cost: both metrics fed the same rows side by side, each timing the
best of ``--repeats`` runs; the ratio is ConditionalVendi's time over FKEAVendi's.
"""

from __future__ import annotations

import argparse
import time

import torch

from lightning_spectral.data import load_digit_images
from lightning_spectral.functional.conditional import conditional_scores, conditional_spectra_exact
from lightning_spectral.metrics import ConditionalVendi, FKEAVendi

SIGMA = 1.52


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = load_digit_images()
    return images.flatten(1).double(), labels.long()


def fed(metric, x: torch.Tensor, labels: torch.Tensor, conditional: bool, batch: int = 256):
    for start in range(0, len(x), batch):
        if conditional:
            metric.update(x[start : start + batch], labels[start : start + batch])
        else:
            metric.update(x[start : start + batch])
    metric._flush()
    return metric


def bench_agreement(args: argparse.Namespace) -> None:
    x, labels = digits()
    one_hot = torch.nn.functional.one_hot(labels, 10).double()
    print(f"agreement: n = {len(x)} digits, d = 64, sigma = {SIGMA}; relative error of the RFF estimate, "
          "mean and max over 3 seeds")
    print(f"{'prompt_sigma':>12} {'2r':>5} | {'C-RKE exact':>11} {'mean err':>8} {'max err':>8} | "
          f"{'C-Vendi-1 exact':>15} {'mean err':>8} {'max err':>8} | {'Info-Vendi-1':>12} {'max err':>8}")
    for prompt_sigma in (0.1, 1.0):
        exact = conditional_spectra_exact(x, one_hot, SIGMA, prompt_sigma)
        want = {order: conditional_scores(exact, order) for order in (1, 2)}
        for r in args.frequencies:
            errors: dict[str, list[float]] = {"rke": [], "vendi": [], "info": []}
            for seed in range(3):
                metric = fed(ConditionalVendi(SIGMA, prompt_sigma, r, alpha=[1, 2], seed=seed, num_classes=10,
                                              precision="float64"), x, labels, True)
                got = metric.reading().scores()
                errors["rke"].append(float(got[2]["conditional"] / want[2]["conditional"]) - 1)
                errors["vendi"].append(float(got[1]["conditional"] / want[1]["conditional"]) - 1)
                errors["info"].append(float(got[1]["information"] / want[1]["information"]) - 1)

            def stats(values: list[float]) -> str:
                mean = sum(abs(v) for v in values) / len(values)
                worst = max(values, key=abs)
                return f"{mean:>8.2%} {worst:>+8.2%}"

            print(f"{prompt_sigma:>12} {2 * r:>5} | {float(want[2]['conditional']):>11.3f} {stats(errors['rke'])} | "
                  f"{float(want[1]['conditional']):>15.3f} {stats(errors['vendi'])} | "
                  f"{float(want[1]['information']):>12.3f} {max(errors['info'], key=abs):>+8.2%}", flush=True)


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def afresh(metric, read: str = "compute"):
    """``metric.compute()`` (or ``summary()``) worked out again: the metrics keep what they computed on the same
    sums, so a repeat would time a cache lookup."""
    metric._spectral_cache = (None, {})
    return getattr(metric, read)()


def bench_cost(args: argparse.Namespace) -> None:
    x, labels = digits()
    x = x.float()
    print(f"cost: n = {len(x)} digits (float32 rows, batches of 256), best of {args.repeats}; "
          f"torch threads = {torch.get_num_threads()}")
    print("full: ConditionalVendi(num_classes=10), three covariances; labels: unconditional=False, label_prompts=True")
    print(f"{'2r':>5} {'config':>6} | {'update FKEA s':>13} {'Cond s':>7} {'ratio':>6} | {'compute FKEA s':>14} "
          f"{'Cond s':>7} {'ratio':>6} | {'summary Cond s':>14} {'ratio':>6} | {'Cond-RKE s':>10}")
    for r in args.frequencies:
        def fkea(r=r):
            return FKEAVendi(SIGMA, r, alpha=1)

        full_fkea = fed(fkea(), x, labels, False)
        for config, options in (("full", {}), ("labels", {"unconditional": False, "label_prompts": True})):
            def cond(alpha=1, options=options, r=r):
                return ConditionalVendi(SIGMA, 0.1, r, alpha=alpha, num_classes=10, **options)

            update_fkea = best_of(args.repeats, lambda: fed(fkea(), x, labels, False))
            update_cond = best_of(args.repeats, lambda: fed(cond(), x, labels, True))
            full_cond = fed(cond(), x, labels, True)
            compute_fkea = best_of(args.repeats, lambda m=full_fkea: afresh(m))
            compute_cond = best_of(args.repeats, lambda m=full_cond: afresh(m))
            summary_cond = best_of(args.repeats, lambda m=full_cond: afresh(m, "summary"))
            rke = fed(cond(alpha=2), x, labels, True)
            compute_rke = best_of(args.repeats, rke.compute)
            print(f"{2 * r:>5} {config:>6} | {update_fkea:>13.2f} {update_cond:>7.2f} "
                  f"{update_cond / update_fkea:>5.2f}x | "
                  f"{compute_fkea:>14.2f} {compute_cond:>7.2f} {compute_cond / compute_fkea:>5.2f}x | "
                  f"{summary_cond:>14.2f} {summary_cond / compute_fkea:>5.2f}x | {compute_rke:>10.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("agreement", "cost"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--frequencies", type=int, nargs="+", default=[512, 1024, 2048], help="r values (2r features)")
    args = parser.parse_args()
    {"agreement": bench_agreement, "cost": bench_cost}[args.what](args)


if __name__ == "__main__":
    main()
