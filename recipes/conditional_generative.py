# ruff: noqa: E402 - os.environ is set before the imports that load torch
"""Train a class-conditional VAE on 8x8 digits and name the prompts it stops varying on, while it trains.

    python recipes/conditional_generative.py --config recipes/configs/conditional_normal.yaml
    python recipes/conditional_generative.py --config recipes/configs/conditional_collapse.yaml  # 4, 9 collapse

A LightningCLI over `ConditionalDigitsVAE` (prompts: the captions "a photo of
the digit k", given to the model and the metric as the label k, one-hot) and
:class:`~lightning_spectral.data.DigitsImages`; the YAML adds
:class:`~lightning_spectral.callbacks.GeneratedSamples` with ``prompts``: every ``every_n_epochs`` it draws the same
seeded samples, ``n_samples / 10`` per prompt, and logs the unconditional FKEA Vendi / RKE beside
:class:`~lightning_spectral.metrics.ConditionalVendi` (Conditional-Vendi, Information-Vendi, each prompt's Vendi) and
a gallery of the least diverse prompts. The recipe adds torchmetrics' KID with the same extractor on the same
samples in the same pass (``with_kid`` of ``recipes/generative.py``: ``alongside=`` of the callback), and prints the
numbers per measured epoch, then each prompt's Vendi at the last one with the prompts that collapsed (Vendi below
half the median prompt's).
``--summary_json`` also writes it to a file. Read it with docs/conditional.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # passive OpenMP threads on shared cores (recipes/generative.py)

import statistics
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from digits_vae import ConditionalDigitsVAE
from generative import GenerativeCLI, kid_of, with_kid, write_summary  # the recipe beside this one

from lightning_spectral.callbacks import GeneratedSamples
from lightning_spectral.data import DigitsImages
from lightning_spectral.io import check_checkpoint, check_writable, run_script
from lightning_spectral.metrics import ConditionalVendi, FKEAVendi


def roles(generated: GeneratedSamples) -> dict[str, str]:
    """The callback's metric names by role: ``vendi`` (FKEAVendi), ``cond`` (ConditionalVendi)."""
    kinds = {FKEAVendi: "vendi", ConditionalVendi: "cond"}
    return {role: name for name, metric in generated.metrics.items() for kind, role in kinds.items()
            if isinstance(metric, kind)}


def collapsed_prompts(per_prompt: dict[int, float], ratio: float = 0.5) -> list[int]:
    """Labels whose Vendi is below ``ratio`` x the median prompt's: the prompts the model stopped varying on."""
    if not per_prompt:
        return []
    median = statistics.median(per_prompt.values())
    return sorted(label for label, value in per_prompt.items() if value < ratio * median)


def summarise(generated: GeneratedSamples) -> dict[str, Any]:
    """Per measured epoch: Vendi-1, RKE, Conditional-Vendi-1 / RKE, Information-Vendi-1, KID, each prompt's Vendi;
    then the collapsed prompts of the last epoch and the gallery rows of the least diverse prompts."""
    role = roles(generated)
    rows = []
    for epoch, values in sorted(generated.history.items()):
        row: dict[str, Any] = {"epoch": epoch + 1}
        if "vendi" in role:
            row.update(vendi=values.get(f"{role['vendi']}/vendi_1"), rke=values.get(f"{role['vendi']}/vendi_2"))
        if "cond" in role:
            name = role["cond"]
            row.update(cond_vendi=values.get(f"{name}/conditional_1"), cond_rke=values.get(f"{name}/conditional_2"),
                       information=values.get(f"{name}/information_1"))
            # each prompt's Vendi: a per-label detail (the configs set `log_detail: true`)
            row["per_prompt"] = {int(key.rsplit("/", 1)[1]): value for key, value in values.items()
                                 if key.startswith(f"{name}/detail/prompt/")}
        if kid_of(values) is not None:
            row["kid"], row["kid_std"] = kid_of(values)
        rows.append(row)
    last = rows[-1].get("per_prompt", {}) if rows else {}
    gallery = generated.last_galleries.get(f"{role.get('cond')}/least_diverse_prompts")
    return {"epochs": rows, "collapsed": collapsed_prompts(last),
            "least_diverse": [] if gallery is None else list(gallery.labels)}


def summary_text(result: dict[str, Any], generated: GeneratedSamples, names: Optional[list[str]]) -> str:
    """The table a person reads at the end of a run."""
    lines = ["", "=" * 100,
             f"Conditional VAE, {generated.n_samples} samples per measured epoch, one prompt per sample.", "",
             f"{'epochs':>6} | {'Vendi-1':>7} {'RKE':>6} | {'Cond-Vendi-1':>12} {'Cond-RKE':>8} "
             f"{'Info-Vendi':>10} | {'min prompt':>10} | {'KID mean':>9}"]

    def number(row: dict[str, Any], key: str, spec: str) -> str:
        value = row.get(key)
        return format(value, spec) if value is not None else "-"

    for row in result["epochs"]:
        low = min(row.get("per_prompt", {}).values(), default=None)
        lines.append(
            f"{row['epoch']:>6} | {number(row, 'vendi', '>7.2f')} {number(row, 'rke', '>6.2f')} | "
            f"{number(row, 'cond_vendi', '>12.2f')} {number(row, 'cond_rke', '>8.2f')} "
            f"{number(row, 'information', '>10.2f')} | {'-' if low is None else format(low, '>10.2f')} | "
            f"{number(row, 'kid', '>9.5f')}"
        )
    if result["epochs"]:
        per_prompt = result["epochs"][-1].get("per_prompt", {})
        done = result["epochs"][-1]["epoch"]
        lines.append(f"\nEach prompt's Vendi after {done} epoch{'' if done == 1 else 's'}:")
        for label, value in sorted(per_prompt.items()):
            caption = names[label] if names else f"prompt {label}"
            lines.append(f"  {caption:<28} {value:6.2f}" + ("   <- collapsed" if label in result["collapsed"] else ""))
    lines.append("\nCollapsed prompts (Vendi < half the median prompt's): "
                 + (", ".join(names[i] if names else str(i) for i in result["collapsed"]) or "none"))
    if result["least_diverse"]:
        lines.append("Gallery rows (TensorBoard, gen/<metric>/least_diverse_prompts): "
                     + "; ".join(result["least_diverse"]))
    lines.append("=" * 100)
    return "\n".join(lines)


def main(args: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the recipe; returns ``{"epochs": [...], "collapsed": [...], "least_diverse": [...], "log_dir": ...}``."""
    cli = GenerativeCLI(ConditionalDigitsVAE, DigitsImages, run=False, args=args, seed_everything_default=0,
                         save_config_kwargs={"overwrite": True})
    config, trainer = cli.config, cli.trainer
    if config["summary_json"]:
        check_writable(config["summary_json"], "--summary_json")
    if config["ckpt_path"] is not None:
        check_checkpoint(config["ckpt_path"])  # a cut-off file: one clear line before any work
    generated = next((c for c in trainer.callbacks if isinstance(c, GeneratedSamples)), None)
    if generated is None or generated.prompts is None:
        raise ValueError("the config needs a lightning_spectral.callbacks.GeneratedSamples callback with `prompts`; "
                         "see recipes/configs/conditional_normal.yaml.")
    if config["kid_subsets"] > 0:
        with_kid(generated, subsets=config["kid_subsets"], subset_size=config["kid_subset_size"])
    trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=config["ckpt_path"])
    result = summarise(generated)
    result["log_dir"] = trainer.logger.log_dir if trainer.logger is not None else None
    cond = generated.metrics.get(roles(generated).get("cond", ""))
    names = getattr(cond, "prompt_names", None)
    if trainer.is_global_zero:
        print(summary_text(result, generated, names), flush=True)
        write_summary(result, config["summary_json"])
    return result


if __name__ == "__main__":
    run_script(main, __file__)  # LightningCLI reads sys.argv
