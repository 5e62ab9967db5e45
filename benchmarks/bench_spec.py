"""Issue 5 benchmark: SPECAlign's overhead per training step, and SPEC route time against n.

    python benchmarks/bench_spec.py overhead [--encoder vit|mlp] [--model ViT-B-32] [--steps 3]
    python benchmarks/bench_spec.py routes

overhead: one Trainer step (forward, loss, backward, optimizer step) of an open_clip image tower (random
init, 224 x 224 inputs, batch 256, embedding width 512) with and without SPECAlign (cosine kernel, weight
0.1, precomputed 768-d reference features looked up by index: the reference encoder's own forward is not
counted), both runs side by side in one process; plus the same for a cheap MLP encoder (3072 -> 1024 -> 512),
the worst case. Median of ``--steps`` timed steps after one warm-up step.

routes: time of ``spec`` on synthetic embeddings (d_a = 512, d_b = 768) for the exact n x n route and the
covariance route (cosine: D = 1280; Gaussian: r = 1000 per side, D = 4000) as n grows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import lightning as L
import open_clip
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import SPECAlign
from lightning_spectral.functional import spec, spec_align_loss


class StepTimer(L.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, *args) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        self.times.append(time.perf_counter() - self._start)


class EncoderModule(L.LightningModule):
    """A task loss on the image embedding (mean squared norm after a head), enough to train the encoder."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def training_step(self, batch, _):
        return self.encoder(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)


def step_times(encoder_fn, inputs: torch.Tensor, reference: torch.Tensor, steps: int, align: bool) -> float:
    torch.manual_seed(0)
    module = EncoderModule(encoder_fn())
    timer = StepTimer()
    callbacks = [timer] + ([SPECAlign(reference=reference, weight=0.1, index=1)] if align else [])
    loader = DataLoader(TensorDataset(inputs, torch.arange(len(inputs))), batch_size=256)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps + 1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=callbacks,
    )
    trainer.fit(module, loader)
    return statistics.median(timer.times[1:])


def penalty_cost(repeats: int = 30) -> float:
    """Median seconds of what SPECAlign adds on one process: spec_align_loss forward + backward."""
    student = torch.randn(256, 512, requires_grad=True)
    reference = torch.randn(256, 768)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        spec_align_loss(student, reference).backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def overhead(encoder: str, model: str, steps: int) -> None:
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    cost = penalty_cost()
    print(f"penalty alone (spec_align_loss + backward, n=256, 512 + 768 wide, cosine): {cost * 1e3:.1f} ms")
    reference = torch.randn(256 * (steps + 1), 768)
    if encoder == "vit":
        name = f"open_clip {model} image tower"
        encoder_fn = lambda: open_clip.create_model(model, pretrained=None).visual  # noqa: E731
        inputs = torch.randn(256 * (steps + 1), 3, 224, 224)
    else:
        name = "MLP 3072-1024-512"
        encoder_fn = lambda: torch.nn.Sequential(  # noqa: E731
            torch.nn.Linear(3072, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)
        )
        inputs = torch.randn(256 * (steps + 1), 3072)
    plain = step_times(encoder_fn, inputs, reference, steps, align=False)
    aligned = step_times(encoder_fn, inputs, reference, steps, align=True)
    print(
        f"{name}, batch 256: step without {plain * 1e3:.1f} ms, with SPECAlign {aligned * 1e3:.1f} ms "
        f"(end to end {100 * (aligned / plain - 1):+.1f} %); penalty / step = {100 * cost / plain:.2f} %"
    )


def routes() -> None:
    g = torch.Generator().manual_seed(0)
    for n in (1000, 2000, 4000, 8000, 16000, 32000):
        a = torch.randn(n, 512, generator=g)
        b = torch.cat([a[:, :256], torch.randn(n, 512, generator=g)], 1)
        row = [f"n={n}"]
        cases = [("cosine covariance", dict(kernel="cosine", method="covariance"))]
        cases.append(
            ("gaussian covariance r=1000", dict(sigma_a=32.0, sigma_b=40.0, n_frequencies=1000, method="covariance"))
        )
        if n <= 4000:
            cases.append(("exact n x n (gaussian)", dict(sigma_a=32.0, sigma_b=40.0, method="exact")))
        for name, kwargs in cases:
            start = time.perf_counter()
            result = spec(a, b, **kwargs)
            row.append(f"{name}: {time.perf_counter() - start:.2f} s (SPEC-diff {float(result.spec_diff):.4f})")
        print("; ".join(row), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["overhead", "routes"])
    parser.add_argument("--encoder", choices=["vit", "mlp"], default="mlp")
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    overhead(args.encoder, args.model, args.steps) if args.what == "overhead" else routes()
