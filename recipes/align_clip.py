# ruff: noqa: E402 - os.environ is set before the imports that load torch
"""SPEC-align an open_clip image encoder to a reference encoder, with OOD monitoring and embedding metrics.

    python recipes/align_clip.py --config recipes/configs/tiny.yaml            # offline default (make demo)
    python recipes/align_clip.py --config recipes/configs/vit_b32_dinov2.yaml  # the paper's setting (GPU)
    python recipes/align_clip.py --config recipes/configs/tiny.yaml --trainer.max_epochs 2   # any override
    python recipes/align_clip.py --config recipes/configs/tiny.yaml --ckpt_path last.ckpt    # resume

A LightningCLI over ``CLIPFineTune`` (``clip_finetune.py`` beside this script) (open_clip's contrastive loss) and a
datamodule of :mod:`lightning_spectral.data`; the YAML adds the callbacks ``SPECAlign`` (weight x SPEC-diff to
the reference), ``KPCAOODMonitor`` (kernel PCA of the image embeddings, scoring validation and held-out
classes), ``EmbeddingMetrics`` (Vendi of the validation embeddings; FINC novelty and FastMMD of
validation against training embeddings; mode galleries) and ``DriftMonitor`` (the clusters of the validation
images the encoder lost since the start of the fit, and zero-shot accuracy against the start's). Before and after training the recipe evaluates the
model from scratch (:func:`evaluate`, with the callbacks' own Vendi and kernel PCA settings) and prints a summary;
``--summary_json`` also writes it to a file. ``--reference_weights`` sets the weights file of the ``SPECAlign``
callback's reference encoder (jsonargparse cannot address one item of ``trainer.callbacks`` on the command line:
``--trainer.callbacks.0.init_args...`` is refused).
"""

from __future__ import annotations

import os

# OpenMP threads that wait passively: with active waiting (OpenMP's default) a run sharing its cores with other
# processes ran 10x slower (the generative recipe: 14 s instead of 1 s an epoch, 2 cores). Set before torch loads
# OpenMP; an OMP_WAIT_POLICY of your own wins. The Makefile does the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import importlib
import inspect
import json
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from clip_finetune import CLIPFineTune
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics.functional.classification import multiclass_accuracy

from lightning_spectral.callbacks import EmbeddingMetrics, KPCAOODMonitor, SPECAlign
from lightning_spectral.functional import detection_metrics, spec
from lightning_spectral.io import check_checkpoint, check_writable, run_script, written
from lightning_spectral.metrics import FKEAVendi, KernelPCAOOD

SUMMARY_ROWS = {
    "spec_diff_to_reference": "SPEC-diff to the reference, val (lower = aligned)",
    "knn_accuracy": "kNN accuracy (k=10, cosine, val vs train)",
    "reference_knn_accuracy": "  the reference encoder's own kNN accuracy",
    "zero_shot_accuracy": "zero-shot accuracy (class prompts)",
    "vendi": "Vendi score of val image embeddings (see below)",
    "ood_auroc": "OOD AUROC of the held-out classes (KPCA)",
}
#: The callbacks' logged values that repeat a row of the table (same data, weights and settings).
SAME_AS_LOGGED = {"vendi": "val/vendi/vendi_1", "ood_auroc": "ood/held_out/auroc"}


def summary_settings(callbacks: Any) -> dict[str, dict[str, Any]]:
    """The Vendi metric's and the kernel PCA detector's settings of the run's callbacks (``EmbeddingMetrics``'
    first ``FKEAVendi``, ``KPCAOODMonitor``'s detector), so that the summary recomputes the numbers they log.

    Without those callbacks: Vendi at sigma 0.5 with 2r = 1024, and the paper's CoRP detector at sigma 0.5.
    """
    settings: dict[str, dict[str, Any]] = {
        "vendi": dict(sigma=0.5, n_frequencies=512, seed=0, alpha=1.0),
        "kpca": dict(mapping="corp", sigma=0.5, n_frequencies=512),
    }
    for callback in callbacks:
        if isinstance(callback, EmbeddingMetrics):
            vendi = next((m for m in callback.metrics.values() if isinstance(m, FKEAVendi)), None)
            if vendi is not None:
                alpha = vendi.alpha if isinstance(vendi.alpha, (int, float, str)) else 1.0
                settings["vendi"] = dict(sigma=vendi.sigma, n_frequencies=vendi.n_frequencies, seed=vendi.seed,
                                         alpha=alpha)
        if isinstance(callback, KPCAOODMonitor):
            d = callback.detector
            settings["kpca"] = dict(mapping=d.mapping, sigma=d.sigma, n_frequencies=d.n_frequencies,
                                    explained_variance=d.explained_variance, n_components=d.n_components, seed=d.seed)
    return settings


@torch.no_grad()
def embed(module: CLIPFineTune, loader: Any, reference: Any = None) -> dict[str, torch.Tensor]:
    """L2-normalised image embeddings ``z``, labels and (optionally) reference embeddings ``ref`` of a loader."""
    out: dict[str, list[torch.Tensor]] = {"z": [], "label": [], "ref": []}
    for batch in loader:
        out["z"].append(module.image_tower(batch["image"].to(module.device)).float().cpu())
        out["label"].append(batch["label"].cpu())
        if reference is not None:
            out["ref"].append(reference(batch, module.device).float().cpu())
    return {key: torch.cat(value) for key, value in out.items() if value}


def accuracy(predicted: torch.Tensor, labels: torch.Tensor) -> float:
    """Share of ``predicted`` class ids equal to ``labels``; labels -1 (unknown, as the datamodules write them)
    are left out."""
    classes = max(2, int(torch.cat([predicted, labels]).max()) + 1)  # torchmetrics needs at least 2
    return float(multiclass_accuracy(predicted, labels, num_classes=classes, average="micro", ignore_index=-1))


def knn_accuracy(
    train: torch.Tensor, train_labels: torch.Tensor, test: torch.Tensor, labels: torch.Tensor, k: int = 10
) -> float:
    """Accuracy of the majority vote of the ``k`` nearest training embeddings by cosine similarity."""
    train, test = torch.nn.functional.normalize(train, dim=1), torch.nn.functional.normalize(test, dim=1)
    votes = train_labels[(test @ train.T).topk(k, dim=1).indices]
    return accuracy(votes.mode(dim=1).values, labels)


@torch.no_grad()
def evaluate(
    module: CLIPFineTune, datamodule: Any, align: Optional[SPECAlign], settings: Optional[dict[str, dict]] = None
) -> dict[str, float]:
    """The summary's numbers, computed from scratch on the current weights (in eval mode, restored after), on all
    training, validation and held-out samples; Vendi and the kernel PCA detector with ``settings``
    (:func:`summary_settings`). The accuracies (kNN, the reference's kNN, zero-shot) are left out when the training or
    the validation samples carry no class label (every label -1)."""
    settings = settings or summary_settings(())
    was_training = module.training
    module.eval()
    reference = align.reference.to(module.device) if align is not None else None
    train = embed(module, datamodule.train_dataloader_for_eval(), reference)
    val = embed(module, datamodule.val_dataloader_for_eval(), reference)
    labelled = bool((train["label"] >= 0).any() and (val["label"] >= 0).any())
    result = {}
    if labelled:
        result["knn_accuracy"] = knn_accuracy(train["z"], train["label"], val["z"], val["label"])
    if reference is not None:
        result["spec_diff_to_reference"] = float(spec(val["z"], val["ref"], "cosine").spec_diff)
        if labelled:
            result["reference_knn_accuracy"] = knn_accuracy(train["ref"], train["label"], val["ref"], val["label"])
    if labelled and getattr(datamodule, "prompts", None):
        classes = module.text_tower(module.tokenizer(datamodule.prompts).to(module.device)).float().cpu()
        result["zero_shot_accuracy"] = accuracy((val["z"] @ classes.T).argmax(1), val["label"])
    vendi = FKEAVendi(**settings["vendi"])
    vendi.update(val["z"])
    result["vendi"] = float(vendi.compute())
    if getattr(datamodule, "ood_set", None) is not None:
        ood = embed(module, datamodule.ood_dataloader())
        detector = KernelPCAOOD(**settings["kpca"]).fit([train["z"]])
        result["ood_auroc"] = float(detection_metrics(detector.score(val["z"]), detector.score(ood["z"]))["auroc"])
    module.train(was_training)
    return result


def summary_text(
    before: Optional[dict[str, float]],
    after: dict[str, float],
    logged: dict[str, float],
    log_dir: Optional[str],
    settings: Optional[dict[str, dict]] = None,
    classes: Optional[int] = None,
) -> str:
    """The table a person reads at the end of a run: what each number is computed from, and how to read Vendi.

    A kNN accuracy absent from ``after`` (no class labels) reads "n/a"; ``classes`` (the validation set's number
    of classes, :func:`class_count`) is named in the Vendi note when known.
    """
    vendi = (settings or summary_settings(()))["vendi"]
    lines = [
        "",
        "=" * 80,
        "Recomputed from scratch on the whole validation set (and training / held-out sets), before and after",
        "training, with the callbacks' Vendi and kernel PCA settings:",
        f"{'':56s}{'before':>12s}{'after':>12s}",
    ]
    unlabelled = bool(after) and "knn_accuracy" not in after  # evaluate() leaves the accuracies out then
    not_available = {"knn_accuracy"} | ({"reference_knn_accuracy"} if "spec_diff_to_reference" in after else set())
    for key, label in SUMMARY_ROWS.items():
        if key in after:
            first = (before or {}).get(key, math.nan)
            lines.append(f"{label:56s}{first:12.4f}{after[key]:12.4f}")
        elif unlabelled and key in not_available:
            lines.append(f"{label:56s}{'n/a':>12s}{'n/a':>12s}")
    if unlabelled:
        lines.append("  (n/a: the dataset has no class labels; give the CSV a class column and `label_key`)")
    if "vendi" in after:
        count = (f"with {classes} classes, scores far above {classes} are expected" if classes
                 else "scores far above the number of classes are expected")
        lines += [
            f"  Vendi counts effective modes of the embedding at sigma = {vendi['sigma']:g} (FKEA, 2r = "
            f"{2 * vendi['n_frequencies']}),",
            f"  within-class variation included: {count} and only compare",
            "  at one sigma and one embedding (docs/concepts.md).",
        ]
    # Lightning logs on_step + on_epoch values as `x_step` / `x_epoch` next to `x`: show each value once
    interesting = [
        k
        for k in sorted(logged)
        if k.startswith(("ood/", "val/", "spec_align/", "drift/")) and not k.endswith(("_step", "_epoch"))
    ]
    if interesting:
        lines.append("\nLogged by the callbacks at the last validation epoch, from the embeddings of that epoch's")
        lines.append("validation batches (the weights of 'after'):")
        lines += [f"  {key:54s}{logged[key]:12.4f}" for key in interesting]
        lines += agreement(after, logged)
    if log_dir is not None:
        lines.append(f"\nTensorBoard logs, mode galleries and summary.json: {log_dir}")
        lines.append(f"  view them with: tensorboard --logdir {Path(log_dir).parent}")
    lines.append("=" * 80)
    return "\n".join(lines)


def agreement(after: dict[str, float], logged: dict[str, float]) -> list[str]:
    """Lines saying whether the logged values that repeat a row of the table agree with it, and why not."""
    pairs = [(row, key) for row, key in SAME_AS_LOGGED.items() if row in after and key in logged]
    if not pairs:
        return []
    names = ", ".join(f"{key} vs {row}" for row, key in pairs)
    if all(math.isclose(after[row], logged[key], rel_tol=1e-5, abs_tol=1e-6) for row, key in pairs):
        return [f"  ({names}: equal, the same weights, samples and settings)"]
    return [
        f"  ({names}: the callbacks saw only the validation batches of that epoch (e.g. limit_val_batches),",
        "   the table every validation sample)",
    ]


def class_count(datamodule: Any) -> Optional[int]:
    """The number of classes among the validation set's labels (-1, unknown, left out); ``None`` without labels."""
    labels = getattr(getattr(datamodule, "val_set", None), "labels", None)
    known = {int(label) for label in labels if int(label) >= 0} if labels is not None else set()
    return len(known) or None


class AlignCLI(LightningCLI):
    """LightningCLI plus the recipe's own options: resume, before / after evaluation, summary file, and the
    reference encoder's weights."""

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_argument("--ckpt_path", type=Optional[str], default=None, help="Resume from this checkpoint.")
        parser.add_argument("--evaluate", type=bool, default=True, help="Evaluate before and after training.")
        parser.add_argument("--summary_json", type=Optional[str], default=None, help="Also write the summary here.")
        parser.add_argument(
            "--reference_weights", type=Optional[str], default=None,
            help="Weights file of the SPECAlign callback's reference encoder (its `weights` or `pretrained`).",
        )

    def before_instantiate_classes(self) -> None:
        """``--reference_weights`` into the first ``SPECAlign`` callback's reference (a class taking ``weights`` or
        ``pretrained``), before the encoder is built."""
        weights = self.config.get("reference_weights")
        if weights is None:
            return
        for callback in self.config.get("trainer.callbacks") or []:
            if not str(callback.get("class_path", "")).endswith(".SPECAlign"):
                continue
            reference = callback.get("init_args.reference")
            if reference is not None and hasattr(reference, "get") and reference.get("class_path"):
                module, _, name = reference.class_path.rpartition(".")
                parameters = inspect.signature(getattr(importlib.import_module(module), name)).parameters
                key = next((k for k in ("weights", "pretrained") if k in parameters), None)
                if key is not None:
                    reference.init_args[key] = weights
                    return
        self.parser.error(
            "`--reference_weights`: the config has no SPECAlign callback whose reference is an encoder class "
            "taking `weights` or `pretrained`; set the reference's weights in the config instead."
        )


def prepare(cli: LightningCLI) -> None:
    """Give the datamodule the model's tokenizer and check that image sizes agree."""
    model, data = cli.model, cli.datamodule
    if getattr(data, "tokenizer", "absent") is None:
        data.tokenizer = model.tokenizer
    size = getattr(model.model.visual, "image_size", None)
    size = size[0] if isinstance(size, (tuple, list)) else size
    if size is not None and getattr(data, "image_size", size) != size:
        raise ValueError(
            f"`data.init_args.image_size`={data.image_size} but the model takes {size} x {size} images; set them equal."
        )


@contextmanager
def arguments_only(args: Optional[list[str]]) -> Iterator[None]:
    """While the CLI parses, ``sys.argv`` is the program name alone when ``args`` are given: LightningCLI warns
    when it sees both (a call from Python, e.g. the tests, under a command line of its own)."""
    if args is None:
        yield
        return
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        yield
    finally:
        sys.argv = saved


def main(args: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the recipe; returns ``{"before", "after", "logged", "log_dir"}``: the evaluations before and after
    training (``before`` is None when resuming or with ``--evaluate false``, ``after`` then ``{}``) and the values
    the callbacks logged at the last validation epoch.

    Args:
        args: command-line style arguments; ``None`` reads ``sys.argv`` (the script).
    """
    with arguments_only(args):
        cli = AlignCLI(
            CLIPFineTune,
            run=False,
            args=args,
            subclass_mode_data=True,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
        )
    prepare(cli)
    config = cli.config
    if config["summary_json"]:
        check_writable(config["summary_json"], "--summary_json")  # before training, not after it
    if config["ckpt_path"] is not None:
        check_checkpoint(config["ckpt_path"])  # a cut-off file: one clear line, not torch's zip reader traceback
    align = next((c for c in cli.trainer.callbacks if isinstance(c, SPECAlign)), None)
    settings = summary_settings(cli.trainer.callbacks)
    before = None
    if config["evaluate"] and config["ckpt_path"] is None:
        rank_zero_info("Evaluating the initial model (kNN, zero-shot, SPEC-diff, Vendi, OOD AUROC) ...")
        before = evaluate(cli.model, cli.datamodule, align, settings)
    rank_zero_info("Training (progress on stderr; metrics are logged every validation epoch) ...")
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=config["ckpt_path"])
    after = evaluate(cli.model, cli.datamodule, align, settings) if config["evaluate"] else {}
    logged = {k: float(v) for k, v in cli.trainer.callback_metrics.items() if v.numel() == 1}
    log_dir = cli.trainer.logger.log_dir if cli.trainer.logger is not None else None
    result = {"before": before, "after": after, "logged": logged, "log_dir": log_dir}
    if cli.trainer.is_global_zero:
        if config["evaluate"]:
            print(summary_text(before, after, logged, log_dir, settings, class_count(cli.datamodule)), flush=True)
        for path in {config["summary_json"], log_dir and str(Path(log_dir) / "summary.json")} - {None}:
            with written(path, "--summary_json" if path == config["summary_json"] else "log_dir") as temporary:
                temporary.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    run_script(main, __file__)  # LightningCLI reads sys.argv
