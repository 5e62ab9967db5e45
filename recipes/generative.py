# ruff: noqa: E402 - os.environ is set before the imports that load torch
"""Train a VAE on 8x8 digits and watch its samples: which modes it drops or invents, while it trains.

    python recipes/generative.py --config recipes/configs/generative_normal.yaml     # every digit, every epoch
    python recipes/generative.py --config recipes/configs/generative_collapse.yaml   # 3 and 7 leave at epoch 30
    python recipes/generative.py --config recipes/configs/generative_collapse.yaml --trainer.max_epochs 60
    python recipes/generative.py --config recipes/configs/generative_collapse.yaml \\
        --ckpt_path demo_output/generative_collapse/version_0/checkpoints/last.ckpt          # resume

A LightningCLI over ``DigitsVAE`` (``digits_vae.py`` beside this script) and
:class:`~lightning_spectral.data.DigitsImages`; the YAML adds the callback
:class:`~lightning_spectral.callbacks.GeneratedSamples`, which every ``every_n_epochs`` draws a fixed, seeded set
of samples, embeds them with a frozen extractor (the pixels, :class:`~lightning_spectral.encoders.PixelImageFeature`)
and logs FKEA Vendi / RKE, FINC's novel and missing modes against the training split (with galleries of generated
and real images, and the spectra) and FastMMD with its p-value against the held-out split. The recipe adds
torchmetrics' ``KernelInceptionDistance`` with the same extractor, fed the same samples in the same pass
(``alongside=`` of the callback, :func:`with_kid`), and prints a summary: the numbers per measured epoch, then the
missing and novel modes of the last one with the digits their images show (the real images' labels for missing
modes; the nearest training image's label, in the extractor's space, for the generated images of novel modes). Read
it with ``docs/generative.md``; ``--summary_json`` also writes it to a file.
"""

from __future__ import annotations

import os

# OpenMP threads that wait passively: with active waiting (OpenMP's default) a run sharing its cores with other
# processes ran 10x slower (the generative recipe: 14 s instead of 1 s an epoch, 2 cores). Set before torch loads
# OpenMP; an OMP_WAIT_POLICY of your own wins. The Makefile does the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import json
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import torch
from digits_vae import DigitsVAE
from jsonargparse.typing import NonNegativeInt, PositiveInt
from lightning import LightningModule
from lightning.pytorch.cli import LightningCLI
from torch import Tensor
from torchmetrics.image.kid import KernelInceptionDistance

from lightning_spectral.callbacks import DiversityRegularizer, GeneratedSamples
from lightning_spectral.callbacks.alongside import AlongsideMetrics
from lightning_spectral.data import DigitsImages
from lightning_spectral.io import check_checkpoint, check_writable, run_script, written
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi


def with_kid(generated: GeneratedSamples, subsets: int = 100, subset_size: int = 500,
             reference: str = "reference_dataloader") -> GeneratedSamples:
    """``generated`` with torchmetrics' KID of its own samples beside its metrics (``alongside``, logged as
    ``gen/kid/mean`` and ``gen/kid/std``): the same extractor, the same images in the same sampling pass, the real side
    (the reference loader's images) fed once and kept, KID's subsets drawn from the callback's ``seed``.

    The recipe adds it from its ``--kid_subsets`` flags, before the callback is set up; a config file can name it
    under the callback's ``alongside`` instead.
    """
    kid = KernelInceptionDistance(
        feature=generated.feature.extractor, subsets=subsets, subset_size=subset_size, reset_real_features=False
    )
    generated.alongside = AlongsideMetrics({**generated.alongside.metrics, "kid": kid}, "GeneratedSamples",
                                           taken=generated.metrics)
    generated.references["kid"] = reference
    return generated


def kid_of(values: dict[str, float]) -> Optional[tuple[float, float]]:
    """``(mean, std)`` of KID in an epoch's values, when it was measured."""
    return (values["kid/mean"], values["kid/std"]) if "kid/mean" in values else None


def names(generated: GeneratedSamples) -> dict[str, str]:
    """The metric names of the callback by role: ``vendi``, ``finc``, ``mmd``."""
    roles = {FKEAVendi: "vendi", FINCNovelty: "finc", FastMMD: "mmd"}
    return {role: name for name, metric in generated.metrics.items() for kind, role in roles.items()
            if isinstance(metric, kind)}


def majority(labels: Tensor) -> str:
    """``"7 (15/16)"``: the most frequent class and its count."""
    counts = Counter(labels.tolist())
    label, count = counts.most_common(1)[0]
    return f"{label} ({count}/{len(labels)})"


@torch.no_grad()
def nearest_classes(generated: GeneratedSamples, data: DigitsImages, images: list[Tensor]) -> list[Tensor]:
    """Per row of generated images, the class of each image's nearest training image in the extractor's space."""
    batches = list(data.reference_dataloader())
    real = torch.cat([generated.feature(batch["image"]) for batch in batches]).cpu()
    labels = torch.cat([batch["label"] for batch in batches])
    return [labels[torch.cdist(generated.feature(row).cpu(), real).argmin(1)] for row in images]


def summarise(generated: GeneratedSamples, data: DigitsImages) -> dict[str, Any]:
    """The per-epoch rows and the modes of the last measured epoch, as numbers; a row's ``epoch`` counts the epochs
    done (Lightning's ``current_epoch`` + 1: the epoch lines' ``gen epoch 25`` is the row of 26)."""
    role = names(generated)
    rows = []
    for epoch, values in sorted(generated.history.items()):
        row: dict[str, Any] = {"epoch": epoch + 1}
        if "vendi" in role:
            row["vendi"] = values.get(f"{role['vendi']}/vendi_1")
            row["rke"] = values.get(f"{role['vendi']}/vendi_2")
        if "finc" in role:
            name = role["finc"]
            row.update(novel=values[f"{name}/novel_modes"], missing=values[f"{name}/missing_modes"],
                       novelty=values[f"{name}/novel_score"], missing_mass=values[f"{name}/missing_score"])
        if "mmd" in role:
            minus_log10_p = values.get(f"{role['mmd']}/minus_log10_p")
            row.update(mmd=values[f"{role['mmd']}/mmd2"], p_value=None if minus_log10_p is None else 10 ** -minus_log10_p)
        if kid_of(values) is not None:
            row["kid"], row["kid_std"] = kid_of(values)
        rows.append(row)
    modes: dict[str, list[dict[str, Any]]] = {}
    if "finc" in role:
        for kind in ("missing", "novel"):
            gallery = generated.last_galleries.get(f"{role['finc']}/{kind}")
            if gallery is None:
                modes[kind] = []
                continue
            classes = gallery.classes if kind == "missing" else nearest_classes(generated, data, gallery.images)
            modes[kind] = [
                {"mode": label, "classes": None if found is None else found.tolist(),
                 "shows": "unlabelled" if found is None else majority(found)}
                for label, found in zip(gallery.labels, classes)
            ]
    return {"epochs": rows, "modes": modes}


def summary_text(
    result: dict[str, Any], data: DigitsImages, generated: GeneratedSamples, log_dir: Optional[str],
    model: str = "the VAE",
) -> str:
    """The table a person reads at the end of a run; ``model`` names the generative model in its title."""
    drop = f"digits {list(data.drop_classes)} leave the training stream after {data.drop_after_epoch} epochs" if (
        data.drop_classes) else "every digit, every epoch"
    lines = ["", "=" * 104, f"Generated samples of {model} ({drop}); {generated.n_samples} samples per measured epoch.",
             "FINC (rho as configured) and KID against the training split, FastMMD against the held-out split.", "",
             f"{'epochs':>6} | {'Vendi-1':>7} {'RKE':>6} | {'FINC novel':>10} {'missing':>7} {'missing mass':>12} | "
             f"{'MMD^2':>8} {'p-value':>8} | {'KID mean':>9} {'KID std':>8}"]
    for row in result["epochs"]:
        def number(key: str, spec: str) -> str:
            value = row.get(key)
            return format(value, spec) if value is not None else "-"

        lines.append(
            f"{row['epoch']:>6} | {number('vendi', '>7.2f')} {number('rke', '>6.2f')} | {number('novel', '>10.0f')} "
            f"{number('missing', '>7.0f')} {number('missing_mass', '>12.4f')} | {number('mmd', '>8.5f')} "
            f"{number('p_value', '>8.1e')} | {number('kid', '>9.5f')} {number('kid_std', '>8.5f')}"
        )
    last = result["epochs"][-1]["epoch"] if result["epochs"] else "-"
    for kind, what in (("missing", "real images it shows (labels)"), ("novel", "nearest training image's digit")):
        found = result["modes"].get(kind, [])
        after = f"after {last} epoch{'' if last == 1 else 's'}"
        lines.append(f"\nFINC {kind} modes {after}: " + ("none significant" if not found else what))
        lines += [f"  {mode['mode']:<24} -> {mode['shows']}" for mode in found]
    if result.get("diversity"):
        lines.append("\nDiversityRegularizer, the last epoch's means: " + ", ".join(
            f"{key} {value:.3f}" for key, value in result["diversity"].items()))
    lines.append("\nKID is one number; FINC names the modes (docs/generative.md: how to read this).")
    if log_dir is not None:
        lines.append(f"TensorBoard (galleries, spectra, every value): tensorboard --logdir {Path(log_dir).parent}")
    lines.append("=" * 104)
    return "\n".join(lines)


class GenerativeCLI(LightningCLI):
    """LightningCLI plus the recipe's options: resume, KID alongside, summary file."""

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_argument("--ckpt_path", type=Optional[str], default=None, help="Resume from this checkpoint.")
        # jsonargparse refuses a negative count at parse time (exit 2, naming the flag): -1 would skip KID silently
        parser.add_argument("--kid_subsets", type=NonNegativeInt, default=100, help="KID subsets (0: no KID).")
        parser.add_argument("--kid_subset_size", type=PositiveInt, default=500, help="KID subset size.")
        parser.add_argument("--summary_json", type=Optional[str], default=None, help="Also write the summary here.")


def main(args: Optional[list[str]] = None, model_class: type[LightningModule] = DigitsVAE) -> dict[str, Any]:
    """Run the recipe with ``model_class`` (``recipes/gan.py`` passes ``DigitsGAN``); returns ``{"epochs": [...],
    "modes": {...}, "log_dir": ...}`` (see :func:`summarise`)."""
    cli = GenerativeCLI(model_class, DigitsImages, run=False, args=args, seed_everything_default=0,
                        save_config_kwargs={"overwrite": True})
    config, trainer = cli.config, cli.trainer
    if config["summary_json"]:
        check_writable(config["summary_json"], "--summary_json")  # before training, not after it
    if config["ckpt_path"] is not None:
        check_checkpoint(config["ckpt_path"])  # a cut-off file: one clear line, not torch's zip reader traceback
    generated = next((c for c in trainer.callbacks if isinstance(c, GeneratedSamples)), None)
    if generated is None:
        raise ValueError("the config has no lightning_spectral.callbacks.GeneratedSamples callback; see "
                         "recipes/configs/generative_normal.yaml.")
    if config["kid_subsets"] > 0:
        with_kid(generated, subsets=config["kid_subsets"], subset_size=config["kid_subset_size"])
    trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=config["ckpt_path"])
    result = summarise(generated, cli.datamodule)
    result["log_dir"] = trainer.logger.log_dir if trainer.logger is not None else None
    result["timings"] = dict(generated.last_timings)
    regularizer = next((c for c in trainer.callbacks if isinstance(c, DiversityRegularizer)), None)
    if regularizer is not None:  # the loss it added, as the last epoch's means
        logged = trainer.callback_metrics
        result["diversity"] = {key: float(logged[f"{regularizer.log_prefix}{key}_epoch"]) for key in ("loss", "rke")
                               if f"{regularizer.log_prefix}{key}_epoch" in logged}
    if trainer.is_global_zero:
        model = getattr(model_class, "display_name", model_class.__name__)  # DigitsVAE: "the VAE"
        print(summary_text(result, cli.datamodule, generated, result["log_dir"], model), flush=True)
        write_summary(result, config["summary_json"])
    return result


def write_summary(result: dict[str, Any], summary_json: Optional[str]) -> None:
    """``result`` as JSON into ``--summary_json`` (when given) and ``summary.json`` in the run's log dir, each
    written whole or not at all."""
    in_log_dir = result["log_dir"] and str(Path(result["log_dir"]) / "summary.json")
    for path in {summary_json, in_log_dir} - {None, ""}:
        with written(path, "--summary_json" if path == summary_json else "log_dir") as temporary:
            temporary.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    run_script(main, __file__)
