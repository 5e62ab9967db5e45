"""The cost of torchmetrics' FID beside Vendi: fed through ``alongside=`` (the same samples) against a second
sampling pass (a callback that samples the module again, as recipes did before ``alongside``).

    python benchmarks/bench_alongside.py [--n-samples 10000] [--steps 1 50] [--repeats 7]

``GeneratedSamples`` on a DigitsVAE (8x8 digits) with ``FKEAVendi(r=256)``, inside ``Trainer.validate``; FID is
torchmetrics' ``FrechetInceptionDistance`` with a fixed 64 -> 64 linear extractor (Inception needs downloaded weights)
and its real side (the 1,438 training digits) kept (``reset_real_features=False``). Three settings, each validated
once to fill the references, then timed over ``--repeats`` validation epochs, interleaved (the median is printed),
side by side in one process: Vendi alone (the baseline), Vendi + FID ``alongside``, and Vendi + FID in a second
callback that draws the same seeded samples again. Printed: each setting's whole validation epoch, and FID's own
time (the callback's ``last_timings["alongside"]``: FID's updates and compute in the callback's pass; the second
callback's hook: sampling again, FID's updates and compute), the shares that do not drown in a loaded machine's
noise. ``--steps k``: the sampler runs the VAE's decoder k times per
sample (a stand-in for a k-step sampler such as a diffusion model's); the decoder of the DigitsVAE is cheap, so at
k = 1 the two ways cost about the same and the saving grows with the sampler's cost.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torchmetrics.image.fid import FrechetInceptionDistance

from lightning_spectral.callbacks import GeneratedSamples, draw_samples
from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FKEAVendi

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))
from digits_vae import DigitsVAE  # noqa: E402  (the generative recipe's model)


class Extractor(nn.Module):
    """A fixed linear map of 8x8 images to 64 features (``num_features`` for torchmetrics)."""

    num_features = 64

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.linear(images.float().flatten(1))


def fid() -> FrechetInceptionDistance:
    torch.manual_seed(0)
    return FrechetInceptionDistance(feature=Extractor(), normalize=True, reset_real_features=False)


def sampler(steps: int) -> Any:
    """``fn(module, n, g)``: the VAE's samples, its decoder run ``steps`` times (the last run's output kept)."""

    def sample(module: DigitsVAE, n: int, generator: torch.Generator) -> torch.Tensor:
        for _ in range(steps - 1):
            module.sample(n, generator=torch.Generator().manual_seed(0))
        return module.sample(n, generator=generator)

    return sample


class SecondPass(L.Callback):
    """FID of the samples ``generated`` draws, drawn again (the same seeds), its real side fed once."""

    def __init__(self, generated: GeneratedSamples) -> None:
        self.generated, self.fid, self.has_real = generated, fid(), False
        self.seconds = 0.0  # the last epoch's hook

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        gen, start = self.generated, time.perf_counter()
        with torch.no_grad():
            if not self.has_real:
                for batch in trainer.datamodule.reference_dataloader():
                    self.fid.update(batch["image"], real=True)
                self.has_real = True
            for _, images in draw_samples(gen.sample, pl_module, gen.n_samples, gen.sample_batch_size, gen.seed):
                self.fid.update(images, real=False)
            pl_module.log("gen/fid", float(self.fid.compute()))
            self.fid.reset()
        self.seconds = time.perf_counter() - start


def trainer_for(kind: str, steps: int, args: argparse.Namespace) -> tuple[L.Trainer, L.LightningModule, Any]:
    """A Trainer with the callbacks of ``kind``, a DigitsVAE and the digits, validated once (the references)."""
    options: dict[str, Any] = dict(feature=PixelImageFeature(8), n_samples=args.n_samples,
                                   sample_batch_size=args.sample_batch_size, sample=sampler(steps), galleries=False)
    if kind == "alongside":
        options.update(alongside={"fid": fid()}, references={"fid": "reference_dataloader"})
    generated = GeneratedSamples({"vendi": FKEAVendi(1.52, 256)}, **options)
    callbacks: list[L.Callback] = [generated] + ([SecondPass(generated)] if kind == "second pass" else [])
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=callbacks, enable_progress_bar=False,
                        enable_model_summary=False)
    torch.manual_seed(0)
    module, data = DigitsVAE(), DigitsImages()
    trainer.validate(module, datamodule=data, verbose=False)
    assert kind == "Vendi alone" or "gen/fid" in trainer.callback_metrics
    return trainer, module, data


def measure(steps: int, args: argparse.Namespace) -> dict[str, float]:
    """Median seconds of a validation epoch per setting, the settings interleaved in every repeat (the load of a
    shared machine falls on all three alike)."""
    kinds = ("Vendi alone", "alongside", "second pass")
    runs = {kind: trainer_for(kind, steps, args) for kind in kinds}
    seconds: dict[str, list[float]] = {kind: [] for kind in (*kinds, "FID alongside", "FID second pass")}
    for _ in range(args.repeats):
        for kind, (trainer, module, data) in runs.items():
            start = time.perf_counter()
            trainer.validate(module, datamodule=data, verbose=False)
            seconds[kind].append(time.perf_counter() - start)
            if kind == "alongside":  # FID's updates and compute inside the callback's own pass
                seconds["FID alongside"].append(trainer.callbacks[0].last_timings["alongside"])
            if kind == "second pass":  # the whole second callback: sampling again, FID's updates and compute
                seconds["FID second pass"].append(trainer.callbacks[1].seconds)
    return {kind: statistics.median(values) for kind, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=10_000)
    parser.add_argument("--sample-batch-size", type=int, default=500)
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 50])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.n_samples} samples in chunks of "
          f"{args.sample_batch_size}, median of {args.repeats} validation epochs")
    print(f"{'sampler steps':>13} | epoch: {'Vendi alone s':>13} {'+ FID alongside s':>17} {'+ FID second pass s':>19} "
          f"| FID's own time: {'alongside s':>11} {'second pass s':>13} {'ratio':>6}")
    for steps in args.steps:
        base, along, second, own, again = measure(steps, args).values()
        print(f"{steps:>13} | {'':7}{base:>13.2f} {along:>17.2f} {second:>19.2f} | {'':16}{own:>11.3f} {again:>13.3f} "
              f"{again / own:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
