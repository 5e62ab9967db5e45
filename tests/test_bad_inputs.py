"""Every public entry point refuses bad input with a clear error: one table of (call, exception, message).

Each row calls one entry point the wrong way and expects an exception of the given type whose message matches a
regular expression naming the argument (or the flag, file or state) at fault and, where there is one, the fix.
Command-line rows run :func:`lightning_spectral.cli.main` in this process: it must return 2 and print exactly one
line on stderr, which is then matched like an exception message.

Run the table alone with ``pytest tests/test_bad_inputs.py``; docs/ddp.md records its totals.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import re
import socket
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import pytest
import torch
from digits_vae import DigitsVAE
from PIL import Image
from safetensors.torch import save_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MeanMetric

from lightning_spectral.algebra import one_thread as linalg_one_thread
from lightning_spectral.callbacks import (
    DriftMonitor,
    EmbeddingMetrics,
    GeneratedSamples,
    KPCAOODMonitor,
    SPECAlign,
    SpecAlignSolver,
)
from lightning_spectral.cli import main
from lightning_spectral.data import DigitsImages, DigitsImageText, DropClassesSampler
from lightning_spectral.encoders import (
    InputAdapter,
    PixelEncoder,
    PrecomputedFeatures,
    create_clip,
    create_timm_encoder,
    load_weights,
    save_features,
)
from lightning_spectral.functional import (
    detection_metrics,
    fast_mmd,
    fast_mmd_test,
    finc,
    finc_exact,
    finc_spectrum,
    fkea_vendi,
    match_bandwidth,
    mmd_exact,
    mmd_exact_test,
    spec,
    spec_align_loss,
    spec_diff_exact,
    vendi_exact,
)
from lightning_spectral.functional.conditional import conditional_vendi, conditional_vendi_exact
from lightning_spectral.functional.content_groups import reference_halves
from lightning_spectral.functional.fkea import renyi_entropy, vendi_score
from lightning_spectral.functional.mode_groups import mode_groups
from lightning_spectral.io import CheckpointError, EmbeddingFile, WriteError, check_writable, open_rgb, written
from lightning_spectral.kernels import (
    CosineMap,
    GaussianRFF,
    MultiBandwidthRFF,
    gaussian_kernel,
    kernel_feature_map,
    median_bandwidth,
)
from lightning_spectral.metrics import (
    ConditionalVendi,
    FastMMD,
    FINCNovelty,
    FKEAVendi,
    KernelPCAOOD,
    RFFCovariance,
    SPECDivergence,
)
from lightning_spectral.pictures import log_picture, log_text
from tests.conftest import LinearModule


def write_to(path: Any, argument: str = "--output") -> None:
    """A whole-file write of ``{}`` to ``path``, as the command line writes its --output."""
    with written(path, argument) as temporary:
        temporary.write_text("{}")


def csv_logger(f: SimpleNamespace) -> Any:
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(f.dir / "pictures")


def figure(width: float, height: float) -> Any:
    import matplotlib.figure

    return matplotlib.figure.Figure(figsize=(width, height))


class CLIError(Exception):
    """The one stderr line of a command that returned 2."""


class Case(NamedTuple):
    entry: str
    call: Callable[[Any], Any]  # takes the `files` namespace
    error: type
    match: str  # re.search in the message: names the argument (and the fix where there is one)


def x(n: int = 8, d: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def x64(n: int = 8, d: int = 3, seed: int = 0) -> torch.Tensor:
    return x(n, d, seed).double()


def meta(n: int = 8, d: int = 3) -> torch.Tensor:
    """A tensor with a shape and no values."""
    return torch.empty(n, d, device="meta")


TINY_CLIP = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
                 text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
TINY_DINO = dict(img_size=28, depth=1, embed_dim=48, num_heads=2)


def tiny_clip(**kwargs: Any) -> Any:
    return create_clip("ViT-B-32", **{**TINY_CLIP, **kwargs})


def tiny_timm(**kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "no weights: randomly initialised"
        return create_timm_encoder("vit_small_patch14_dinov2", **{**TINY_DINO, **kwargs})


def tiny_fid() -> Any:
    """torchmetrics' FID with a 4-feature extractor (no Inception download)."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    extractor = nn.Sequential(nn.Flatten(), nn.LazyLinear(4))
    extractor.num_features = 4  # type: ignore[assignment]
    return FrechetInceptionDistance(feature=extractor)


def generated(**kwargs: Any) -> GeneratedSamples:
    return GeneratedSamples({"v": FKEAVendi(**small())}, nn.Flatten(), **kwargs)


def updated(metric: Any, *batches: Any, **kwargs: Any) -> Any:
    for batch in batches:
        metric.update(*batch, **kwargs) if isinstance(batch, tuple) else metric.update(batch, **kwargs)
    return metric


def labelled_conditional(num_classes: int = 3, **kwargs: Any) -> ConditionalVendi:
    """A ConditionalVendi with per-label sums, fed 12 labelled samples."""
    metric = ConditionalVendi(1.0, 0.5, 8, num_classes=num_classes, **kwargs)
    metric.update(x(12, 3), torch.arange(12) % num_classes)
    return metric


def tampered(metric: Any, side: str, index: int, value: float) -> dict[str, Any]:
    """``metric``'s state_dict with one packed sum entry replaced (an edited or corrupted checkpoint)."""
    state = metric.state_dict()
    state["_extra_state"]["sums"][side][index] = value
    return state


def prompt_agnostic(**kwargs: Any) -> ConditionalVendi:
    return updated(ConditionalVendi(1.0, 1.0, 8, prompt_agnostic=True, **kwargs), (x(16), x(16, 2, seed=1)))


def huge_prompts_file(root: Any, columns: int, rows: int = 40) -> str:
    """A .npy file whose header says (rows, columns) float32, its data a sparse hole (no memory, no disk)."""
    path = root / "huge_prompts.npy"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (rows, columns)}
    )
    with open(path, "wb") as handle:
        handle.write(header.getvalue())
        handle.truncate(len(header.getvalue()) + 4 * rows * columns)
    return str(path)


def quietly(fn: Callable[[], Any]) -> Any:
    """``fn()`` without torchmetrics' warning about ``compute`` before ``update`` (the row tests the error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn()


def cli(*argv: str) -> None:
    """Run the command line; raise CLIError(the stderr line) if it returned 2 with one line, else fail."""
    argv = list(argv)
    if argv and argv[0] in ("evaluate", "compare", "ood"):
        argv.append("--no-progress")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    lines = err.getvalue().strip().splitlines()
    if code != 2 or len(lines) != 1:
        raise AssertionError(f"expected exit code 2 and one stderr line, got {code} and {lines!r}")
    raise CLIError(lines[0])


def loader(n: int = 16) -> DataLoader:
    return DataLoader(TensorDataset(x(n, 4)), batch_size=8)


def fit(callback: L.Callback, ckpt_path: Any = None) -> None:
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=1, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        callbacks=[callback],
    )
    trainer.fit(LinearModule(), loader(), loader(), ckpt_path=ckpt_path)


def with_pixel_limit(limit: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` under ``PIL.Image.MAX_IMAGE_PIXELS = limit``, restored after."""

    before, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, limit
    try:
        return fn()
    finally:
        Image.MAX_IMAGE_PIXELS = before


def small(**kwargs: Any) -> dict[str, Any]:
    return {"sigma": 1.0, "n_frequencies": 8, **kwargs}


def case_row(case: Case) -> Any:
    """A row written as a Case."""
    return pytest.param(case, id=case.entry)


def row(entry: str, call: Callable[[Any], Any], error: type, match: str) -> Any:
    return pytest.param(Case(entry, call, error, match), id=entry)


CASES = [
    # ---- metrics: constructors -------------------------------------------------------------------------------
    row("FKEAVendi sigma=0", lambda f: FKEAVendi(sigma=0), ValueError, r"`sigma`.*> 0"),
    row("FKEAVendi sigma=nan", lambda f: FKEAVendi(sigma=float("nan")), ValueError, r"`sigma`"),
    row("FKEAVendi sigma=True", lambda f: FKEAVendi(sigma=True), ValueError, r"`sigma`"),
    row("FKEAVendi sigma='wide'", lambda f: FKEAVendi(sigma="wide"), ValueError, r"`sigma` must be a positive number"),
    row("FKEAVendi n_frequencies=0", lambda f: FKEAVendi(1.0, n_frequencies=0), ValueError, r"`n_frequencies`.*>= 1"),
    row("FKEAVendi precision='half'", lambda f: FKEAVendi(1.0, precision="half"), ValueError, r"`precision` must be one of"),
    row("FKEAVendi n_frequencies=2.5", lambda f: FKEAVendi(1.0, n_frequencies=2.5), ValueError, r"`n_frequencies`"),
    row("FKEAVendi n_frequencies=10**8", lambda f: FKEAVendi(1.0, n_frequencies=10**8), ValueError,
        r"`n_frequencies`=100000000 needs .* GiB.*smaller `n_frequencies`"),
    row("FKEAVendi alpha=0", lambda f: FKEAVendi(1.0, alpha=0), ValueError, r"`alpha` must be in \(0, inf\]"),
    row("FKEAVendi alpha=True", lambda f: FKEAVendi(1.0, alpha=True), ValueError, r"`alpha`.*not a bool"),
    row("FKEAVendi alpha=[]", lambda f: FKEAVendi(1.0, alpha=[]), ValueError, r"`alpha`.*non-empty"),
    row("FKEAVendi alpha='two'", lambda f: FKEAVendi(1.0, alpha="two"), ValueError, r"`alpha`.*'inf'"),
    row("FKEAVendi alpha=[1, -2]", lambda f: FKEAVendi(1.0, alpha=[1, -2]), ValueError, r"`alpha`"),
    row("FKEAVendi truncation=0", lambda f: FKEAVendi(1.0, truncation=0), ValueError, r"`truncation`.*>= 1"),
    row("FKEAVendi truncation=True", lambda f: FKEAVendi(1.0, truncation=True), ValueError, r"`truncation`"),
    row("FKEAVendi truncation=100.0", lambda f: FKEAVendi(1.0, truncation=100.0), ValueError, r"`truncation`"),
    row("FKEAVendi noise_draws=-1", lambda f: FKEAVendi(1.0, noise_draws=-1), ValueError, r"`noise_draws`.*\[0, 64\]"),
    row("FKEAVendi noise_draws=True", lambda f: FKEAVendi(1.0, noise_draws=True), ValueError, r"`noise_draws`"),
    row("FKEAVendi noise_draws=2.0", lambda f: FKEAVendi(1.0, noise_draws=2.0), ValueError, r"`noise_draws`"),
    row("SPECDivergence noise_draws=65", lambda f: SPECDivergence("cosine", noise_draws=65), ValueError,
        r"`noise_draws`.*\[0, 64\]"),
    row("ConditionalVendi noise_draws='2'", lambda f: ConditionalVendi(1.0, 1.0, 8, noise_draws="2"), ValueError,
        r"`noise_draws`.*\[0, 64\]"),
    row("FKEAVendi seed='foo'", lambda f: FKEAVendi(1.0, seed="foo"), ValueError, r"`seed` must be an integer"),
    row("FKEAVendi seed=2**64", lambda f: FKEAVendi(1.0, seed=2**64), ValueError, r"`seed`.*range"),
    row("FKEAVendi chunk_size=0", lambda f: FKEAVendi(1.0, chunk_size=0), ValueError, r"`chunk_size`"),
    row("FKEAVendi in_features=0", lambda f: FKEAVendi(1.0, in_features=0), ValueError, r"`in_features`"),
    row("FKEAVendi feature='encoder'", lambda f: FKEAVendi(1.0, feature="encoder"), TypeError, r"`feature`"),
    row("RFFCovariance sigma=-1", lambda f: RFFCovariance(sigma=-1), ValueError, r"`sigma`"),
    row("FINCNovelty rho=0", lambda f: FINCNovelty(1.0, rho=0), ValueError, r"`rho`"),
    row("FINCNovelty significance=0", lambda f: FINCNovelty(1.0, significance=0), ValueError, r"`significance`"),
    row("FINCNovelty significance=1", lambda f: FINCNovelty(1.0, significance=1), ValueError,
        r"`significance` must be a significance level in \(0, 1\)"),
    row("FINCNovelty significance=2.0 (the previous margin)", lambda f: FINCNovelty(1.0, significance=2.0), ValueError,
        r"`significance` must be a significance level in \(0, 1\) \(e.g. 0.05\), got 2.0"),
    row("FINCNovelty noise_draws=0", lambda f: FINCNovelty(1.0, noise_draws=0), ValueError,
        r"`noise_draws` must be an integer in \[1, 64\]"),
    row("FINCNovelty noise_draws=65", lambda f: FINCNovelty(1.0, noise_draws=65), ValueError,
        r"`noise_draws` must be an integer"),
    row("FINCNovelty noise_draws=True", lambda f: FINCNovelty(1.0, noise_draws=True), ValueError, r"`noise_draws`.*True"),
    row("FINCNovelty noise_draws=64, n_frequencies=2**14", lambda f: FINCNovelty(1.0, n_frequencies=2**14,
                                                                               noise_draws=64),
        ValueError, r"`n_frequencies`=16384 needs .* GiB \([\d,]+ bytes: 66 float64 sums of 32768 x 32768 "
        r"\(`noise_draws`=64\) and 7 at compute.*fewer `noise_draws`"),
    row("FINCNovelty min_eigenvalue=-1", lambda f: FINCNovelty(1.0, min_eigenvalue=-1), ValueError,
        r"`min_eigenvalue`"),
    row("FINCNovelty reset_real_features='no'", lambda f: FINCNovelty(1.0, reset_real_features="no"), TypeError,
        r"`reset_real_features` must be True or False"),
    row("FastMMD sigma=[]", lambda f: FastMMD(sigma=[]), ValueError, r"`sigma`.*non-empty sequence"),
    row("FastMMD sigma=(1, 0)", lambda f: FastMMD(sigma=(1.0, 0.0)), ValueError, r"`sigma`"),
    row("FastMMD sigma=np.float32(0)", lambda f: FastMMD(sigma=np.float32(0)), ValueError, r"`sigma`"),
    row("FastMMD statistic_only='yes'", lambda f: FastMMD(1.0, statistic_only="yes"), TypeError, r"`statistic_only`"),
    row("FastMMD n_frequencies=-3", lambda f: FastMMD(1.0, n_frequencies=-3), ValueError, r"`n_frequencies`"),
    row("FastMMD unbiased='no'", lambda f: FastMMD(1.0, unbiased="no"), TypeError, r"`unbiased`"),
    row("SPECDivergence kernel='rbf'", lambda f: SPECDivergence("rbf"), ValueError, r"`kernel` must be one of"),
    row("SPECDivergence gaussian without sigmas", lambda f: SPECDivergence("gaussian"), ValueError,
        r"`sigma_a` and `sigma_b`.*match_bandwidth"),
    row("SPECDivergence sigma_b=0", lambda f: SPECDivergence("gaussian", sigma_a=1.0, sigma_b=0), ValueError,
        r"`sigma_b`"),
    row("SPECDivergence in_features=(3,)", lambda f: SPECDivergence("cosine", in_features=(3,)), ValueError,
        r"`in_features`"),
    row("SPECDivergence sigma_a='median'", lambda f: SPECDivergence("gaussian", sigma_a="median", sigma_b="auto"),
        ValueError, r"`sigma_a` must be a positive number, got the string 'median'"),
    # ---- ConditionalVendi ----------------------------------------------------------------------------------------
    row("ConditionalVendi prompt_sigma=0", lambda f: ConditionalVendi(1.0, 0.0), ValueError, r"`prompt_sigma`.*> 0"),
    row("ConditionalVendi sigma=-1", lambda f: ConditionalVendi(-1.0, 1.0), ValueError, r"`sigma`"),
    row("ConditionalVendi prompt_sigma='auto'", lambda f: ConditionalVendi("auto", "auto"), ValueError,
        r"`prompt_sigma`"),
    row("ConditionalVendi alpha=0", lambda f: ConditionalVendi(1.0, 1.0, alpha=0), ValueError, r"`alpha`"),
    row("ConditionalVendi num_classes=0", lambda f: ConditionalVendi(1.0, 1.0, num_classes=0), ValueError,
        r"`num_classes`.*>= 1"),
    row("ConditionalVendi per_prompt_frequencies > n_frequencies",
        lambda f: ConditionalVendi(1.0, 1.0, 16, num_classes=3, per_prompt_frequencies=32), ValueError,
        r"`per_prompt_frequencies`.*<= `n_frequencies`"),
    row("ConditionalVendi n_frequencies=10**8", lambda f: ConditionalVendi(1.0, 1.0, 10**8), ValueError,
        r"`n_frequencies`.*GiB"),
    row("ConditionalVendi precision='half'", lambda f: ConditionalVendi(1.0, 1.0, precision="half"), ValueError,
        r"`precision`"),
    row("ConditionalVendi in_features=(3,)", lambda f: ConditionalVendi(1.0, 1.0, in_features=(3,)), ValueError,
        r"`in_features` must be a pair"),
    row("ConditionalVendi.update unequal N", lambda f: ConditionalVendi(1.0, 1.0, 8).update(x(8), x(7)), ValueError,
        r"`samples` has 8 rows and `prompts` 7.*one prompt per generated sample"),
    row("ConditionalVendi.update integer prompts without num_classes",
        lambda f: ConditionalVendi(1.0, 1.0, 8).update(x(4), torch.tensor([0, 1, 2, 1])), ValueError,
        r"`num_classes=`"),
    row("ConditionalVendi.update label out of range",
        lambda f: ConditionalVendi(1.0, 1.0, 8, num_classes=3, per_prompt_frequencies=4).update(
            x(4), torch.tensor([0, 1, 3, 1])), ValueError, r"`prompts` must lie in \[0, num_classes=3\)"),
    row("ConditionalVendi.update float labels",
        lambda f: ConditionalVendi(1.0, 1.0, 8, num_classes=3, per_prompt_frequencies=4).update(
            x(4), x(4), labels=torch.zeros(4)), ValueError, r"`labels` must be integer labels of shape \(4,\)"),
    row("ConditionalVendi.update labels without num_classes",
        lambda f: ConditionalVendi(1.0, 1.0, 8).update(x(4), x(4), labels=torch.zeros(4, dtype=torch.long)),
        ValueError, r"`labels` were given.*`num_classes=`"),
    row("ConditionalVendi.update embeddings without labels but num_classes",
        lambda f: ConditionalVendi(1.0, 1.0, 8, num_classes=3, per_prompt_frequencies=4).update(x(4), x(4)),
        ValueError, r"pass integer `prompts`, or `labels=`"),
    row("ConditionalVendi.update integer prompts and disagreeing labels",
        lambda f: ConditionalVendi(1.0, 1.0, 8, num_classes=3, per_prompt_frequencies=4).update(
            x(4), torch.tensor([0, 1, 2, 1]), labels=torch.tensor([1, 2, 0, 2])), ValueError,
        r"`labels=` disagrees.*drop `labels=`"),
    row("ConditionalVendi.least_diverse min_count=0",
        lambda f: (lambda m: (m.update(x(4), torch.tensor([0, 1, 2, 1])), m.reading().least_diverse(2, min_count=0)))(
            ConditionalVendi(1.0, 1.0, 8, num_classes=3, per_prompt_frequencies=4)), ValueError,
        r"`min_count` must be an integer >= 1"),
    row("ConditionalVendi.update NaN prompts",
        lambda f: ConditionalVendi(1.0, 1.0, 8).update(x(4), torch.full((4, 2), float("nan"))), ValueError,
        r"`prompts`.*NaN"),
    row("ConditionalVendi.update prompt width changes",
        lambda f: (lambda m: (m.update(x(4), x(4, 2)), m.update(x(4), x(4, 3))))(ConditionalVendi(1.0, 1.0, 8)),
        ValueError, r"widths \(samples, prompts\) \(3, 3\) differ from the earlier batches' \(3, 2\)"),
    row("ConditionalVendi.update prompts list", lambda f: ConditionalVendi(1.0, 1.0, 8).update(x(4), [0, 1, 2, 3]),
        TypeError, r"`prompts` must be a tensor"),
    row("ConditionalVendi.compute empty", lambda f: ConditionalVendi(1.0, 1.0, 8).compute(), RuntimeError,
        r"no samples were accumulated"),
    row("ConditionalVendi.per_prompt without num_classes",
        lambda f: (lambda m: (m.update(x(4), x(4)), m.reading().per_prompt()))(ConditionalVendi(1.0, 1.0, 8)), RuntimeError,
        r"`num_classes=`"),
    row("ConditionalVendi label_prompts without num_classes", lambda f: ConditionalVendi(1.0, 1.0, label_prompts=True),
        ValueError, r"`label_prompts=True`.*`num_classes=`"),
    row("ConditionalVendi unconditional='no'", lambda f: ConditionalVendi(1.0, 1.0, unconditional="no"), TypeError,
        r"`unconditional`"),
    row("ConditionalVendi.update label_prompts with embeddings",
        lambda f: ConditionalVendi(1.0, 1.0, 8, num_classes=3, per_prompt_frequencies=4, label_prompts=True).update(
            x(4), x(4), labels=torch.zeros(4, dtype=torch.long)), ValueError, r"`label_prompts=True`.*integer labels"),
    row("ConditionalVendi prompt_names without num_classes", lambda f: ConditionalVendi(1.0, 1.0, prompt_names=["a"]),
        ValueError, r"`prompt_names`.*`num_classes`"),
    row("ConditionalVendi ridge=0", lambda f: ConditionalVendi(1.0, 1.0, prompt_agnostic=True, ridge=0), ValueError,
        r"`ridge`.*> 0"),
    row("ConditionalVendi.prompt_agnostic_modes without prompt_agnostic",
        lambda f: (lambda m: (m.update(x(4), x(4)), m.reading().prompt_agnostic_modes()))(ConditionalVendi(1.0, 1.0, 8)),
        RuntimeError, r"`prompt_agnostic=True`"),
    # ---- ConditionalVendi checkpoints: checked whole before anything loads ---------------------------------------
    row("ConditionalVendi.load_state_dict another num_classes",
        lambda f: ConditionalVendi(1.0, 0.5, 8, num_classes=4).load_state_dict(labelled_conditional().state_dict()),
        RuntimeError, r"checkpoint was written with num_classes=3 where this metric has num_classes=4"),
    row("ConditionalVendi.load_state_dict another per_prompt_frequencies",
        lambda f: ConditionalVendi(1.0, 0.5, 8, num_classes=3, per_prompt_frequencies=2).load_state_dict(
            labelled_conditional().state_dict()), RuntimeError,
        r"per_prompt_frequencies=8 where this metric has per_prompt_frequencies=2.*settings it was saved with"),
    row("ConditionalVendi.load_state_dict sums tampered to 1e308",
        lambda f: ConditionalVendi(1.0, 0.5, 8, num_classes=3).load_state_dict(
            tampered(labelled_conditional(), "joint", -1, 1e308)), ValueError,
        r"'joint' sums .*edited or corrupted.*resume from another checkpoint"),
    row("ConditionalVendi.load_state_dict NaN sums",
        lambda f: ConditionalVendi(1.0, 0.5, 8, num_classes=3).load_state_dict(
            tampered(labelled_conditional(), "per_prompt", 3, float("nan"))), ValueError,
        r"'per_prompt' sums hold 1 NaN or infinite entries"),
    row("ConditionalVendi.load_state_dict counts that disagree",
        lambda f: ConditionalVendi(1.0, 0.5, 8, num_classes=3).load_state_dict(
            tampered(labelled_conditional(), "samples", 0, 13.0)), ValueError,
        r"'samples' sums count 13 samples and its 'joint' sums 12, where both see the same samples"),
    row("ConditionalVendi.load_state_dict another prompt width",
        lambda f: updated(ConditionalVendi(1.0, 0.5, 8), (x(4), x(4, 5))).load_state_dict(
            updated(ConditionalVendi(1.0, 0.5, 8), (x(4), x(4, 2))).state_dict()), RuntimeError,
        r"written for inputs of width \(3, 2\) where this metric takes \(3, 5\)"),
    row("FKEAVendi.load_state_dict a trace that is not the count",
        lambda f: FKEAVendi(1.0, 8).load_state_dict(  # Q's last diagonal entry (the draws' sums follow it)
            tampered(updated(FKEAVendi(1.0, 8), x(10)), "samples", 16 + 136, 5.0)),
        ValueError, r"'samples' sums .*(outer-product|trace).*edited or corrupted"),
    row("FastMMD.load_state_dict negative count",
        lambda f: FastMMD(1.0, 8).load_state_dict(
            tampered(updated(FastMMD(1.0, 8), x(10), real=False), "gen", 0, -10.0)), ValueError,
        r"'gen' sums count -10 samples \(a count is a non-negative integer\)"),
    row("GeneratedSamples.load_state_dict another num_classes",
        lambda f: GeneratedSamples({"c": ConditionalVendi(1.0, 0.5, 8, num_classes=4)}, nn.Flatten(),
                                   prompts=[0, 1, 2, 3]).load_state_dict(
            {"metrics": {"c": labelled_conditional().state_dict()}, "history": {}, "last_values": {}}),
        ValueError, r"GeneratedSamples.load_state_dict: the saved state of 'c' does not load.*num_classes=3 where "
        r"this metric has num_classes=4"),
    # ---- ConditionalVendi outside update, and its allocations ----------------------------------------------------
    row("ConditionalVendi.prompt_agnostic_top_samples wrong width",
        lambda f: prompt_agnostic().reading().prompt_agnostic_top_samples([(x(4, 5), torch.arange(4))]), ValueError,
        r"prompt_agnostic_top_samples: `batches` has width 5 but 3 was expected"),
    row("ConditionalVendi.prompt_agnostic_top_samples NaN rows",
        lambda f: prompt_agnostic().reading().prompt_agnostic_top_samples(
            [(torch.tensor([[0.0, 1.0, float("nan")], [0.0, 1.0, 2.0]]), torch.arange(2))]), ValueError,
        r"`batches` contains NaN or Inf in 1 of 2 rows"),
    row("ConditionalVendi prompt_names=42", lambda f: ConditionalVendi(1.0, 1.0, num_classes=3, prompt_names=42),
        ValueError, r"`prompt_names` must be a sequence of `num_classes` names"),
    row("ConditionalVendi in_features=4", lambda f: ConditionalVendi(1.0, 1.0, in_features=4), ValueError,
        r"`in_features` must be a pair \(d_samples, d_prompts\), got 4"),
    row("ConditionalVendi.galleries bare tensors",
        lambda f: labelled_conditional().reading().galleries([x(12, 3)], 2, 4), TypeError,
        r"galleries: `batches` must yield \(\(features, labels \(N,\)\), ids \(N,\)\)"),
    row("ConditionalVendi.galleries float labels",
        lambda f: labelled_conditional().reading().galleries([((x(4), x(4, 1)[:, 0]), torch.arange(4))], 2, 4), ValueError,
        r"galleries: `batches` must yield .*labels of dtype torch.float32"),
    row("ConditionalVendi num_classes=10**6", lambda f: ConditionalVendi(1.0, 1.0, num_classes=10**6), ValueError,
        r"`num_classes`=1000000 needs [\d.]+ GiB \([\d,]+ bytes: 1000000 per-label float64 sums"),
    row("ConditionalVendi in_features with 10**8-wide prompts",
        lambda f: ConditionalVendi(1.0, 1.0, in_features=(3, 10**8)), ValueError,
        r"`in_features`=\(3, 100000000\) needs [\d.]+ GiB.*frequency matrix of 100000003 x 2048"),
    row("ConditionalVendi.update 10**7-wide prompts",
        lambda f: ConditionalVendi(1.0, 1.0).update(x(2), torch.zeros(2, 10**7)), ValueError,
        r"`prompts`=\(3, 10000000\) needs [\d.]+ GiB.*narrower prompt embeddings"),
    row("ConditionalVendi.update integer prompts of 10**7 classes",
        lambda f: ConditionalVendi(1.0, 1.0, num_classes=10**7, per_prompt_frequencies=1).update(
            x(2), torch.tensor([0, 1])), ValueError, r"`num_classes`=\(3, 10000000\) needs [\d.]+ GiB"),
    row("cli evaluate --prompts 10**7 columns",
        lambda f: cli("evaluate", f.ok, "--sigma", "1", "--prompts", huge_prompts_file(f.dir, 10**7),
                      "--prompt-sigma", "1", "--n-frequencies", "2048"), CLIError,  # "auto" fits 10**7 columns here
        r"`--prompts`=.*huge_prompts.npy.* with 10,000,000 columns needs [\d.]+ GiB.*project the prompts"),
    row("conditional_vendi unequal N", lambda f: conditional_vendi(x(5), x(4), 1.0, 1.0, 8), ValueError,
        r"one prompt per generated sample"),
    row("conditional_vendi_exact score='joint'", lambda f: conditional_vendi_exact(x(5), x(5), 1.0, 1.0, score="joint"),
        ValueError, r"`score` must be one of"),
    # ---- metrics: update / compute -----------------------------------------------------------------------------
    row("FKEAVendi.update 1-D", lambda f: FKEAVendi(**small()).update(torch.randn(5)), ValueError,
        r"`features` must have shape \(N, d\).*flatten"),
    row("FKEAVendi.update int", lambda f: FKEAVendi(**small()).update(torch.ones(4, 3, dtype=torch.long)),
        TypeError, r"`features` must be floating point.*\.float\(\)"),
    row("FKEAVendi.update numpy", lambda f: FKEAVendi(**small()).update(np.ones((4, 3))), TypeError,
        r"`features` must be a torch.Tensor"),
    row("FKEAVendi.update NaN", lambda f: FKEAVendi(**small()).update(torch.full((2, 3), float("nan"))),
        ValueError, r"`features` contains NaN or Inf in 2 of 2 rows"),
    row("FKEAVendi.update width change", lambda f: updated(FKEAVendi(**small()), x(4, 3), x(4, 5)), ValueError,
        r"`features` has width 5 but 3 was expected"),
    row("FKEAVendi.compute empty", lambda f: quietly(FKEAVendi(**small()).compute), RuntimeError,
        r"no samples were accumulated.*`update\(\.\.\.\)`"),
    row("FKEAVendi.standard_error noise_draws=0",
        lambda f: updated(FKEAVendi(**small(noise_draws=0)), x()).reading().standard_error(), RuntimeError,
        r"noise_draws=0.*noise_draws >= 1"),
    row("FastMMD.standard_error statistic_only",
        lambda f: updated(updated(FastMMD(**small(statistic_only=True)), x(), real=True), x(), real=False)
        .reading().standard_error(), RuntimeError, r"statistic_only=True.*statistic_only=False"),
    row("RFFCovariance.modes k=0", lambda f: updated(RFFCovariance(**small()), x()).reading().modes(0), ValueError, r"`k`"),
    row("FINCNovelty.update real=1", lambda f: FINCNovelty(**small()).update(x(), real=1), TypeError,
        r"`real` must be True \(reference\) or False"),
    row("FINCNovelty.update without real", lambda f: FINCNovelty(**small()).update(x()), TypeError, r"'real'"),
    row("FINCNovelty.compute no generated", lambda f: updated(FINCNovelty(**small()), x(), real=True).compute(),
        RuntimeError, r"no generated samples.*update\(x, real=False\)"),
    row("FINCNovelty.compute no reference", lambda f: updated(FINCNovelty(**small()), x(), real=False).compute(),
        RuntimeError, r"no reference samples were accumulated.*real=True"),
    row("FINCNovelty.grouped_modes per_mode=0",
        lambda f: FINCNovelty(**small()).reading().grouped_modes([(x(), torch.arange(len(x())))], per_mode=0), ValueError,
        r"`per_mode`"),
    row("mode_groups containment=0", lambda f: mode_groups([], [], containment=0), ValueError,
        r"containment must be in \(0, 1\]"),
    row("FINCNovelty.direction_shares wrong width",
        lambda f: updated(updated(FINCNovelty(**small()), x(), real=True), x(), real=False)
        .reading().direction_shares(torch.ones(5, 1)), ValueError, r"`directions` must be a \(16, m\) tensor"),
    row("FINCNovelty called like a function", lambda f: FINCNovelty(**small())(x(), real=False), RuntimeError,
        r"called like a function.*update\(x, real=\.\.\.\)"),
    row("FastMMD.update real='yes'", lambda f: FastMMD(**small()).update(x(), real="yes"), TypeError, r"`real`"),
    row("FastMMD.compute one side", lambda f: updated(FastMMD(**small()), x(), real=True).compute(), RuntimeError,
        r"'gen' side|generated"),
    row("SPECDivergence.update unequal N", lambda f: SPECDivergence("cosine").update(x(8), x(7)), ValueError,
        r"`emb_a` has 8 rows and `emb_b` 7.*row i of both must be sample i"),
    row("SPECDivergence.update 1-D", lambda f: SPECDivergence("cosine").update(torch.randn(8), x(8)), ValueError,
        r"`emb_a`|shape \(N, d\)"),
    # ---- functional forms ------------------------------------------------------------------------------------
    row("fkea_vendi empty", lambda f: fkea_vendi(torch.zeros(0, 3), 1.0), ValueError, r"`features` is empty"),
    row("fkea_vendi sigma=0", lambda f: fkea_vendi(x(), 0.0), ValueError, r"`sigma`"),
    row("fkea_vendi alpha=True", lambda f: fkea_vendi(x(), 1.0, n_frequencies=8, alpha=True), ValueError,
        r"`alpha`.*not a bool"),
    row("fkea_vendi alpha=-1", lambda f: fkea_vendi(x(), 1.0, n_frequencies=8, alpha=-1), ValueError, r"`alpha`"),
    row("fkea_vendi n_frequencies=0", lambda f: fkea_vendi(x(), 1.0, n_frequencies=0), ValueError,
        r"`n_frequencies`"),
    row("fkea_vendi chunk_size=0", lambda f: fkea_vendi(x(), 1.0, chunk_size=0), ValueError, r"`chunk_size`"),
    row("vendi_exact empty", lambda f: vendi_exact(torch.zeros(0, 3), 1.0), ValueError, r"`features` is empty"),
    row("vendi_exact alpha=0", lambda f: vendi_exact(x(), 1.0, alpha=0), ValueError, r"`alpha`"),
    row("vendi_exact alpha=False", lambda f: vendi_exact(x(), 1.0, alpha=False), ValueError, r"`alpha`.*not a bool"),
    row("vendi_exact sigma=-2", lambda f: vendi_exact(x(), -2.0), ValueError, r"`sigma`"),
    row("finc significance=0", lambda f: finc(x(), x(seed=1), 1.0, n_frequencies=8, significance=0), ValueError,
        r"`significance`"),
    row("finc min_eigenvalue=-1", lambda f: finc(x(), x(seed=1), 1.0, n_frequencies=8, min_eigenvalue=-1), ValueError,
        r"`min_eigenvalue`"),
    row("finc rho=0", lambda f: finc(x(), x(seed=1), 1.0, n_frequencies=8, rho=0), ValueError, r"`rho`"),
    row("finc one reference sample", lambda f: finc(x(), x(1), 1.0), ValueError, r"2 reference samples"),
    row("finc widths differ", lambda f: finc(x(8, 3), x(8, 4), 1.0), ValueError, r"`reference` has width 4"),
    row("finc n_frequencies=0", lambda f: finc(x(), x(seed=1), 1.0, n_frequencies=0), ValueError, r"`n_frequencies`"),
    row("finc_spectrum significance=nan",
        lambda f: finc_spectrum(x(), x(seed=1), 1.0, n_frequencies=8, significance=float("nan")),
        ValueError, r"`significance`"),
    row("finc_spectrum significance=0.5", lambda f: finc_spectrum(x(40), x(40, seed=1), 1.0, n_frequencies=8,
        significance=1.5), ValueError, r"`significance` must be a significance level in \(0, 1\)"),
    row("finc_spectrum noise_draws=0", lambda f: finc_spectrum(x(40), x(40, seed=1), 1.0, n_frequencies=8,
                                                               noise_draws=0),
        ValueError, r"`noise_draws` must be an integer in \[1, 64\]"),
    row("finc_spectrum min_eigenvalue=0",
        lambda f: finc_spectrum(x(), x(seed=1), 1.0, n_frequencies=8, min_eigenvalue=0),
        ValueError, r"`min_eigenvalue`"),
    row("finc_exact empty generated", lambda f: finc_exact(torch.zeros(0, 3), x(), 1.0), ValueError,
        r"`generated` is empty"),
    row("finc_exact empty reference", lambda f: finc_exact(x(), torch.zeros(0, 3), 1.0), ValueError,
        r"`reference` is empty"),
    row("finc_exact rho=-1", lambda f: finc_exact(x(), x(), 1.0, rho=-1), ValueError, r"`rho`"),
    row("finc_exact widths differ", lambda f: finc_exact(x(8, 3), x(8, 2), 1.0), ValueError, r"width"),
    row("fast_mmd sigma=0", lambda f: fast_mmd(x(), x(seed=1), 0.0), ValueError, r"`sigma`"),
    row("fast_mmd empty", lambda f: fast_mmd(torch.zeros(0, 3), x(), 1.0), ValueError, r"non-empty"),
    row("fast_mmd_test n_permutations=0",
        lambda f: fast_mmd_test(x(), x(seed=1), 1.0, n_frequencies=8, n_permutations=0),
        ValueError, r"`n_permutations`"),
    case_row(Case("fast_mmd_test level=5", lambda f: fast_mmd_test(x(), x(seed=1), 1.0, n_frequencies=8, level=5),
             ValueError,
             r"`level`.*\(0, 1\)")),
    case_row(Case("mmd_exact_test level=-1", lambda f: mmd_exact_test(x(), x(seed=1), 1.0, level=-1), ValueError,
             r"`level`")),
    row("mmd_exact_test n_permutations=0", lambda f: mmd_exact_test(x(), x(seed=1), 1.0, n_permutations=0),
        ValueError, r"`n_permutations`"),
    case_row(Case("mmd_exact_test empty", lambda f: mmd_exact_test(torch.zeros(0, 3), x(), 1.0), ValueError,
             r"samples|empty")),
    case_row(Case("fast_mmd unbiased='no'", lambda f: fast_mmd(x(), x(seed=1), 1.0, n_frequencies=8, unbiased="no"),
             TypeError, r"`unbiased` must be True or False")),
    case_row(Case("fast_mmd_test level=1", lambda f: fast_mmd_test(x(), x(seed=1), 1.0, n_frequencies=8, level=1),
             ValueError, r"`level`.*\(0, 1\)")),
    case_row(Case("mmd_exact unbiased='no'", lambda f: mmd_exact(x(), x(seed=1), 1.0, unbiased="no"), TypeError,
             r"`unbiased` must be True or False")),
    case_row(Case("mmd_exact chunk_size=0", lambda f: mmd_exact(x(), x(seed=1), 1.0, chunk_size=0), ValueError,
             r"`chunk_size`")),
    case_row(Case("mmd_exact_test seed='a'", lambda f: mmd_exact_test(x(), x(seed=1), 1.0, seed="a"), ValueError,
             r"`seed` must be an integer")),
    row("mmd_exact one sample", lambda f: mmd_exact(x(1), x(), 1.0), ValueError, r"at least 2 samples"),
    row("mmd_exact sigma=0", lambda f: mmd_exact(x(), x(seed=1), 0.0), ValueError, r"`sigma`"),
    row("spec method='fast'", lambda f: spec(x(), x(seed=1), method="fast"), ValueError, r"`method` must be one of"),
    row("spec k=0", lambda f: spec(x(), x(seed=1), kernel="cosine", k=0), ValueError, r"`k`"),
    row("spec unequal N", lambda f: spec(x(8), x(6), kernel="cosine"), ValueError, r"`emb_a` has 8 rows and `emb_b` 6"),
    row("spec gaussian without sigma", lambda f: spec(x(), x(seed=1)), ValueError, r"`sigma"),
    row("spec kernel='rbf'", lambda f: spec(x(), x(seed=1), kernel="rbf", sigma_a=1.0, sigma_b=1.0), ValueError,
        r"`kernel` must be one of"),
    case_row(Case("spec_diff_exact kernel='foo'", lambda f: spec_diff_exact(x(), x(seed=1), kernel="foo", sigma_a=1.0,
                                                                       sigma_b=1.0), ValueError, r"`kernel`")),
    case_row(Case("spec_diff_exact empty", lambda f: spec_diff_exact(x(0), x(0), kernel="cosine"), ValueError,
             r"no samples|empty")),
    case_row(Case("spec_diff_exact sigma_a=-1", lambda f: spec_diff_exact(x(), x(seed=1), sigma_a=-1.0, sigma_b=1.0),
             ValueError, r"`sigma_a`")),
    row("spec_align_loss empty batch", lambda f: spec_align_loss(x(0), x(0)), ValueError, r"batch is empty"),
    row("match_bandwidth sigma_reference=0", lambda f: match_bandwidth(x(), x(seed=1), 0.0), ValueError,
        r"`sigma_reference`"),
    case_row(Case("renyi_entropy alpha=True", lambda f: renyi_entropy(torch.tensor([0.5, 0.5]), True), ValueError,
             r"`alpha`")),
    row("vendi_score alpha='2'", lambda f: vendi_score(torch.tensor([0.5, 0.5]), "2"), ValueError, r"`alpha`"),
    # ---- feature maps --------------------------------------------------------------------------------------
    row("GaussianRFF in_features=0", lambda f: GaussianRFF(0, 4, 1.0), ValueError, r"`in_features`"),
    row("GaussianRFF n_frequencies=0", lambda f: GaussianRFF(3, 0, 1.0), ValueError, r"`n_frequencies`"),
    row("GaussianRFF sigma=0", lambda f: GaussianRFF(3, 4, 0.0), ValueError, r"`sigma`"),
    row("GaussianRFF seed=1.5", lambda f: GaussianRFF(3, 4, 1.0, seed=1.5), ValueError, r"`seed`"),
    row("GaussianRFF wrong width", lambda f: GaussianRFF(3, 4, 1.0)(x(5, 4)), ValueError, r"width 4 but 3"),
    row("GaussianRFF phase overflow", lambda f: GaussianRFF(3, 4, 1e-3)(torch.full((2, 3), 1e37)), ValueError,
        r"phases x W overflow.*rescale the inputs"),
    row("MultiBandwidthRFF sigmas=(1, -1)", lambda f: MultiBandwidthRFF(3, 4, (1.0, -1.0)), ValueError, r"`sigma`"),
    row("MultiBandwidthRFF sigmas=()", lambda f: MultiBandwidthRFF(3, 4, ()), ValueError, r"`sigmas`"),
    row("CosineMap eps=0", lambda f: CosineMap(eps=0), ValueError, r"`eps`"),
    row("CosineMap zero row", lambda f: CosineMap()(torch.zeros(2, 3)), ValueError, r"norm|zero"),
    row("gaussian_kernel sigma=0", lambda f: gaussian_kernel(x(), sigma=0), ValueError, r"`sigma`"),
    row("median_bandwidth one sample", lambda f: median_bandwidth(x(1)), ValueError, r"at least 2 samples"),
    row("median_bandwidth identical", lambda f: median_bandwidth(torch.ones(5, 2)), ValueError, r"identical"),
    row("kernel_feature_map kernel='rbf'", lambda f: kernel_feature_map("rbf", 3, 1.0, 4, 0), ValueError,
        r"`kernel` must be one of"),
    row("kernel_feature_map gaussian no sigma", lambda f: kernel_feature_map("gaussian", 3, None, 4, 0), ValueError,
        r"`sigma`.*median_bandwidth"),
    # ---- KernelPCAOOD --------------------------------------------------------------------------------------
    row("KernelPCAOOD mapping='rbf'", lambda f: KernelPCAOOD("rbf"), ValueError, r"`mapping` must be one of"),
    row("KernelPCAOOD sigma=0", lambda f: KernelPCAOOD(sigma=0), ValueError, r"`sigma`"),
    row("KernelPCAOOD explained_variance=0", lambda f: KernelPCAOOD(explained_variance=0), ValueError,
        r"`explained_variance`.*\(0, 1\]"),
    row("KernelPCAOOD explained_variance=1.5", lambda f: KernelPCAOOD(explained_variance=1.5), ValueError,
        r"`explained_variance`"),
    row("KernelPCAOOD n_components=0", lambda f: KernelPCAOOD(n_components=0), ValueError, r"`n_components`"),
    row("KernelPCAOOD n_frequencies=10**8", lambda f: KernelPCAOOD(n_frequencies=10**8), ValueError,
        r"`n_frequencies`.*GiB"),
    row("KernelPCAOOD seed=None", lambda f: KernelPCAOOD(seed=None), ValueError, r"`seed`"),
    row("KernelPCAOOD.score unfitted", lambda f: KernelPCAOOD(n_frequencies=8).score(x()), RuntimeError,
        r"not fitted.*`fit`"),
    row("KernelPCAOOD.predict uncalibrated",
        lambda f: KernelPCAOOD(n_frequencies=8, n_components=1).fit(x(20)).predict(x()), RuntimeError,
        r"no threshold.*`calibrate"),
    row("KernelPCAOOD.fit one sample", lambda f: KernelPCAOOD(n_frequencies=8).fit(x(1)), RuntimeError,
        r"fewer than 2"),
    row("KernelPCAOOD.fit 1-D", lambda f: KernelPCAOOD(n_frequencies=8).fit(torch.randn(8)), ValueError,
        r"shape \(N, d\)"),
    row("KernelPCAOOD.score wrong width",
        lambda f: KernelPCAOOD(n_frequencies=8, n_components=1).fit(x(20)).score(x(4, 5)), ValueError,
        r"width 5 but 3"),
    row("KernelPCAOOD.calibrate tpr=0",
        lambda f: KernelPCAOOD(n_frequencies=8, n_components=1).fit(x(20)).calibrate(x(), tpr=0), ValueError,
        r"`tpr`"),
    row("KernelPCAOOD cop zero row", lambda f: KernelPCAOOD("cop").fit(torch.zeros(4, 3)), ValueError, r"norm|zero"),
    row("detection_metrics empty", lambda f: detection_metrics(torch.zeros(0), torch.ones(3)), ValueError,
        r"both in- and out-of-distribution"),
    # ---- callbacks -----------------------------------------------------------------------------------------
    row("EmbeddingMetrics metrics={}", lambda f: EmbeddingMetrics({}), ValueError, r"`metrics` must be a non-empty"),
    row("EmbeddingMetrics metrics=list", lambda f: EmbeddingMetrics([FKEAVendi(1.0)]), ValueError, r"`metrics`"),
    row("EmbeddingMetrics two-sample, no reference", lambda f: EmbeddingMetrics({"mmd": FastMMD(1.0)}), ValueError,
        r"`reference_dataloader`.*`reference_features`"),
    row("EmbeddingMetrics reference_features 1-D",
        lambda f: EmbeddingMetrics({"mmd": FastMMD(1.0)}, reference_features=torch.ones(4)), ValueError,
        r"`reference_features` must be an \(N, d\)"),
    row("EmbeddingMetrics paired, no spec_reference", lambda f: EmbeddingMetrics({"s": SPECDivergence("cosine")}),
        ValueError, r"`spec_reference`"),
    row("EmbeddingMetrics images without index", lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, images="x"),
        ValueError, r"`index`"),
    row("EmbeddingMetrics log_prefix=3", lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, log_prefix=3),
        ValueError, r"`log_prefix`"),
    row("EmbeddingMetrics dataloader_idx=-1", lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, dataloader_idx=-1),
        ValueError, r"`dataloader_idx`"),
    row("EmbeddingMetrics gallery_modes=0", lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, gallery_modes=0),
        ValueError, r"`gallery_modes`"),
    row("EmbeddingMetrics embedding=3", lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, embedding=3), ValueError,
        r"`embedding`.*submodule name"),
    row("EmbeddingMetrics fit: no submodule 'decoder'",
        lambda f: fit(EmbeddingMetrics({"v": FKEAVendi(**small())}, embedding="decoder")), ValueError,
        r"'decoder'"),
    row("KPCAOODMonitor refit='never'", lambda f: KPCAOODMonitor(refit="never"), ValueError, r"`refit` must be one of"),
    row("KPCAOODMonitor fit_on=3", lambda f: KPCAOODMonitor(fit_on=3), ValueError, r"`fit_on`"),
    row("KPCAOODMonitor tpr=2", lambda f: KPCAOODMonitor(tpr=2), ValueError, r"`tpr`"),
    row("KPCAOODMonitor max_flagged_rate=0.01", lambda f: KPCAOODMonitor(max_flagged_rate=0.01), ValueError,
        r"`max_flagged_rate`.*2 \* \(1 - tpr\)"),
    row("KPCAOODMonitor mapping='rbf'", lambda f: KPCAOODMonitor(mapping="rbf"), ValueError, r"`mapping`"),
    row("KPCAOODMonitor sigma=0", lambda f: KPCAOODMonitor(sigma=0), ValueError, r"`sigma`"),
    row("KPCAOODMonitor stop_on_drift='yes'", lambda f: KPCAOODMonitor(stop_on_drift="yes"), TypeError,
        r"`stop_on_drift`"),
    row("KPCAOODMonitor log_prefix=None", lambda f: KPCAOODMonitor(log_prefix=None), ValueError, r"`log_prefix`"),
    row("KPCAOODMonitor fit: fit_on names no datamodule method",
        lambda f: fit(KPCAOODMonitor(fit_on="missing_loader", n_frequencies=8)), ValueError, r"missing_loader"),
    row("SPECAlign weight=-1", lambda f: SPECAlign(nn.Identity(), weight=-1), ValueError, r"`weight`.*>= 0"),
    row("SPECAlign kernel='rbf'", lambda f: SPECAlign(nn.Identity(), kernel="rbf"), ValueError, r"`kernel`"),
    row("SPECAlign gaussian without sigmas", lambda f: SPECAlign(nn.Identity(), kernel="gaussian"), ValueError,
        r"`sigma_student` and `sigma_reference`.*match_bandwidth"),
    row("SPECAlign warmup_steps=-1", lambda f: SPECAlign(nn.Identity(), warmup_steps=-1), ValueError,
        r"`warmup_steps`"),
    row("SPECAlign every_n_steps=0", lambda f: SPECAlign(nn.Identity(), every_n_steps=0), ValueError,
        r"`every_n_steps`"),
    row("SPECAlign schedule=3", lambda f: SPECAlign(nn.Identity(), schedule=3), ValueError, r"`schedule`"),
    row("SPECAlign gather='yes'", lambda f: SPECAlign(nn.Identity(), gather="yes"), TypeError, r"`gather`"),
    row("SPECAlign reference=3", lambda f: SPECAlign(3), ValueError, r"SPECAlign\(reference\): the reference must be"),
    row("SPECAlign fit: no submodule 'decoder'", lambda f: fit(SPECAlign(nn.Identity(), student="decoder")),
        ValueError, r"'decoder'"),
    row("DriftMonitor probe=3", lambda f: DriftMonitor(3), ValueError, r"`probe` must be a DataLoader"),
    row("DriftMonitor.load_state_dict without start_ids (a KeyError)", lambda f: DriftMonitor(torch.zeros(4, 2))
        .load_state_dict({"start": torch.zeros(4, 2), "zero_shot_start": 0.0, "last_values": {}}), ValueError,
        r"DriftMonitor\.load_state_dict: the saved state lacks 'start_ids'.*Nothing was loaded"),
    row("DriftMonitor.load_state_dict start of another length", lambda f: DriftMonitor(torch.zeros(4, 2))
        .load_state_dict({"start": torch.zeros(4, 2), "start_ids": torch.arange(3), "zero_shot_start": 0.0,
                          "last_values": {}}), ValueError, r"the saved `start` must be an \(N, d\) tensor"),
    row("DriftMonitor empty tensor probe", lambda f: DriftMonitor(torch.zeros(0, 4)), ValueError, r"`probe`.*no rows"),
    row("DriftMonitor NaN tensor probe", lambda f: DriftMonitor(torch.full((4, 2), float("nan"))), ValueError,
        r"`probe`"),
    row("DriftMonitor kernel='rbf'", lambda f: DriftMonitor(x(), kernel="rbf"), ValueError, r"`kernel`"),
    row("DriftMonitor sigma='wide'", lambda f: DriftMonitor(x(), sigma="wide"), ValueError, r"`sigma`"),
    row("DriftMonitor sigma=0", lambda f: DriftMonitor(x(), kernel="gaussian", sigma=0), ValueError, r"`sigma`"),
    row("DriftMonitor class_prompts without labels", lambda f: DriftMonitor(x(), class_prompts=["a", "b"]),
        ValueError, r"`class_prompts`, `text_encoder` and `labels` together"),
    row("DriftMonitor class_prompts=[]", lambda f: DriftMonitor(x(), class_prompts=[], text_encoder="t", labels=1),
        ValueError, r"`class_prompts` must be a non-empty list"),
    row("DriftMonitor text_encoder=3", lambda f: DriftMonitor(x(), class_prompts=["a"], text_encoder=3, labels=1),
        ValueError, r"`text_encoder` must be"),
    row("DriftMonitor tensor labels of another length",
        lambda f: DriftMonitor(x(), class_prompts=["a"], text_encoder="t", labels=torch.zeros(3, dtype=torch.long)),
        ValueError, r"`labels` must be an integer tensor of shape \(8,\)"),
    row("DriftMonitor top_clusters=0", lambda f: DriftMonitor(x(), top_clusters=0), ValueError, r"`top_clusters`"),
    row("DriftMonitor max_state_bytes=0", lambda f: DriftMonitor(x(), max_state_bytes=0), ValueError,
        r"`max_state_bytes`"),
    row("DriftMonitor log_prefix=None", lambda f: DriftMonitor(x(), log_prefix=None), ValueError, r"`log_prefix`"),
    row("DriftMonitor images=3", lambda f: DriftMonitor(x(), images=3), ValueError, r"`images` must be"),
    row("DriftMonitor fit: a probe over max_state_bytes",
        lambda f: fit(DriftMonitor(x(16, 4), max_state_bytes=100)), ValueError,
        r"`probe`'s start needs 320 bytes.*`max_state_bytes`=100"),
    row("DriftMonitor fit: probe names no datamodule method", lambda f: fit(DriftMonitor("probe_loader")),
        ValueError, r"`probe`='probe_loader' names an attribute"),
    row("DriftMonitor fit: a plain iterable probe without index", lambda f: fit(DriftMonitor([x(4, 4)])),
        ValueError, r"pass `index`"),
    row("DriftMonitor drifted before a validation epoch", lambda f: DriftMonitor(x()).drifted(), RuntimeError,
        r"no validation epoch"),
    # ---- encoders and files --------------------------------------------------------------------------------
    row("load_weights missing file", lambda f: load_weights(f.dir / "none.pt"), FileNotFoundError,
        r"`weights`: no file at"),
    row("load_weights .txt", lambda f: load_weights(f.text), ValueError, r"`weights`.*suffix '.txt'"),
    row("load_weights pickled object", lambda f: load_weights(f.pickled), ValueError,
        r"`weights`: refused to load.*re-save"),
    row("load_weights not a torch file", lambda f: load_weights(f.garbage_pt), ValueError,
        r"`weights`.*not a readable PyTorch file.*torch\.save"),
    row("load_weights no tensors", lambda f: load_weights(f.no_tensors), ValueError, r"`weights`.*no tensors"),
    row("load_weights prefix matches nothing", lambda f: load_weights(f.weights, prefix="visual."), ValueError,
        r"`weights`.*visual\."),
    row("PrecomputedFeatures missing file", lambda f: PrecomputedFeatures(f.dir / "none.npy"), FileNotFoundError,
        r"`source`: no file at"),
    row("PrecomputedFeatures 1-D .npy", lambda f: PrecomputedFeatures(f.vector), ValueError, r"\(N, d\)"),
    row("PrecomputedFeatures int .npy", lambda f: PrecomputedFeatures(f.ints), ValueError, r"floating"),
    row("PrecomputedFeatures pickled .npy", lambda f: PrecomputedFeatures(f.object_npy), ValueError,
        r"`source`.*not a plain numeric \.npy"),
    row("PrecomputedFeatures NaN", lambda f: PrecomputedFeatures(torch.tensor([[0.0, float("nan")]])), ValueError,
        r"NaN or Inf"),
    row("PrecomputedFeatures source=3", lambda f: PrecomputedFeatures(3), ValueError, r"`source` must be"),
    row("PrecomputedFeatures repeated index", lambda f: PrecomputedFeatures(x(3), index=[1, 1, 2]), ValueError,
        r"`index`.*repeated"),
    row("PrecomputedFeatures lookup beyond", lambda f: PrecomputedFeatures(x(3))[torch.tensor([5])], KeyError,
        r"5"),
    row("save_features .csv", lambda f: save_features(f.dir / "out.csv", x()), ValueError, r"`path`.*suffix"),
    row("save_features NaN", lambda f: save_features(f.dir / "out.npy", torch.full((2, 2), float("nan"))),
        ValueError, r"`features` contains NaN"),
    row("EmbeddingFile missing", lambda f: EmbeddingFile(f.dir / "none.npy"), FileNotFoundError,
        r"`FILE`: no file at"),
    row("EmbeddingFile .txt", lambda f: EmbeddingFile(f.text), ValueError, r"`FILE`.*suffix '.txt'.*supported"),
    row("EmbeddingFile truncated .npy", lambda f: EmbeddingFile(f.truncated), ValueError, r"`FILE`"),
    row("EmbeddingFile pickled .pt", lambda f: EmbeddingFile(f.pickled), ValueError, r"`FILE`: refused to load"),
    row("EmbeddingFile pickled .npy", lambda f: EmbeddingFile(f.object_npy), ValueError,
        r"`FILE`.*not a plain numeric"),
    row("EmbeddingFile no rows", lambda f: EmbeddingFile(f.empty), ValueError, r"`FILE`.*no rows"),
    row("EmbeddingFile int safetensors", lambda f: EmbeddingFile(f.int_safetensors), ValueError,
        r"`FILE`.*floating-point"),
    row("EmbeddingFile garbage safetensors", lambda f: EmbeddingFile(f.garbage_safetensors), ValueError,
        r"`FILE`.*safetensors"),
    row("EmbeddingFile NaN rows", lambda f: list(EmbeddingFile(f.nan).chunks(4)), ValueError, r"NaN or Inf"),
    row("PixelEncoder size=0", lambda f: PixelEncoder(size=0), ValueError, r"`size`"),
    row("InputAdapter mean without std", lambda f: InputAdapter((0.5,) * 3, None, (0.5,) * 3, (0.2,) * 3), ValueError,
        r"both `mean_in` and `std_in`"),
    # ---- data ----------------------------------------------------------------------------------------------
    row("DigitsImageText batch_size=0", lambda f: DigitsImageText(batch_size=0), ValueError, r"`batch_size`"),
    row("DigitsImageText held_out=(10,)", lambda f: DigitsImageText(held_out=(10,)), ValueError, r"`held_out`"),
    row("DigitsImageText val_fraction=1", lambda f: DigitsImageText(val_fraction=1.0), ValueError, r"`val_fraction`"),
    row("DigitsImageText template without {}", lambda f: DigitsImageText(template="digit"), ValueError,
        r"`template`"),
    row("DigitsImageText num_workers=-1", lambda f: DigitsImageText(num_workers=-1), ValueError, r"`num_workers`"),
    row("DigitsImageText std=0", lambda f: DigitsImageText(std=(0.0, 1.0, 1.0)), ValueError, r"`std`"),
    # ---- generative (models and data of the generative recipe) -------------------------------------------------
    row("DigitsVAE latent_dim=0", lambda f: DigitsVAE(latent_dim=0), ValueError, r"`latent_dim` must be an integer"),
    row("DigitsVAE beta=0", lambda f: DigitsVAE(beta=0), ValueError, r"`beta`"),
    row("DigitsVAE lr=nan", lambda f: DigitsVAE(lr=float("nan")), ValueError, r"`lr`"),
    row("DigitsImages batch_size=0", lambda f: DigitsImages(batch_size=0), ValueError, r"`batch_size`"),
    row("DigitsImages val_fraction=1.5", lambda f: DigitsImages(val_fraction=1.5), ValueError, r"`val_fraction`"),
    row("DigitsImages drop_classes=(11,)", lambda f: DigitsImages(drop_classes=(11,)), ValueError,
        r"`drop_classes` must be distinct classes"),
    row("DropClassesSampler keep_fraction=2", lambda f: DropClassesSampler([0, 1, 2], keep_fraction=2), ValueError,
        r"`keep_fraction`"),
    row("DropClassesSampler drop_after_epoch=-1", lambda f: DropClassesSampler([0, 1, 2], drop_after_epoch=-1),
        ValueError, r"`drop_after_epoch`"),
    case_row(Case("DropClassesSampler seed='a'", lambda f: DropClassesSampler([0, 1, 2], seed="a"), ValueError,
             r"`seed` must be an integer")),
    # ---- command line --------------------------------------------------------------------------------------
    row("cli: no command", lambda f: cli(), CLIError, r"required: COMMAND|COMMAND"),
    row("cli: unknown command", lambda f: cli("score"), CLIError, r"invalid choice: 'score'"),
    row("cli evaluate: no FILE", lambda f: cli("evaluate", "--sigma", "1"), CLIError, r"FILE is required"),
    row("cli evaluate --sigma -1", lambda f: cli("evaluate", f.ok, "--sigma", "-1"), CLIError, r"`--sigma`"),
    row("cli evaluate --sigma abc", lambda f: cli("evaluate", f.ok, "--sigma", "abc"), CLIError, r"--sigma.*'abc'"),
    row("cli evaluate --n-frequencies 0", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--n-frequencies", "0"),
        CLIError, r"`--n-frequencies`"),
    row("cli evaluate missing FILE", lambda f: cli("evaluate", str(f.dir / "none.npy"), "--sigma", "1"), CLIError,
        r"`FILE`: no file at"),
    row("cli evaluate pickled FILE", lambda f: cli("evaluate", str(f.pickled), "--sigma", "1"), CLIError,
        r"`FILE`: refused to load"),
    row("cli evaluate --alpha 0", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--alpha", "0"), CLIError,
        r"`--alpha`"),
    row("cli evaluate --reference width", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--reference", f.wide),
        CLIError, r"width|--reference"),
    row("cli evaluate --mmd-level 2", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--reference", f.ok,
                                                    "--mmd-level", "2"), CLIError, r"`--mmd-level`"),
    row("cli evaluate --rho 0", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--reference", f.ok, "--rho", "0"),
        CLIError, r"`--rho`"),
    row("cli evaluate --images without --plot-dir",
        lambda f: cli("evaluate", f.ok, "--sigma", "1", "--images", "list.txt"), CLIError, r"`--plot-dir`"),
    row("cli evaluate --thumb-size 0", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--thumb-size", "0"),
        CLIError, r"`--thumb-size`"),
    row("cli evaluate --top-k 0", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--top-k", "0"), CLIError,
        r"`--top-k`"),
    row("cli evaluate --batch-size 0", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--batch-size", "0"),
        CLIError, r"`--batch-size`"),
    row("cli evaluate --device tpu", lambda f: cli("evaluate", f.ok, "--sigma", "1", "--device", "tpu"), CLIError,
        r"--device.*'tpu'"),
    row("cli compare gaussian without sigmas", lambda f: cli("compare", f.ok, f.ok), CLIError, r"`--sigma-a`"),
    row("cli compare unequal N", lambda f: cli("compare", f.ok, f.short, "--kernel", "cosine"), CLIError,
        r"rows|same samples"),
    row("cli compare --kernel rbf", lambda f: cli("compare", f.ok, f.ok, "--kernel", "rbf"), CLIError,
        r"--kernel.*'rbf'"),
    row("cli ood --tpr 2", lambda f: cli("ood", f.ok, f.ok, "--calibrate", f.ok, "--tpr", "2"), CLIError,
        r"`--tpr`"),
    row("cli ood --mapping rbf", lambda f: cli("ood", f.ok, f.ok, "--mapping", "rbf"), CLIError, r"--mapping"),
    row("cli ood --explained-variance 0", lambda f: cli("ood", f.ok, f.ok, "--explained-variance", "0"), CLIError,
        r"`--explained-variance`"),
    row("cli ood --n-components 0", lambda f: cli("ood", f.ok, f.ok, "--n-components", "0"), CLIError,
        r"`--n-components`"),
    row("cli ood TEST width", lambda f: cli("ood", f.ok, f.wide), CLIError, r"width|TEST"),
    # ==== issue 19, part 3: the hostile tester's cases ==========================================================
    # ---- sparse and meta tensors: refused by the shared validators, naming the argument and `x.to_dense()` -------
    row("FKEAVendi.update sparse", lambda f: FKEAVendi(**small()).update(x().to_sparse()), TypeError,
        r"`features` is a sparse tensor.*`features.to_dense\(\)`"),
    row("FKEAVendi(...)(x) sparse CSR", lambda f: quietly(lambda: FKEAVendi(**small())(x().to_sparse_csr())), TypeError,
        r"`features` is a sparse tensor \(layout torch.sparse_csr\)"),
    row("RFFCovariance.update meta", lambda f: RFFCovariance(**small()).update(meta()), TypeError,
        r"`features` is a 'meta' tensor.*no values"),
    row("FINCNovelty.update sparse CSR (was silent)", lambda f: FINCNovelty(**small()).update(x().to_sparse_csr(),
                                                                                          real=False),
        TypeError, r"`features` is a sparse tensor"),
    row("FastMMD.update meta", lambda f: FastMMD(**small()).update(meta(), real=True), TypeError,
        r"`features` is a 'meta' tensor"),
    row("SPECDivergence.update sparse", lambda f: SPECDivergence("cosine").update(x(), x().to_sparse()), TypeError,
        r"`emb_b` is a sparse tensor.*to_dense"),
    row("FKEAVendi.top_samples sparse batch",
        lambda f: updated(FKEAVendi(**small()), x()).reading().top_samples([(x().to_sparse(), torch.arange(8))], 2, 3),
        TypeError, r"`x` is a sparse tensor"),
    row("FKEAVendi(feature=...).update sparse images",
        lambda f: FKEAVendi(**small(), feature=nn.Flatten(), normalize=True).update(torch.rand(2, 1, 4, 4).to_sparse()),
        TypeError, r"`features` is a sparse tensor"),
    row("fkea_vendi sparse", lambda f: fkea_vendi(x().to_sparse(), 1.0, n_frequencies=8), TypeError,
        r"fkea_vendi: `features` is a sparse tensor"),
    row("vendi_exact meta", lambda f: vendi_exact(meta(), 1.0), TypeError, r"vendi_exact: `features` is a 'meta'"),
    row("finc sparse reference", lambda f: finc(x(), x(20).to_sparse(), 1.0, n_frequencies=8), TypeError,
        r"finc: `reference` is a sparse tensor"),
    row("finc_exact sparse CSR", lambda f: finc_exact(x().to_sparse_csr(), x(), 1.0), TypeError,
        r"`generated` is a sparse tensor"),
    row("reference_halves sparse", lambda f: reference_halves(x().to_sparse()), TypeError,
        r"reference_halves: `x` is a sparse tensor"),
    row("fast_mmd_test meta", lambda f: fast_mmd_test(meta(), x(), 1.0, n_frequencies=8), TypeError,
        r"`x` is a 'meta' tensor"),
    row("mmd_exact_test sparse", lambda f: mmd_exact_test(x(), x().to_sparse(), 1.0), TypeError,
        r"`y` is a sparse tensor"),
    row("spec sparse", lambda f: spec(x().to_sparse(), x(), kernel="cosine"), TypeError, r"spec: `emb_a` is a sparse"),
    row("spec_diff_exact meta", lambda f: spec_diff_exact(x(), meta(), kernel="cosine"), TypeError,
        r"`emb_b` is a 'meta' tensor"),
    row("spec_align_loss sparse", lambda f: spec_align_loss(x().to_sparse(), x()), TypeError, r"`emb_a` is a sparse"),
    row("SpecAlignSolver meta", lambda f: SpecAlignSolver()(meta(), x()), TypeError, r"`emb_a` is a 'meta' tensor"),
    row("match_bandwidth sparse", lambda f: match_bandwidth(x().to_sparse(), x(), 1.0), TypeError,
        r"`emb_a` is a sparse tensor"),
    row("GaussianRFF sparse", lambda f: GaussianRFF(3, 4, 1.0)(x().to_sparse()), TypeError, r"`x` is a sparse tensor"),
    row("MultiBandwidthRFF meta", lambda f: MultiBandwidthRFF(3, 4, (1.0,))(meta()), TypeError, r"`x` is a 'meta'"),
    row("CosineMap sparse CSR", lambda f: CosineMap()(x().to_sparse_csr()), TypeError, r"`x` is a sparse tensor"),
    row("gaussian_kernel sparse", lambda f: gaussian_kernel(x().to_sparse()), TypeError, r"`x` is a sparse tensor"),
    row("median_bandwidth meta", lambda f: median_bandwidth(meta()), TypeError, r"`x` is a 'meta' tensor"),
    row("KernelPCAOOD.fit sparse", lambda f: KernelPCAOOD(n_frequencies=8).fit(x().to_sparse()), TypeError,
        r"KernelPCAOOD: `batches` is a sparse tensor"),
    row("KernelPCAOOD.partial_fit sparse (was silent)", lambda f: KernelPCAOOD(n_frequencies=8).partial_fit(
        x().to_sparse()), TypeError, r"`features` is a sparse tensor"),
    row("KernelPCAOOD.score meta", lambda f: KernelPCAOOD(n_frequencies=8, n_components=1).fit(x(20)).score(meta()),
        TypeError, r"`features` is a 'meta' tensor"),
    row("detection_metrics sparse", lambda f: detection_metrics(torch.rand(4).to_sparse(), torch.rand(4)), TypeError,
        r"detection_metrics: `in_scores` is a sparse tensor"),
    row("renyi_entropy sparse", lambda f: renyi_entropy(torch.tensor([0.5, 0.5]).to_sparse(), 2), TypeError,
        r"`eigenvalues` is a sparse tensor"),
    row("EmbeddingMetrics reference_features sparse (was silent)",
        lambda f: EmbeddingMetrics({"m": FastMMD(**small())}, reference_features=x().to_sparse()), TypeError,
        r"`reference_features` is a sparse tensor"),
    row("SPECAlign reference table meta (was silent)", lambda f: SPECAlign(meta(), index=1), TypeError,
        r"SPECAlign\(reference\): `reference` is a 'meta' tensor"),
    row("PrecomputedFeatures sparse (was silent)", lambda f: PrecomputedFeatures(x().to_sparse()), TypeError,
        r"`source` is a sparse tensor"),
    row("save_features meta", lambda f: save_features(f.dir / "meta.npy", meta()), TypeError,
        r"`features` is a 'meta' tensor"),
    row("EmbeddingFile sparse .pt", lambda f: quietly(lambda: EmbeddingFile(f.sparse_pt)), ValueError,
        r"`FILE`.*`features` is a sparse tensor.*to_dense"),
    # ---- numbers: a 0-d tensor for an integer, numeric strings and tensors for numbers ---------------------------
    row("FKEAVendi n_frequencies=tensor(2.)", lambda f: FKEAVendi(1.0, n_frequencies=torch.tensor(2.0)), ValueError,
        r"`n_frequencies` must be an integer >= 1, got a tensor.*`n_frequencies=int\(value\)`"),
    row("FKEAVendi n_frequencies=tensor(2) (was silent)", lambda f: FKEAVendi(1.0, n_frequencies=torch.tensor(2)),
        ValueError, r"`n_frequencies`.*got a tensor"),
    row("FKEAVendi chunk_size=np.array([2])", lambda f: FKEAVendi(1.0, chunk_size=np.array([2])), ValueError,
        r"`chunk_size`.*NumPy array"),
    row("FINCNovelty in_features=tensor(3.)", lambda f: FINCNovelty(1.0, 8, in_features=torch.tensor(3.0)), ValueError,
        r"`in_features`.*got a tensor"),
    row("FastMMD n_frequencies=tensor(2.)", lambda f: FastMMD(1.0, n_frequencies=torch.tensor(2.0)), ValueError,
        r"`n_frequencies`.*got a tensor"),
    row("SPECDivergence in_features=(tensor(3.), 3)",
        lambda f: SPECDivergence("cosine", in_features=(torch.tensor(3.0), 3)), ValueError, r"`in_features`.*tensor"),
    row("RFFCovariance.modes k=tensor(2.)", lambda f: updated(RFFCovariance(**small()), x()).reading().modes(torch.tensor(2.0)),
        ValueError, r"`k` must be an integer"),
    row("FKEAVendi.top_samples per_mode=tensor(2.)",
        lambda f: updated(FKEAVendi(**small()), x()).reading().top_samples([(x(), torch.arange(8))], 2, torch.tensor(2.0)),
        ValueError, r"`per_mode`.*tensor"),
    row("fkea_vendi n_frequencies=tensor(2.)", lambda f: fkea_vendi(x(), 1.0, n_frequencies=torch.tensor(2.0)),
        ValueError, r"`n_frequencies`.*tensor"),
    row("finc n_frequencies=tensor(8.)", lambda f: finc(x(), x(20), 1.0, n_frequencies=torch.tensor(8.0)), ValueError,
        r"`n_frequencies`"),
    row("fast_mmd_test n_permutations=tensor(9.)",
        lambda f: fast_mmd_test(x(), x(), 1.0, n_frequencies=8, n_permutations=torch.tensor(9.0)), ValueError,
        r"`n_permutations`.*tensor"),
    row("mmd_exact chunk_size=tensor(4.)", lambda f: mmd_exact(x(), x(), 1.0, chunk_size=torch.tensor(4.0)),
        ValueError, r"`chunk_size`"),
    row("spec k=tensor(2.)", lambda f: spec(x(), x(seed=1), kernel="cosine", k=torch.tensor(2.0)), ValueError, r"`k`"),
    row("GaussianRFF in_features=tensor(3.)", lambda f: GaussianRFF(torch.tensor(3.0), 4, 1.0), ValueError,
        r"`in_features`.*tensor"),
    row("MultiBandwidthRFF n_frequencies=tensor(4.)", lambda f: MultiBandwidthRFF(3, torch.tensor(4.0), (1.0,)),
        ValueError, r"`n_frequencies`"),
    row("median_bandwidth max_samples=tensor(4.)", lambda f: median_bandwidth(x(), max_samples=torch.tensor(4.0)),
        ValueError, r"`max_samples`"),
    row("median_bandwidth seed='2' (was silent)", lambda f: median_bandwidth(x(), max_samples=4, seed="2"), ValueError,
        r"`seed` must be an integer"),
    row("match_bandwidth max_samples=2.0", lambda f: match_bandwidth(x(), x(), 1.0, max_samples=2.0), ValueError,
        r"`max_samples` must be an integer"),
    row("match_bandwidth seed=tensor(2.) (was silent)", lambda f: match_bandwidth(x(), x(), 1.0,
                                                                                 seed=torch.tensor(2.0)),
        ValueError, r"`seed` must be an integer"),
    row("KernelPCAOOD n_components=tensor(2.)", lambda f: KernelPCAOOD(n_components=torch.tensor(2.0)), ValueError,
        r"`n_components`"),
    row("EmbeddingMetrics gallery_modes=tensor(2.)", lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)},
                                                                               gallery_modes=torch.tensor(2.0)),
        ValueError, r"`gallery_modes`"),
    row("KPCAOODMonitor ood_val_dataloader_idx=tensor(1)", lambda f: KPCAOODMonitor(
        ood_val_dataloader_idx=torch.tensor(1)), ValueError, r"`ood_val_dataloader_idx`"),
    row("SPECAlign every_n_steps=tensor(2.)", lambda f: SPECAlign(nn.Identity(), every_n_steps=torch.tensor(2.0)),
        ValueError, r"`every_n_steps`"),
    row("GeneratedSamples n_samples=tensor(8.)", lambda f: generated(n_samples=torch.tensor(8.0)), ValueError,
        r"`n_samples`"),
    row("PixelEncoder size=tensor(4.)", lambda f: PixelEncoder(size=torch.tensor(4.0)), ValueError, r"`size`"),
    row("DigitsImageText batch_size=tensor(8.)", lambda f: DigitsImageText(batch_size=torch.tensor(8.0)), ValueError,
        r"`batch_size`"),
    row("EmbeddingFile.chunks batch_size='2'", lambda f: list(EmbeddingFile(f.ok).chunks(batch_size="2")), ValueError,
        r"`--batch-size`.*string '2'"),
    row("FKEAVendi sigma='2' (was silent)", lambda f: FKEAVendi(sigma="2"), ValueError,
        r"`sigma` must be a positive number, got the string '2'; pass the number itself, `sigma=2.0`"),
    row("FKEAVendi sigma=b'2' (was silent)", lambda f: FKEAVendi(sigma=b"2"), ValueError, r"`sigma`.*string b'2'"),
    row("FKEAVendi sigma=tensor(1.) (was silent)", lambda f: FKEAVendi(sigma=torch.tensor(1.0)), ValueError,
        r"`sigma`.*tensor.*`sigma=float\(value\)`"),
    row("FINCNovelty rho='2' (was silent)", lambda f: FINCNovelty(1.0, rho="2"), ValueError, r"`rho`.*string '2'"),
    row("FINCNovelty significance=tensor([2.]) (was silent)", lambda f: FINCNovelty(1.0, significance=torch.tensor(
        [2.0])), ValueError, r"`significance`.*tensor"),
    row("FastMMD sigma=tensor(1.)", lambda f: FastMMD(sigma=torch.tensor(1.0)), ValueError, r"`sigma`.*tensor"),
    row("FastMMD.test level='0.05' (was silent)",
        lambda f: updated(FastMMD(**small()), (x(), True), (x(seed=1), False)).reading().test(level="0.05"), ValueError,
        r"`level` must be a number in \(0, 1\), got the string '0.05'"),
    row("fkea_vendi alpha=b'2' (was orders 50)", lambda f: fkea_vendi(x(), 1.0, n_frequencies=8, alpha=b"2"),
        ValueError, r"`alpha`.*string b'2'"),
    row("fkea_vendi alpha=tensor([2.]) (was silent)", lambda f: fkea_vendi(x(), 1.0, n_frequencies=8,
                                                                          alpha=torch.tensor([2.0])),
        ValueError, r"`alpha`.*tensor"),
    row("finc_exact sigma='1' (was silent)", lambda f: finc_exact(x(), x(), "1"), ValueError, r"`sigma`.*string"),
    row("mmd_exact_test level='0.05' (was silent)", lambda f: mmd_exact_test(x(), x(seed=1), 1.0, level="0.05"),
        ValueError, r"`level`.*string"),
    row("SpecAlignSolver tol='1e-7' (was silent)", lambda f: SpecAlignSolver(tol="1e-7"), ValueError,
        r"`tol`.*string '1e-7'"),
    row("match_bandwidth rtol=-1 (was a hang)", lambda f: match_bandwidth(x(), x(seed=1), 1.0, rtol=-1.0),
        ValueError, r"`rtol` must be a finite number > 0"),
    row("match_bandwidth rtol=1e-300 (was a hang)", lambda f: match_bandwidth(x(), x(seed=1), 1.0, rtol=1e-300),
        ValueError, r"`rtol` must be at least 1e-12"),
    row("KernelPCAOOD explained_variance='0.9' (was silent)", lambda f: KernelPCAOOD(explained_variance="0.9"),
        ValueError, r"`explained_variance`.*string"),
    row("KernelPCAOOD.calibrate tpr=tensor(0.9) (was silent)",
        lambda f: KernelPCAOOD(n_frequencies=8, n_components=1).fit(x(20)).calibrate(x(), tpr=torch.tensor(0.9)),
        ValueError, r"`tpr`.*tensor"),
    row("KPCAOODMonitor tpr='0.9' (was silent)", lambda f: KPCAOODMonitor(tpr="0.9"), ValueError, r"`tpr`.*string"),
    row("SPECAlign sigma_student='1' (was silent)",
        lambda f: SPECAlign(nn.Identity(), kernel="gaussian", sigma_student="1", sigma_reference=1.0), ValueError,
        r"`sigma_student`.*string"),
    row("DigitsVAE lr='1e-3'", lambda f: DigitsVAE(lr="1e-3"), ValueError, r"`lr`.*string '1e-3'"),
    row("DropClassesSampler keep_fraction='0.5' (was silent)",
        lambda f: DropClassesSampler([0, 1, 2], keep_fraction="0.5"), ValueError, r"`keep_fraction`.*string"),
    row("DigitsImageText val_fraction=tensor(0.1) (was silent)",
        lambda f: DigitsImageText(val_fraction=torch.tensor(0.1)), ValueError, r"`val_fraction`.*tensor"),
    # ---- allocations: refused before allocating, naming the argument and the bytes ---------------------------------
    row("FKEAVendi in_features=10**9", lambda f: FKEAVendi(1.0, 8, in_features=10**9), ValueError,
        r"GaussianRFF: `in_features`=1000000000 needs .* GiB \([\d,]+ bytes: 1 float64 frequency matrix.*PCA"),
    row("RFFCovariance in_features=10**9", lambda f: RFFCovariance(1.0, 8, in_features=10**9), ValueError,
        r"`in_features`=1000000000 needs .* bytes"),
    row("FINCNovelty in_features=10**9", lambda f: FINCNovelty(1.0, 8, in_features=10**9), ValueError,
        r"`in_features`=1000000000 needs"),
    row("FastMMD in_features=10**9", lambda f: FastMMD(1.0, 8, in_features=10**9), ValueError,
        r"MultiBandwidthRFF: `in_features`=1000000000 needs"),
    row("SPECDivergence cosine in_features=(10**9, 3) (was a hang)",
        lambda f: SPECDivergence("cosine", in_features=(10**9, 3)), ValueError,
        r"SPECDivergence: `in_features`=\(1000000000, 3\) needs .* bytes: 3 float64 matrices of 1000000003"),
    row("SPECDivergence gaussian in_features=(10**9, 3)",
        lambda f: SPECDivergence("gaussian", 1.0, 1.0, n_frequencies=8, in_features=(10**9, 3)), ValueError,
        r"`in_features`=1000000000 needs"),
    row("SPECDivergence cosine update of width 10**6",
        lambda f: SPECDivergence("cosine").update(torch.zeros(1, 10**6), x(1)), ValueError,
        r"`in_features`=\(1000000, 3\) needs"),
    row("GaussianRFF in_features=10**9", lambda f: GaussianRFF(10**9, 8, 1.0), ValueError,
        r"GaussianRFF: `in_features`=1000000000 needs"),
    row("GaussianRFF n_frequencies=10**9", lambda f: GaussianRFF(3, 10**9, 1.0), ValueError,
        r"GaussianRFF: `n_frequencies`=1000000000 needs .* bytes"),
    row("MultiBandwidthRFF in_features=10**9", lambda f: MultiBandwidthRFF(10**9, 8, (1.0,)), ValueError,
        r"`in_features`=1000000000 needs"),
    row("MultiBandwidthRFF n_frequencies=10**9", lambda f: MultiBandwidthRFF(3, 10**9, (1.0,)), ValueError,
        r"`n_frequencies`=1000000000 needs"),
    row("GaussianRFF a batch whose features cannot fit", lambda f: GaussianRFF(1, 10**7, 1.0)(torch.zeros(1000, 1)),
        ValueError, r"`n_frequencies`=10000000 needs .* bytes: the features of a batch of 1000 rows.*smaller batches"),
    row("kernel_feature_map n_frequencies=10**9", lambda f: kernel_feature_map("gaussian", 3, 1.0, 10**9, 0),
        ValueError, r"`n_frequencies`=1000000000 needs"),
    row("SpecAlignSolver gaussian n_frequencies=10**9",
        lambda f: SpecAlignSolver("gaussian", 1.0, 1.0, n_frequencies=10**9), ValueError,
        r"SpecAlignSolver: `n_frequencies`=1000000000 needs"),
    row("fkea_vendi n_frequencies=10**9", lambda f: fkea_vendi(x(), 1.0, n_frequencies=10**9), ValueError,
        r"`n_frequencies`=1000000000 needs"),
    row("spec n_frequencies=10**9", lambda f: spec(x(), x(), sigma_a=1.0, sigma_b=1.0, n_frequencies=10**9),
        ValueError, r"`n_frequencies`=1000000000 needs"),
    row("KernelPCAOOD linear fit of width 10**6", lambda f: KernelPCAOOD("linear").fit(torch.zeros(2, 10**6)),
        ValueError, r"KernelPCAOOD: `in_features`=1000000 needs .* bytes.*projection"),
    row("FKEAVendi.top_samples per_mode=10**9",
        lambda f: updated(FKEAVendi(**small()), x()).reading().top_samples([(x(), torch.arange(8))], 2, 10**9), ValueError,
        r"FKEAVendi: `per_mode`=1000000000 needs .* bytes: scores and ids"),
    row("FINCNovelty.top_samples per_mode=10**9",
        lambda f: updated(FINCNovelty(**small()), (x(20), True), (x(), False)).reading().top_samples([(x(), torch.arange(8))], 2,
                                                                                          10**9),
        ValueError, r"`per_mode`=1000000000 needs"),
    row("SPECDivergence.top_samples per_cluster=10**9",
        lambda f: updated(SPECDivergence("cosine"), (x(), x(seed=1))).reading().top_samples([((x(), x()), torch.arange(8))], 1,
                                                                                 1, 10**9),
        ValueError, r"`per_cluster`=1000000000 needs"),
    row("EmbeddingMetrics gallery_per_mode=10**9 (was silent)",
        lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, gallery_per_mode=10**9), ValueError,
        r"`gallery_per_mode`=1000000000 needs"),
    row("GeneratedSamples gallery_per_mode=10**9 (was silent)", lambda f: generated(gallery_per_mode=10**9),
        ValueError, r"`gallery_per_mode`=1000000000 needs"),
    # ---- SpecAlignSolver (fixed in 6b3c1ef): a step budget, seeds, the warm start of a checkpoint ----------------
    row("SpecAlignSolver steps=10**9 (was a hang)", lambda f: SpecAlignSolver(steps=10**9), ValueError,
        r"`steps` must be an integer in \[1, 100\]"),
    row("SpecAlignSolver seed=None", lambda f: SpecAlignSolver(seed=None), ValueError, r"`seed` must be an integer"),
    row("SpecAlignSolver seed='abc'", lambda f: SpecAlignSolver(seed="abc"), ValueError, r"`seed` must be an integer"),
    row("SpecAlignSolver seed=nan", lambda f: SpecAlignSolver(seed=float("nan")), ValueError, r"`seed`"),
    row("SpecAlignSolver seed=True (was truncated)", lambda f: SpecAlignSolver(seed=True), ValueError, r"`seed`"),
    row("SpecAlignSolver seed=1.5 (was truncated)", lambda f: SpecAlignSolver(seed=1.5), ValueError, r"`seed`"),
    row("SpecAlignSolver.load_state_dict NaN warm start",
        lambda f: SpecAlignSolver().load_state_dict({"warm_start": torch.full((4, 2), float("nan"))}), ValueError,
        r"`warm_start` must be None or a finite.*damaged"),
    # ---- KernelPCAOOD and detection_metrics: what scikit-learn users pass; tpr and scores -------------------------
    row("KernelPCAOOD.fit list of strings", lambda f: KernelPCAOOD(n_frequencies=8).fit([["a", "b"]]), TypeError,
        r"`batches` must hold numbers.*dtype <U1"),
    row("KernelPCAOOD.fit ragged rows", lambda f: KernelPCAOOD(n_frequencies=8).fit([[1.0, 2.0], [1.0]]), TypeError,
        r"`batches` must hold numbers.*ragged"),
    row("KernelPCAOOD.fit None", lambda f: KernelPCAOOD(n_frequencies=8).fit(None), TypeError,
        r"`batches` must be an \(N, d\) table.*or an iterable of"),
    row("KernelPCAOOD.fit integer array", lambda f: KernelPCAOOD(n_frequencies=8).fit(np.ones((4, 3), dtype=np.int64)),
        TypeError, r"`batches` must be floating point.*\.float\(\)"),
    row("detection_metrics tpr=1.5", lambda f: detection_metrics(torch.rand(5), torch.rand(5), tpr=1.5), ValueError,
        r"`tpr` must be in \(0, 1\]"),
    row("detection_metrics tpr=nan", lambda f: detection_metrics(torch.rand(5), torch.rand(5), tpr=float("nan")),
        ValueError, r"`tpr`"),
    row("detection_metrics tpr=0 (was silent)", lambda f: detection_metrics(torch.rand(5), torch.rand(5), tpr=0),
        ValueError, r"`tpr` must be in \(0, 1\]"),
    row("detection_metrics tpr=-1 (was silent)", lambda f: detection_metrics(torch.rand(5), torch.rand(5), tpr=-1),
        ValueError, r"`tpr`"),
    row("detection_metrics NaN in_scores (was silent)",
        lambda f: detection_metrics(torch.tensor([0.1, float("nan")]), torch.rand(3)), ValueError,
        r"`in_scores` holds 1 NaN scores of 2"),
    row("detection_metrics NaN out_scores (was silent)",
        lambda f: detection_metrics(torch.rand(3), torch.tensor([float("nan")])), ValueError,
        r"`out_scores` holds 1 NaN"),
    row("detection_metrics 2-D scores", lambda f: detection_metrics(torch.rand(3, 2), torch.rand(3)), ValueError,
        r"`in_scores` must be a 1-D tensor.*shape \(3, 2\)"),
    row("detection_metrics strings", lambda f: detection_metrics(["a"], torch.rand(3)), TypeError,
        r"`in_scores` must hold numbers"),
    row("detection_metrics None", lambda f: detection_metrics(torch.rand(3), None), TypeError,
        r"`out_scores` must be a 1-D tensor"),
    # ---- extreme finite values: rescaled where the maths allows (tests of each module), refused otherwise ---------
    row("KernelPCAOOD linear fit of +-1e300 (was LinAlgError)",
        lambda f: KernelPCAOOD("linear").fit(x64(20) * 1e300), ValueError,
        r"mapping='linear'\): `batches` reach magnitude .*e\+300.*divide the features by a constant"),
    row("KernelPCAOOD linear fit of float32 +-1e38 (was LinAlgError)",
        lambda f: KernelPCAOOD("linear").fit(x(20) * 1e38), ValueError,
        r"`batches` reach magnitude.*float32.*or pass float64 features"),
    row("KernelPCAOOD linear score of +-1e300 (was a NaN score)",
        lambda f: KernelPCAOOD("linear", n_components=1).fit(x(20)).score(x64() * 1e300), ValueError,
        r"`features` reach magnitude"),
    row("median_bandwidth distances beyond float64",
        lambda f: median_bandwidth(torch.tensor([[-1.7e308], [1.7e308], [1.6e308]], dtype=torch.float64)), ValueError,
        r"median_bandwidth: the median pairwise distance inf exceeds float64's range; rescale the inputs"),
    # ---- files: paths that are no paths, misnamed or damaged files, string ids, tables without columns, weights ------
    row("EmbeddingFile(None)", lambda f: EmbeddingFile(None), TypeError,
        r"`FILE` must be a file path \(a str or pathlib.Path\), got NoneType"),
    row("EmbeddingFile(123)", lambda f: EmbeddingFile(123), TypeError, r"`FILE` must be a file path.*int 123"),
    row("load_weights(None)", lambda f: load_weights(None), TypeError, r"`weights` must be a file path"),
    row("save_features(123, ...)", lambda f: save_features(123, x()), TypeError, r"`path` must be a file path"),
    row("create_clip(pretrained=123)", lambda f: tiny_clip(pretrained=123), TypeError, r"`pretrained` must be a file"),
    row("create_timm_encoder(weights=123)", lambda f: tiny_timm(weights=123), TypeError, r"`weights` must be a file"),
    row("EmbeddingFile .pt named .npy", lambda f: EmbeddingFile(f.pt_as_npy), ValueError,
        r"`FILE`: .* is a zip archive \(a `torch.save` file or an .npz\).*rename a torch file to .pt"),
    row("PrecomputedFeatures truncated .index.npy", lambda f: PrecomputedFeatures(f.broken_index), ValueError,
        r"`source`: the dataset index .*index.npy.* is not a readable .npy array"),
    row("EmbeddingFile string ids in .index.npy", lambda f: EmbeddingFile(f.string_index), ValueError,
        r"`FILE` .*`index` must hold integer dataset indices, got strings such as \['a', 'b', 'c'\]"),
    row("EmbeddingFile string ids in a .pt", lambda f: EmbeddingFile(f.string_index_pt), ValueError,
        r"`index` must hold integer dataset indices, got strings"),
    row("PrecomputedFeatures index=strings", lambda f: PrecomputedFeatures(x(3), index=["a", "b", "c"]), ValueError,
        r"`index` must hold integer dataset indices, got strings"),
    row("PrecomputedFeatures lookup by strings", lambda f: PrecomputedFeatures(x(3))[["a"]], ValueError,
        r"dataset indices \(`ids`\) must be integers, got \['a'\]"),
    row("save_features index=strings", lambda f: save_features(f.dir / "s.npy", x(3), index=["a", "b", "c"]),
        ValueError, r"`index` must hold integer"),
    row("EmbeddingFile (n, 0) .npy (was silent)", lambda f: EmbeddingFile(f.no_columns), ValueError,
        r"`FILE`.*`features` has no columns \(shape \(5, 0\)\)"),
    row("EmbeddingFile (n, 0) .safetensors (was silent)", lambda f: EmbeddingFile(f.no_columns_safetensors),
        ValueError, r"`features` has no columns"),
    row("PrecomputedFeatures (n, 0) tensor (was silent)", lambda f: PrecomputedFeatures(torch.ones(3, 0)), ValueError,
        r"`source` has no columns"),
    row("save_features (n, 0) (was silent)", lambda f: save_features(f.dir / "z.npy", torch.ones(3, 0)), ValueError,
        r"`features` has no columns"),
    row("FKEAVendi.update (n, 0)", lambda f: FKEAVendi(**small()).update(torch.ones(3, 0)), ValueError,
        r"`features` has no columns \(shape \(3, 0\)\)"),
    row("cli evaluate a .pt named .npy", lambda f: cli("evaluate", str(f.pt_as_npy), "--sigma", "1"), CLIError,
        r"`FILE`.*zip archive"),
    row("cli evaluate an (n, 0) file", lambda f: cli("evaluate", str(f.no_columns), "--sigma", "1"), CLIError,
        r"`FILE`.*no columns"),
    row("load_weights NaN weights (was silent)", lambda f: load_weights(f.nan_weights), ValueError,
        r"`weights`: .* holds NaN weights in 1 tensors \(e.g. \['weight'\]\).*earlier checkpoint"),
    row("create_clip NaN weights (was silent)", lambda f: tiny_clip(pretrained=str(f.nan_clip)), ValueError,
        r"`pretrained`: .* holds NaN weights"),
    row("create_timm_encoder NaN weights (was silent)", lambda f: tiny_timm(weights=f.nan_timm), ValueError,
        r"`weights`: .* holds NaN weights"),
    row("create_clip precision='fp7' (was silent fp32)", lambda f: tiny_clip(precision="fp7"), ValueError,
        r"`precision` must be one of \('fp32', 'fp16'"),
    row("create_timm_encoder 0-d pos_embed (IndexError in timm)", lambda f: tiny_timm(weights=f.timm_scalar_pos_embed),
        ValueError, r"`weights`: .* does not fit timm 'vit_small_patch14_dinov2' \(IndexError"),
    row("create_timm_encoder 5-D patch weights (AssertionError in timm)",
        lambda f: tiny_timm(weights=f.timm_5d_patch), ValueError, r"`weights`: .* does not fit timm.*AssertionError"),
    row("create_clip 3-D text positional_embedding (AssertionError in open_clip)",
        lambda f: tiny_clip(pretrained=str(f.clip_3d_positional)), ValueError,
        r"`pretrained`: .* does not fit a CLIP model \(AssertionError"),
    # ---- constructors that accepted what fails at fit --------------------------------------------------------------
    row("EmbeddingMetrics embedding=None (was an AssertionError at fit)",
        lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, embedding=None), ValueError,
        r"EmbeddingMetrics: `embedding` must be a submodule name.*or a function"),
    row("SPECAlign student=None (was an AssertionError at fit)", lambda f: SPECAlign(nn.Identity(), student=None),
        ValueError, r"SPECAlign: `student` must be a submodule name"),
    row("KPCAOODMonitor embedding=None", lambda f: KPCAOODMonitor(embedding=None), ValueError,
        r"KPCAOODMonitor: `embedding` must be a submodule name"),
    row("EmbeddingMetrics reference_features with NaN",
        lambda f: EmbeddingMetrics({"m": FastMMD(1.0)}, reference_features=torch.tensor([[0.0, float("nan")]])),
        ValueError, r"`reference_features` contains NaN or Inf in 1 of 1 rows"),
    row("EmbeddingMetrics integer reference_features",
        lambda f: EmbeddingMetrics({"m": FastMMD(1.0)}, reference_features=np.ones((3, 2), dtype=np.int64)),
        TypeError, r"`reference_features` must be floating point.*\.float\(\)"),
    row("EmbeddingMetrics empty reference_features", lambda f: EmbeddingMetrics(
        {"m": FastMMD(1.0)}, reference_features=torch.ones(0, 3)), ValueError, r"`reference_features` has no rows"),
    row("SPECAlign reference table with NaN", lambda f: SPECAlign(torch.tensor([[0.0, float("nan")]]), index=1),
        ValueError, r"SPECAlign\(reference\): `reference` contains NaN"),
    row("SPECAlign integer reference table", lambda f: SPECAlign(torch.ones(4, 2, dtype=torch.long), index=1),
        TypeError, r"SPECAlign\(reference\): `reference` must be floating point"),
    row("SPECAlign index=1.5", lambda f: SPECAlign(torch.ones(3, 2), index=1.5), ValueError,
        r"`index` must be a key \(str\), a position \(int\) or a function"),
    row("SPECAlign student_input=1.5", lambda f: SPECAlign(nn.Identity(), student_input=1.5), ValueError,
        r"SPECAlign: `student_input` must be a key"),
    row("KPCAOODMonitor ood_val_dataloader_idx=1.5", lambda f: KPCAOODMonitor(ood_val_dataloader_idx=1.5), ValueError,
        r"`ood_val_dataloader_idx` must be the index \(an integer >= 0\).*got 1.5"),
    row("KPCAOODMonitor ood_val_dataloader_idx=None", lambda f: KPCAOODMonitor(ood_val_dataloader_idx=None),
        ValueError, r"`ood_val_dataloader_idx`"),
    row("GeneratedSamples references=42", lambda f: generated(references=42), ValueError,
        r"GeneratedSamples: `references` must map each two-sample metric's name to a loader"),
    row("GeneratedSamples references={'finc': 42}", lambda f: GeneratedSamples(
        {"finc": FINCNovelty(**small())}, nn.Flatten(), references={"finc": 42}), ValueError,
        r"`references\['finc'\]` must be a loader"),
    row("GeneratedSamples image_key=1.5", lambda f: generated(image_key=1.5), ValueError, r"`image_key` must be a key"),
    row("GeneratedSamples alongside={'fid': nn.Linear}", lambda f: generated(alongside={"fid": nn.Linear(2, 2)}),
        ValueError, r"GeneratedSamples: `alongside\['fid'\]` must be a torchmetrics.Metric.*got Linear"),
    row("GeneratedSamples alongside=list", lambda f: generated(alongside=[MeanMetric()]), ValueError,
        r"GeneratedSamples: `alongside` must map names to torchmetrics metrics"),
    row("GeneratedSamples alongside reuses a metrics name", lambda f: generated(alongside={"v": MeanMetric()}),
        ValueError, r"`alongside\['v'\]` has the name of a metric in `metrics`.*rename one"),
    row("GeneratedSamples alongside FID without a reference", lambda f: generated(alongside={"fid": tiny_fid()}),
        ValueError, r"`references` must name a loader.*\['fid'\].*`alongside`.*missing \['fid'\]"),
    row("GeneratedSamples reference for an alongside metric without real=", lambda f: generated(
        alongside={"mean": MeanMetric()}, references={"mean": "val_dataloader"}), ValueError,
        r"`references`.*not two-sample metrics \['mean'\]"),
    row("EmbeddingMetrics alongside FID without reference_dataloader", lambda f: EmbeddingMetrics(
        {"v": FKEAVendi(1.0)}, alongside={"fid": tiny_fid()}), ValueError,
        r"EmbeddingMetrics: `alongside` metrics \['fid'\] take `real=`: pass `reference_dataloader`"),
    row("EmbeddingMetrics reference_dataloader=3", lambda f: EmbeddingMetrics(
        {"m": FastMMD(1.0)}, reference_dataloader=3), ValueError, r"`reference_dataloader` must be a DataLoader"),
    row("EmbeddingMetrics images=3", lambda f: EmbeddingMetrics({"v": FKEAVendi(1.0)}, images=3, index=0), ValueError,
        r"`images` must be `fn\(dataset_index\) -> image`"),
    # ---- writes to what is not a regular file (devices, FIFOs, sockets): written through or refused by name -------
    row("written /dev/full (was a regular file renamed over the device)", lambda f: write_to("/dev/full"),
        WriteError, r"`--output`: could not write to '/dev/full', a device \(No space left on device\); give the "
        r"path of a regular file"),
    row("written a FIFO without a reader (would wait forever)", lambda f: write_to(f.fifo), WriteError,
        r"`--output`: .*fifo.json' is a FIFO that no process is reading; start its reader first"),
    row("written a socket", lambda f: write_to(f.socket), WriteError, r"`--output`: .*socket' is a socket, not a file"),
    row("check_writable a socket", lambda f: check_writable(f.socket, "--scores-out"), WriteError,
        r"`--scores-out`: .* is a socket, not a file; .*regular file"),
    row("cli evaluate --output /dev/full (exited 0)", lambda f: cli("evaluate", str(f.ok), "--sigma", "1",
        "--n-frequencies", "8", "--output", "/dev/full"), CLIError, r"`--output`: could not write to '/dev/full'"),
    # ---- allocations refused before they are made: pixel sizes and pictures --------------------------------------
    row("cli --encoder pixels:100000 (a 120 GB batch)", lambda f: cli("evaluate", str(f.images), "--sigma", "1",
        "--encoder", "pixels:100000"), CLIError, r"`--encoder`=pixels:100000 needs .* GiB.*use a smaller pixel size"),
    row("cli --encoder pixels:1e20", lambda f: cli("evaluate", str(f.images), "--sigma", "1", "--encoder",
        "pixels:1e20"), CLIError, r"`--encoder pixels:1e20`: the pixel size must be an integer >= 1 written in digits"),
    row("cli --encoder pixels:10**20 (an overflow in torch)", lambda f: cli("evaluate", str(f.images), "--sigma", "1",
        "--encoder", "pixels:" + "1" + "0" * 20), CLIError, r"`--encoder`=pixels:1000.* needs"),
    row("PixelEncoder size=10**20", lambda f: PixelEncoder(size=10**20), ValueError,
        r"PixelEncoder: `size`=1000.* needs .*use a smaller `size`"),
    row("log_picture a 0 x 0 inch figure", lambda f: log_picture(csv_logger(f), "t", figure(0, 0), step=0),
        ValueError, r"`picture`: the figure is 0 x 0 pixels.*set_size_inches"),
    # ---- pictures: what log_picture takes, refused by name before any logger is called ---------------------------
    row("log_picture None (logged a blank figure)", lambda f: log_picture(csv_logger(f), "t", None, step=0),
        TypeError, r"`picture` must be an image \(a tensor .*, a NumPy array .*, a PIL image\) or a matplotlib "
        r"figure, got None"),
    row("log_text a list of lines", lambda f: log_text(csv_logger(f), "t", ["mode 1"], step=0), TypeError,
        r"`text` must be a string \(lines a person reads\), got a builtins.list"),
    row("log_text an empty tag", lambda f: log_text(csv_logger(f), " ", "mode 1", step=0), ValueError,
        r"`tag` is empty"),
    row("log_picture a path string", lambda f: log_picture(csv_logger(f), "t", "a.png", step=0), TypeError,
        r"`picture` must be .*got the string 'a.png'; .*PIL.Image.open\(path\)"),
    row("log_picture a list", lambda f: log_picture(csv_logger(f), "t", [[0.0]], step=0), TypeError,
        r"`picture` must be an image.*got a builtins.list"),
    row("log_picture complex (imaginary part lost)", lambda f: log_picture(
        csv_logger(f), "t", torch.zeros(3, 2, 2, dtype=torch.complex64), step=0), TypeError,
        r"`picture` is complex \(torch.complex64\); pass a real image, e.g. `picture.abs\(\)`"),
    row("log_picture complex NumPy", lambda f: log_picture(csv_logger(f), "t", np.zeros((2, 2), np.complex128), step=0),
        TypeError, r"`picture` is complex"),
    row("log_picture empty", lambda f: log_picture(csv_logger(f), "t", torch.zeros(3, 0, 4), step=0), ValueError,
        r"`picture` is an empty image \(shape \(3, 0, 4\)\)"),
    row("log_picture meta", lambda f: log_picture(csv_logger(f), "t", torch.empty(3, 2, 2, device="meta"), step=0),
        TypeError, r"`picture` is a 'meta' tensor"),
    row("log_picture a batch", lambda f: log_picture(csv_logger(f), "t", torch.zeros(2, 3, 4, 4), step=0), ValueError,
        r"`picture` must be an image \(C, H, W\).*make_grid"),
    row("log_picture NaN pixels", lambda f: log_picture(csv_logger(f), "t", torch.full((3, 2, 2), float("nan")),
        step=0), ValueError, r"`picture` holds NaN or Inf values; .*nan_to_num"),
    row("log_picture tag=3", lambda f: log_picture(csv_logger(f), 3, torch.zeros(3, 2, 2), step=0), TypeError,
        r"`tag` must be a string naming the picture.*got 3"),
    row("log_picture tag=''", lambda f: log_picture(csv_logger(f), "", torch.zeros(3, 2, 2), step=0), ValueError,
        r"`tag` is empty"),
    row("log_picture step=1.5", lambda f: log_picture(csv_logger(f), "t", torch.zeros(3, 2, 2), step=1.5), ValueError,
        r"`step` must be an integer >= 0 \(the training step\) or None, got 1.5"),
    row("log_picture step=nan", lambda f: log_picture(csv_logger(f), "t", torch.zeros(3, 2, 2), step=float("nan")),
        ValueError, r"`step` must be an integer >= 0.*got nan"),
    row("log_picture step=inf", lambda f: log_picture(csv_logger(f), "t", torch.zeros(3, 2, 2), step=float("inf")),
        ValueError, r"`step` must be an integer >= 0.*got inf"),
    row("log_picture step=-1", lambda f: log_picture(csv_logger(f), "t", torch.zeros(3, 2, 2), step=-1), ValueError,
        r"`step` must be an integer >= 0.*got -1"),
    row("log_picture step='3'", lambda f: log_picture(csv_logger(f), "t", torch.zeros(3, 2, 2), step="3"), ValueError,
        r"`step` must be an integer >= 0.*the string '3'"),
    # ---- flags taken by truthiness ("x" was True) ---------------------------------------------------------------
    row("FINCNovelty.threshold missing='x'", lambda f: updated(FINCNovelty(**small()), (x(40), True),
        (x(40, seed=1), False)).reading().threshold(missing="x"), TypeError, r"`missing` must be True or False, got 'x'"),
    row("FINCNovelty.top_samples missing='yes'", lambda f: updated(FINCNovelty(**small()), (x(40), True),
        (x(40, seed=1), False)).reading().top_samples([(x(), torch.arange(8))], missing="yes"), TypeError,
        r"`missing` must be True or False, got 'yes'"),
    row("FINCNovelty.sample_count real='x'", lambda f: FINCNovelty(**small()).sample_count(real="x"), TypeError,
        r"`real` must be True or False, got 'x'"),
    row("FINCNovelty.pooled real=1", lambda f: FINCNovelty(**small()).reading().pooled(real=1), TypeError,
        r"`real` must be True or False, got 1"),
    row("FKEAVendi.persistent mode='no'", lambda f: FKEAVendi(**small()).persistent("no"), TypeError,
        r"`mode` must be True or False, got 'no'"),
    row("ConditionalVendi.sample_count real='x'", lambda f: ConditionalVendi(1.0, 1.0, n_frequencies=8).sample_count(
        real="x"), TypeError, r"`real` must be True or False"),
    row("SPECDivergence.clusters sign=True", lambda f: updated(SPECDivergence("cosine"), (x(), x(seed=1))).reading().clusters(
        sign=True), ValueError, r"SPECDivergence.clusters: `sign` must be the integer \+1 .* or -1 .*got True"),
    row("SPECDivergence.top_samples sign=1.0", lambda f: updated(SPECDivergence("cosine"), (x(), x(seed=1)))
        .reading().top_samples([((x(), x()), torch.arange(8))], sign=1.0), ValueError, r"`sign` must be the integer"),
    # ---- older cases: validation before the memory check, batches of top_samples, plot values --------------------
    row("SPECAlign n_frequencies='abc' (crashed in the memory check)", lambda f: SPECAlign(
        nn.Identity(), kernel="gaussian", sigma_student=1.0, sigma_reference=1.0, n_frequencies="abc"), ValueError,
        r"`n_frequencies` must be an integer >= 1, got the string 'abc'"),
    row("FKEAVendi.top_samples None", lambda f: updated(FKEAVendi(**small()), x()).reading().top_samples(None), TypeError,
        r"FKEAVendi.top_samples: `batches` must be an iterable of \(features, ids\) pairs.*got None"),
    row("FKEAVendi.top_samples one bare tensor", lambda f: updated(FKEAVendi(**small()), x()).reading().top_samples(x()),
        TypeError, r"`batches` must be .*; got one Tensor of shape \(8, 3\): pair it with its ids"),
    row("FKEAVendi.top_samples batches of bare tensors", lambda f: updated(FKEAVendi(**small()), x()).reading().top_samples(
        [x()]), TypeError, r"item 0 of `batches` is a Tensor of shape \(8, 3\), not a \(features, ids\) pair"),
    row("FKEAVendi.top_samples bool ids (were read as 0 / 1)", lambda f: updated(FKEAVendi(**small()), x())
        .reading().top_samples([(x(), torch.ones(8, dtype=torch.bool))]), TypeError,
        r"the ids of item 0 of `batches` are bools; pass integer dataset indices"),
    row("FINCNovelty.top_samples None", lambda f: updated(FINCNovelty(**small()), (x(40), True),
        (x(40, seed=1), False)).reading().top_samples(None), TypeError, r"FINCNovelty.top_samples: `batches` must be"),
    row("SPECDivergence.top_samples None", lambda f: updated(SPECDivergence("cosine"), (x(), x(seed=1))).reading().top_samples(
        None), TypeError, r"SPECDivergence.top_samples: `batches` must be"),
    row("FKEAVendi.plot val='abc' (torchmetrics' raw error)", lambda f: updated(FKEAVendi(**small()), x()).plot(
        val="abc"), TypeError, r"FKEAVendi.plot: `val` must be the metric's value .*got the string 'abc'"),
    row("FKEAVendi.plot val=[]", lambda f: updated(FKEAVendi(**small()), x()).plot(val=[]), TypeError,
        r"FKEAVendi.plot: `val` is an empty list"),
    # ---- callback states: checked whole before they load; the checkpoint checked before Lightning reads it -------
    row("GeneratedSamples.load_state_dict without history",
        lambda f: generated().load_state_dict({"metrics": {}, "last_values": {}}), ValueError,
        r"GeneratedSamples\.load_state_dict: the saved state lacks 'history'.*deleting `checkpoint\['callbacks'\]"),
    row("EmbeddingMetrics.load_state_dict without a metric", lambda f: EmbeddingMetrics({"v": FKEAVendi(**small())})
        .load_state_dict({"metrics": {}, "reference_accumulated": False, "last_values": {}}), ValueError,
        r"EmbeddingMetrics\.load_state_dict: the saved `metrics` lack 'v'.*Nothing was loaded"),
    row("KPCAOODMonitor.load_state_dict phase='done'", lambda f: KPCAOODMonitor().load_state_dict(
        {**KPCAOODMonitor().state_dict(), "phase": "done"}), ValueError, r"KPCAOODMonitor.*the saved `phase` must be"),
    row("SPECAlign.load_state_dict without penalised_steps", lambda f: SPECAlign(nn.Linear(4, 2)).load_state_dict(
        {"last_spec_diff": 0.0}), ValueError, r"SPECAlign\(student\)\.load_state_dict: the saved state lacks 'penalised_steps'"),
    row("EmbeddingMetrics fit(ckpt_path=<a cut-off file>)", lambda f: fit(
        EmbeddingMetrics({"v": FKEAVendi(**small())}), ckpt_path=f.cut_ckpt), CheckpointError,
        r"`ckpt_path`: '.*cut\.ckpt' is not a complete checkpoint \(100 bytes.*resume from another checkpoint"),
    # ---- image inputs: float images, list encodings, decompression bombs -------------------------------------------
    row("open_rgb float TIFF in [-1, 0]", lambda f: open_rgb(f.negative_tiff), ValueError,
        r"the image '.*negative\.tif' is a float image with values in \[-1, 0\].*Save it scaled to \[0, 1\]"),
    row("cli evaluate a Latin-1 .txt list", lambda f: cli("evaluate", str(f.latin1_list), "--sigma", "1"), CLIError,
        r"`FILE`: the list '.*latin1\.txt' is not UTF-8 text \(line 2.*save it as UTF-8"),
    # ---- the last raw and silent inputs: random bytes, one generated row, a one-point reference, huge orders ----------
    *[row(f"load_weights random bytes #{i}", lambda f, i=i: load_weights(f.random_pts[i]), ValueError,
          r"`weights`: '.*random_\d+\.pt' is not a readable PyTorch file \(.+\); re-save it with `torch.save`")
      for i in range(4)],
    row("FINCNovelty one generated row", lambda f: updated(FINCNovelty(**small()), (x(40), True), (x(1, seed=1), False))
        .reading().summary(), RuntimeError, r"FINCNovelty: 1 generated sample was accumulated.*at least 2"),
    row("FINCNovelty one generated row, compute", lambda f: updated(FINCNovelty(**small()), (x(40), True),
        (x(1, seed=1), False)).compute(), RuntimeError, r"1 generated sample"),
    row("FINCNovelty identical reference rows", lambda f: updated(FINCNovelty(**small()), (x(1).repeat(40, 1), True),
        (x(30, seed=1), False)).reading().summary(), RuntimeError,
        r"the reference's 40 rows are all one point to the kernel.*pass the reference samples themselves"),
    row("FINCNovelty identical reference rows, missing modes", lambda f: updated(FINCNovelty(**small()),
        (x(1).repeat(9, 1), True), (x(30, seed=1), False)).reading().missing_modes(2), RuntimeError,
        r"the reference's 9 rows are all one point"),
    *[row(f"{type(metric).__name__}(normalize=True).update uint8 images", lambda f, metric=metric: metric.update(
        torch.randint(0, 255, (4, 1, 4, 4), dtype=torch.uint8), **({} if isinstance(metric, FKEAVendi) else
                                                                      {"real": True})),
        TypeError, r"normalize=True expects float") for metric in (
        FKEAVendi(**small(), feature=nn.Flatten(), normalize=True),
        FINCNovelty(**small(), feature=nn.Flatten(), normalize=True),
        FastMMD(**small(), feature=nn.Flatten(), normalize=True))],
    row("FKEAVendi(alpha=2) of one sample", lambda f: updated(FKEAVendi(**small(), alpha=2), x(1)).compute(),
        ValueError, r"RKE is estimated over pairs of distinct samples, so it needs at least 2 samples; got n = 1"),
    row("FKEAVendi(alpha=[1, 2]) of one sample, se", lambda f: updated(FKEAVendi(**small(), alpha=[1, 2]), x(1))
        .reading().summary(), ValueError, r"RKE .* needs at least 2 samples"),
    row("fkea_vendi(alpha=2) of one sample", lambda f: fkea_vendi(x(1), 1.0, n_frequencies=8, alpha=2), ValueError,
        r"needs at least 2 samples; got n = 1"),
    row("vendi_exact(alpha=2) of one sample", lambda f: vendi_exact(x(1), 1.0, alpha=2), ValueError,
        r"needs at least 2 samples"),
    row("open_rgb decompression bomb", lambda f: with_pixel_limit(100, lambda: open_rgb(f.big_png)), ValueError,
        r"'.*big\.png' is 1,600 pixels, over PIL's limit of 200 pixels.*`PIL\.Image\.MAX_IMAGE_PIXELS = 1600`"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Good and bad files for the readers, written once."""
    root = tmp_path_factory.mktemp("bad_inputs")
    f = SimpleNamespace(dir=root)
    f.ok = str(root / "ok.npy")
    np.save(f.ok, np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32))
    f.short = str(root / "short.npy")
    np.save(f.short, np.random.default_rng(1).normal(size=(30, 4)).astype(np.float32))
    f.wide = str(root / "wide.npy")
    np.save(f.wide, np.random.default_rng(2).normal(size=(40, 6)).astype(np.float32))
    f.vector, f.ints, f.empty, f.nan = (root / name for name in ("vector.npy", "ints.npy", "empty.npy", "nan.npy"))
    np.save(f.vector, np.ones(5, dtype=np.float32))
    np.save(f.ints, np.ones((5, 2), dtype=np.int64))
    np.save(f.empty, np.zeros((0, 3), dtype=np.float32))
    np.save(f.nan, np.array([[0.0, 1.0], [np.nan, 2.0]], dtype=np.float32))
    f.object_npy = root / "object.npy"
    np.save(f.object_npy, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    f.truncated = root / "truncated.npy"
    np.save(f.truncated, np.ones((100, 4), dtype=np.float32))
    f.truncated.write_bytes(f.truncated.read_bytes()[:300])
    f.text = root / "weights.txt"
    f.text.write_text("not weights")
    f.pickled = root / "pickled.pt"
    torch.save({"features": torch.ones(3, 2), "meta": argparse.Namespace(a=1)}, f.pickled)
    f.garbage_pt = root / "garbage.pt"
    f.garbage_pt.write_bytes(b"\x00not a torch file" * 10)
    f.random_pts = []  # random bytes reach the weights-only unpickler's every corner (KeyError, IndexError, ...)
    for seed, size in ((4, 5), (29, 50), (44, 2000), (7, 1)):
        path = root / f"random_{seed}.pt"
        path.write_bytes(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes())
        f.random_pts.append(path)
    f.no_tensors = root / "no_tensors.pt"
    torch.save({"step": 3}, f.no_tensors)
    f.weights = root / "weights.pt"
    torch.save(nn.Linear(2, 2).state_dict(), f.weights)
    f.int_safetensors = root / "ints.safetensors"
    save_file({"features": torch.ones(3, 2, dtype=torch.int32)}, str(f.int_safetensors))
    f.garbage_safetensors = root / "garbage.safetensors"
    f.garbage_safetensors.write_bytes(b"\xff" * 64)
    f.cut_ckpt = root / "cut.ckpt"
    torch.save({"state_dict": {}}, f.cut_ckpt)
    f.cut_ckpt.write_bytes(f.cut_ckpt.read_bytes()[:100])

    f.negative_tiff, f.big_png = root / "negative.tif", root / "big.png"
    Image.fromarray(np.full((4, 4), -1.0, np.float32), mode="F").save(f.negative_tiff)
    Image.new("L", (40, 40)).save(f.big_png)
    f.latin1_list = root / "latin1.txt"
    f.latin1_list.write_bytes(f"{f.big_png}\n{root}/caf\u00e9.png\n".encode("latin-1"))
    # issue 19: misnamed, damaged and odd files
    f.sparse_pt = root / "sparse.pt"
    torch.save(torch.ones(4, 3).to_sparse(), f.sparse_pt)
    f.pt_as_npy = root / "torch_file.npy"
    torch.save(torch.ones(4, 3), f.pt_as_npy)
    f.broken_index = root / "broken.npy"
    np.save(f.broken_index, np.ones((4, 3), dtype=np.float32))
    np.save(root / "broken.index.npy", np.arange(4))
    (root / "broken.index.npy").write_bytes((root / "broken.index.npy").read_bytes()[:100])
    f.string_index = root / "strings.npy"
    np.save(f.string_index, np.ones((3, 2), dtype=np.float32))
    np.save(root / "strings.index.npy", np.array(["a", "b", "c"]))
    f.string_index_pt = root / "strings.pt"
    torch.save({"features": torch.ones(3, 2), "index": ["a", "b", "c"]}, f.string_index_pt)
    f.no_columns = root / "no_columns.npy"
    np.save(f.no_columns, np.ones((5, 0), dtype=np.float32))
    f.no_columns_safetensors = root / "no_columns.safetensors"
    save_file({"features": torch.ones(5, 0)}, str(f.no_columns_safetensors))
    f.nan_weights = root / "nan_weights.pt"
    linear = nn.Linear(2, 2).state_dict()
    linear["weight"][0, 0] = float("nan")
    torch.save(linear, f.nan_weights)
    clip_state = {key: value.clone() for key, value in tiny_clip().model.state_dict().items()}
    f.nan_clip, f.clip_3d_positional = root / "nan_clip.pt", root / "clip_3d_positional.pt"
    torch.save({**clip_state, "logit_scale": torch.tensor(float("nan"))}, f.nan_clip)
    torch.save({**clip_state, "positional_embedding": torch.zeros(3, 5, 7)}, f.clip_3d_positional)
    dino_state = dict(tiny_timm().model.state_dict())
    f.nan_timm, f.timm_scalar_pos_embed, f.timm_5d_patch = (
        root / name for name in ("nan_timm.pt", "timm_scalar_pos_embed.pt", "timm_5d_patch.pt")
    )
    torch.save({**dino_state, "cls_token": torch.full_like(dino_state["cls_token"], float("nan"))}, f.nan_timm)
    torch.save({**dino_state, "pos_embed": torch.tensor(0.0)}, f.timm_scalar_pos_embed)
    torch.save({**dino_state, "patch_embed.proj.weight": torch.zeros(2, 3, 4, 5, 6)}, f.timm_5d_patch)
    # what is not a regular file, and a folder of images
    f.fifo = root / "fifo.json"
    os.mkfifo(f.fifo)
    f.socket = root / "socket"
    f.socket_server = socket.socket(socket.AF_UNIX)
    f.socket_server.bind(str(f.socket))
    f.images = root / "images"
    f.images.mkdir()
    for i in range(2):
        Image.new("RGB", (16, 16), (i * 100, 0, 0)).save(f.images / f"{i}.png")
    return f


@pytest.fixture(autouse=True)
def one_thread():
    with linalg_one_thread():
        yield


@pytest.mark.parametrize("case", CASES)
def test_bad_input_raises_a_clear_error(case: Case, files: SimpleNamespace) -> None:
    with pytest.raises(case.error) as caught:
        case.call(files)
    message = str(caught.value.args[0]) if caught.value.args else str(caught.value)
    assert re.search(case.match, message, flags=re.DOTALL), f"{case.entry}: {type(caught.value).__name__}: {message}"


def test_the_table_is_large_and_names_every_kind_of_entry_point() -> None:
    entries = [param.values[0].entry for param in CASES]
    assert len(entries) == len(set(entries)) >= 396
    for prefix in ("FKEAVendi", "FINCNovelty", "FastMMD", "SPECDivergence", "fkea_vendi", "finc", "fast_mmd",
                   "GaussianRFF", "KernelPCAOOD", "EmbeddingMetrics", "KPCAOODMonitor", "SPECAlign", "load_weights",
                   "PrecomputedFeatures", "EmbeddingFile", "cli", "SpecAlignSolver", "GeneratedSamples",
                   "detection_metrics", "ConditionalVendi", "conditional_vendi", "reference_halves", "save_features",
                   "create_clip", "create_timm_encoder"):
        assert any(entry.startswith(prefix) for entry in entries), prefix


def test_documented_results_of_the_last_silent_inputs():
    """Inputs that have an answer, given as documented: batches with no rows add no candidate to the top samples
    (a rank's empty last shard); a Vendi order far above 2 (1e9) gives 1 / lambda_max and a finite se, as "inf"
    does (the gradient is scaled by the largest eigenvalue instead of underflowing to 0 / 0); a generated side whose
    rows are all one point is a collapse, which FINC reports."""
    from lightning_spectral.metrics import ConditionalVendi

    metric = updated(FKEAVendi(**small()), x(20))
    empty = [(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))]
    assert all(len(ids) == 0 for ids, _ in metric.reading().top_samples(empty, 2, 3))
    rows = metric.reading().top_samples(empty + [(x(20), torch.arange(20))] + empty, 2, 3)
    want = metric.reading().top_samples([(x(20), torch.arange(20))], 2, 3)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(rows, want, strict=True))
    huge, inf = (updated(FKEAVendi(1.0, 32, alpha=alpha), x(200)).reading().summary() for alpha in (1e9, "inf"))
    assert float(huge[""]) == pytest.approx(float(inf[""]), rel=1e-6)
    assert math.isfinite(float(huge["se"])) and float(huge["se"]) == pytest.approx(float(inf["se"]), rel=1e-4)
    conditional = ConditionalVendi(1.0, 0.1, 16, alpha=1e9)
    conditional.update(x(40), x(40, 2, seed=3))
    assert all(math.isfinite(float(v)) for v in conditional.reading().summary().values() if not isinstance(v, dict))
    collapsed = updated(FINCNovelty(**small()), (x(40), True), (x(1, seed=1).repeat(30, 1), False))
    assert float(collapsed.compute()) > 0  # the collapse is a novel mode
