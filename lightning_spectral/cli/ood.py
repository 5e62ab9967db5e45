"""``lightning-spectral ood TRAIN TEST``: fit the kernel-PCA detector
([`KernelPCAOOD`][lightning_spectral.metrics.KernelPCAOOD])
on TRAIN (streamed), optionally calibrate a threshold on VAL, score TEST (and an OOD set: AUROC / FPR)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from lightning_spectral.cli import images
from lightning_spectral.cli.reader import EmbeddingFile, shard_rows
from lightning_spectral.cli.runtime import Session, UsageError, positive_ints, same_width
from lightning_spectral.io.writing import written
from lightning_spectral.sync.collectives import all_gather_rows

#: Defaults of the flags, equal to KernelPCAOOD's own (a test keeps them in sync).
DEFAULTS = {"mapping": "corp", "sigma": 0.5, "n_frequencies": 1024, "explained_variance": 0.9}


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "ood",
        parents=[common],
        help="kernel-PCA out-of-distribution scores: fit on TRAIN, score TEST (AUROC / FPR with --ood).",
        description="Fit kernel PCA (CoRP / CoP / linear) on the in-distribution embeddings TRAIN, score TEST by "
        "reconstruction error (higher = more out-of-distribution); --calibrate VAL sets the threshold keeping --tpr "
        "of VAL, --ood OODFILE reports AUROC and FPR at --tpr with TEST as the in-distribution side.",
    )
    parser.add_argument("train", metavar="TRAIN", help="in-distribution embeddings to fit on (.npy, .pt, "
                        ".safetensors), or images: a folder or a .txt list")
    parser.add_argument("test", metavar="TEST", help="embeddings (or images) to score")
    parser.add_argument("--mapping", choices=("corp", "cop", "linear"), default=DEFAULTS["mapping"],
                        help="corp: cosine then Gaussian RFF; cop: cosine; linear: plain PCA (default: %(default)s)")
    parser.add_argument("--sigma", type=float, default=DEFAULTS["sigma"],
                        help="Gaussian bandwidth on the unit sphere for corp (default: %(default)s)")
    parser.add_argument("--n-frequencies", type=int, default=DEFAULTS["n_frequencies"],
                        help="r for corp (default: %(default)s)")
    parser.add_argument("--explained-variance", type=float, default=DEFAULTS["explained_variance"],
                        help="keep the fewest components reaching this variance ratio (default: %(default)s)")
    parser.add_argument("--n-components", type=int, help="keep exactly this many components instead")
    parser.add_argument("--seed", type=int, default=0, help="frequency seed (default: %(default)s)")
    parser.add_argument("--calibrate", metavar="VAL", help="in-distribution embeddings for the threshold")
    parser.add_argument("--tpr", type=float, default=0.95,
                        help="in-distribution acceptance rate of the threshold and of FPR (default: %(default)s)")
    parser.add_argument("--ood", metavar="OODFILE", help="out-of-distribution embeddings: AUROC and FPR vs TEST")
    parser.add_argument("--scores-out", metavar="PATH.npy",
                        help="save TEST scores (row order, float64); with --ood also <stem>.ood.npy")
    parser.add_argument("--top-k", type=int, default=16,
                        help="most out-of-distribution TEST samples listed (and shown) (default: %(default)s)")
    images.add_flags(parser)
    parser.set_defaults(handler=run)


def _scores(detector: Any, table: EmbeddingFile, args: argparse.Namespace, session: Session) -> Tensor:
    """Scores of every row of ``table`` (float64, row order), each rank scoring its shard, gathered on all ranks."""
    rows = shard_rows(table.n, session.rank, session.world_size)
    with session.agreed():
        chunks = table.chunks(args.batch_size, rows, session.progress, f"score {table.name}")
        parts = [detector.score(features.to(session.device)).cpu() for features, _ in chunks]
    local = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return all_gather_rows(local)


def _statistics(scores: Tensor) -> dict[str, float]:
    quantiles = torch.quantile(scores, torch.tensor([0.05, 0.5, 0.95], dtype=scores.dtype))
    return {
        "mean": float(scores.mean()),
        "std": float(scores.std()) if scores.numel() > 1 else 0.0,
        "min": float(scores.min()),
        "max": float(scores.max()),
        "q05": float(quantiles[0]),
        "median": float(quantiles[1]),
        "q95": float(quantiles[2]),
    }


def run(args: argparse.Namespace, session: Session) -> dict[str, Any]:
    from lightning_spectral.functional.ood import (
        detection_metrics,
        detection_standard_errors,
        rate_standard_error,
        threshold_at_tpr,
        threshold_standard_error,
    )
    from lightning_spectral.metrics.kernel_pca_ood import KernelPCAOOD

    if not 0 < args.tpr <= 1:
        raise UsageError(f"`--tpr` must be in (0, 1], got {args.tpr}.")
    if args.scores_out is not None and Path(args.scores_out).suffix.lower() != ".npy":
        raise UsageError(f"`--scores-out` must end in .npy, got {args.scores_out!r}.")
    positive_ints(args, "top_k", "batch_size")
    with session.agreed():
        train = EmbeddingFile(args.train, "TRAIN")
        files = {"test": EmbeddingFile(args.test, "TEST")}
        if args.calibrate is not None:
            files["calibrate"] = EmbeddingFile(args.calibrate, "--calibrate")
        if args.ood is not None:
            files["ood"] = EmbeddingFile(args.ood, "--ood")
        same_width([train, *files.values()])
        images.check_images_for(args.images, files["test"])  # a short --images list: refused before any work
        detector = KernelPCAOOD(
            args.mapping, args.sigma, args.n_frequencies, args.explained_variance, args.n_components, args.seed
        ).to(session.device)
        rows = shard_rows(train.n, session.rank, session.world_size)
        for features, _ in train.chunks(args.batch_size, rows, session.progress, "fit TRAIN"):
            detector.partial_fit(features.to(session.device))
    detector.finalize()  # a collective: all-reduces the sums
    eigenvalues = detector.eigenvalues_.double().cpu()
    kept = int(detector.components_.shape[1])
    result: dict[str, Any] = {
        "inputs": {"train": train.describe(), **{name: table.describe() for name, table in files.items()}},
        "model": {
            "n_components": kept,
            "width": detector.width,
            "explained_variance_ratio": float(eigenvalues[:kept].sum() / eigenvalues.sum().clamp_min(1e-300)),
        },
    }
    test_scores = _scores(detector, files["test"], args, session)
    result["test"] = _statistics(test_scores)
    threshold: Optional[float] = None
    if "calibrate" in files:
        calibration_scores = _scores(detector, files["calibrate"], args, session)
        threshold = float(threshold_at_tpr(calibration_scores, args.tpr))
        result["threshold"] = threshold
        result["threshold_se"] = float(threshold_standard_error(calibration_scores, args.tpr))
        flagged = float((test_scores > threshold).double().mean())
        result["test"]["flagged_rate"] = flagged
        result["test"]["flagged_rate_se"] = float(rate_standard_error(flagged, test_scores.numel()))
    ood_scores = None
    if "ood" in files:
        ood_scores = _scores(detector, files["ood"], args, session)
        metrics = detection_metrics(test_scores, ood_scores, args.tpr)
        errors = detection_standard_errors(test_scores, ood_scores, args.tpr)
        result["ood"] = {
            **_statistics(ood_scores),
            "auroc": float(metrics["auroc"]),
            "auroc_se": float(errors["auroc_se"]),
            "fpr": float(metrics["fpr"]),
            "fpr_se": float(errors["fpr_se"]),
            "tpr": args.tpr,
            "threshold_at_tpr": float(metrics["threshold"]),
            "threshold_at_tpr_se": float(errors["threshold_se"]),
        }
        if threshold is not None:
            flagged = float((ood_scores > threshold).double().mean())
            result["ood"]["flagged_rate"] = flagged
            result["ood"]["flagged_rate_se"] = float(rate_standard_error(flagged, ood_scores.numel()))
    top = test_scores.topk(min(args.top_k, test_scores.numel()))
    ids = files["test"].ids(0, files["test"].n)[top.indices]
    result["most_ood"] = {"ids": ids.tolist(), "scores": top.values.tolist()}
    if session.is_main:
        result.update(_write(args, test_scores, ood_scores, eigenvalues, kept, (ids, top.values)))
    return result


def save_array(path: Path, array: np.ndarray) -> None:
    """``numpy.save`` to exactly ``path``, whole or not at all ([`written`][lightning_spectral.io.written])."""
    with written(path, "--scores-out") as temporary, open(temporary, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _write(args, test_scores, ood_scores, eigenvalues, kept, most_ood) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    if args.scores_out is not None:
        path = Path(args.scores_out).expanduser()
        save_array(path, test_scores.numpy())
        paths["scores_out"] = {"test": str(path)}
        if ood_scores is not None:
            ood_path = path.with_name(path.stem + ".ood.npy")
            save_array(ood_path, ood_scores.numpy())
            paths["scores_out"]["ood"] = str(ood_path)
    if args.plot_dir is not None:
        from lightning_spectral.cli.pictures import save_gallery, save_spectrum

        plot_dir = Path(args.plot_dir)
        title = f"Kernel PCA spectrum of TRAIN ({args.mapping}, {kept} components kept)"
        pictures = {"spectrum": save_spectrum(plot_dir, "ood_spectrum", eigenvalues, title, cut=kept)}
        if args.images is not None:
            ids, scores = most_ood
            captions = [[f"id {int(i)}\n{float(v):.3g}" for i, v in zip(ids.tolist(), scores.tolist(), strict=True)]]
            test = images.source_name(args, "test")
            title = f"the {len(ids)} most out-of-distribution samples of TEST ({test}): id, score"
            pictures["most_ood"] = save_gallery(
                plot_dir, "ood_most_ood", [most_ood], Path(args.images), args.thumb_size,
                labels=["most OOD first"], title=title, captions=captions,
            )
        paths["pictures"] = pictures
    return paths
