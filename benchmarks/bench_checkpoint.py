"""Checkpoint bytes of metric state: the README's Module (FKEAVendi r=2048, FINCNovelty r=2048 with a kept
reference, FastMMD r=1024) after a validation epoch and mid-epoch, against the previous format (every sum
written at full size, zeros included, plus the frequencies), measured side by side in one process.

    python benchmarks/bench_checkpoint.py [--d 768] [--ckpt PATH ...]

``--ckpt`` also breaks existing Lightning checkpoints (e.g. the alignment recipe's ``last.ckpt``) down into
model weights, metric states and callback states.
"""

from __future__ import annotations

import argparse
import io
from collections import defaultdict

import torch

from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi


def saved_bytes(obj: object) -> int:
    """Bytes of ``torch.save(obj)``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.tell()


def previous_format(metric: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What the previous code wrote: every tensor state at full size (zeros too) and the frequency buffers."""
    state = {acc.state_name: acc.state for acc in metric.accumulators.values()}  # type: ignore[union-attr]
    state.update({f"feature_map.{k}": v for k, v in metric.feature_map.named_buffers()})  # type: ignore[union-attr]
    return state


def module_metrics(d: int) -> dict[str, torch.nn.Module]:
    return torch.nn.ModuleDict(
        {
            "vendi": FKEAVendi(sigma=7.0, n_frequencies=2048, in_features=d),
            "novelty": FINCNovelty(sigma=7.0, n_frequencies=2048, rho=2.0, reset_real_features=False, in_features=d),
            "mmd": FastMMD(sigma=7.0, n_frequencies=1024, reset_real_features=False, in_features=d),
        }
    )


def size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.1f} KiB"


def report(label: str, metrics: torch.nn.Module) -> None:
    now = saved_bytes(metrics.state_dict())
    before = saved_bytes({name: previous_format(m) for name, m in metrics.items()})
    print(f"| {label} | {size(before)} | {size(now)} | {before / now:,.1f}x |", flush=True)


def breakdown(path: str) -> None:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    parts: dict[str, int] = defaultdict(int)
    for key, value in checkpoint.get("state_dict", {}).items():
        kind = "metric states" if any(s in key for s in ("_sum", "_count", "_extra_state")) else "model weights"
        parts[kind] += saved_bytes({key: value})
    for key, value in checkpoint.get("callbacks", {}).items():
        parts[f"callback {key.split('{')[0]}"] += saved_bytes(value)
    parts["optimizer states"] += saved_bytes(checkpoint.get("optimizer_states", []))
    total = saved_bytes(checkpoint)
    print(f"{path}: {total / 2**20:.1f} MiB in all")
    for kind, size in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"  {kind}: {size / 2**20:.2f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--ckpt", nargs="*", default=[])
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    metrics = module_metrics(args.d)
    reference, generated = torch.randn(2000, args.d, generator=generator), torch.randn(1000, args.d, generator=generator)
    print("| moment | previous format | now | ratio |")
    print("|---|---|---|---|")
    report("fresh (nothing accumulated)", metrics)
    metrics["novelty"].update(reference, real=True)
    metrics["mmd"].update(reference, real=True)
    for batch in generated.split(250):
        metrics["vendi"].update(batch)
        metrics["novelty"].update(batch, real=False)
        metrics["mmd"].update(batch, real=False)
    report("mid-epoch (every side holds samples)", metrics)
    for metric in metrics.values():
        metric.reset()  # what Lightning does after logging at the validation epoch's end
    report("after a validation epoch (references kept)", metrics)
    for metric in metrics.values():
        metric.persistent(False)
    report("after a validation epoch, metric.persistent(False)", metrics)
    for path in args.ckpt:
        breakdown(path)


if __name__ == "__main__":
    main()
