"""README.md runs as written: every ```python block, and the `lightning-spectral ...` commands of its Command line
section, read from the README at test time.

Each block is one test, named after its section (``metrics-in-a-lightningmodule-2`` is that section's second
block). The test provides only the free names the block relies on (an ``encoder``, ``reference_embeddings``, a
``dataset``, loaders, ...) as small real objects on scikit-learn's digits, and runs what the block defines inside
a real ``Trainer.fit`` / ``Trainer.validate`` over whole epochs (the last batch smaller than the others). A README
edit that breaks a block fails the test of that block; a new block fails `test_every_block_has_a_test` until it
gets one here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.data import ImageDataset, load_digit_images
from lightning_spectral.encoders import save_features
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def blocks(language: str) -> dict[str, str]:
    """The README's fenced blocks of ``language`` by id: the slug of their ``##`` section, ``-2`` for its second."""
    found: dict[str, str] = {}
    section = "top"
    fence = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
    position = 0
    text = README.read_text(encoding="utf-8")
    for match in fence.finditer(text):
        for heading in re.findall(r"^## (.+)$", text[position:match.start()], re.M):
            section = slug(heading)
        position = match.end()
        if match[1] != language:
            continue
        key, n = section, 1
        while key in found:
            n += 1
            key = f"{section}-{n}"
        found[key] = match[2]
    return found


# ---------------------------------------------------------------------------------------------------------------
# the free names: small real objects on the digits
# ---------------------------------------------------------------------------------------------------------------

IMAGES, LABELS = load_digit_images()  # (1797, 1, 8, 8) in [0, 1], digits 0-9
VAL_ROWS = list(range(1500, 1797))  # 297 samples: batches of 64, the last of 41
TRAIN_ROWS = list(range(0, 1500))


def make_encoder(width: int = 16, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(64, width))
    with torch.no_grad():
        encoder[1].weight.mul_(40.0)  # distances of a few sigma = 7 between digits
    return encoder


def dict_loader(rows, batch_size=64, shuffle=False) -> DataLoader:
    """Batches ``{"image", "label", "index"}`` (the datamodules' convention), ``index`` = the dataset index."""
    return DataLoader(ImageDataset(IMAGES, LABELS, rows), batch_size=batch_size, shuffle=shuffle)


def tuple_loader(images, batch_size=64) -> DataLoader:
    return DataLoader(TensorDataset(images, torch.zeros(len(images), dtype=torch.long)), batch_size=batch_size)


def quiet_trainer(tmp_path, **kwargs) -> L.Trainer:
    kwargs.setdefault("logger", False)
    return L.Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, default_root_dir=tmp_path, **kwargs)


def run_block(code: str, names: dict) -> dict:
    namespace = {"__name__": "readme", **names}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own code
    return namespace


def metric_of(rows, metric):
    """``metric`` updated with the encoder's embeddings of all ``rows`` at once: the whole-epoch value."""
    with torch.no_grad():
        metric.update(make_encoder()(IMAGES[rows]))
    return float(metric.compute())


def check_metrics_block(tmp_path, names):
    module = names["Module"](make_encoder(), names["reference_embeddings"])
    trainer = quiet_trainer(tmp_path)
    first = trainer.validate(module, dict_loader(VAL_ROWS), verbose=False)[0]
    second = trainer.validate(module, dict_loader(VAL_ROWS), verbose=False)[0]  # the reference is kept
    assert module.novelty.sample_count(real=True) == len(TRAIN_ROWS)  # accumulated once, not twice
    assert first == pytest.approx(second, rel=1e-6)  # multithreaded eigensolvers: equal to ~1e-7
    # every batch of the epoch, the last of 41 rows included: the values of all validation samples at once
    assert first["val/vendi"] == pytest.approx(metric_of(VAL_ROWS, FKEAVendi(sigma=7.0, n_frequencies=1024)),
                                               rel=1e-5)
    novelty = FINCNovelty(sigma=7.0, n_frequencies=1024, rho=2.0)
    novelty.update(names["reference_embeddings"], real=True)
    assert first["val/novelty"] == pytest.approx(metric_of(VAL_ROWS, _Fake(novelty)), rel=1e-5, abs=1e-9)
    mmd = FastMMD(sigma=7.0, n_frequencies=1024)
    mmd.update(names["reference_embeddings"], real=True)
    assert first["val/mmd"] == pytest.approx(metric_of(VAL_ROWS, _Fake(mmd)), rel=1e-4, abs=1e-9)
    return module


class _Fake:
    """A two-sample metric whose ``update(x)`` feeds the generated side."""

    def __init__(self, metric):
        self.metric = metric

    def update(self, x):
        self.metric.update(x, real=False)

    def compute(self):
        return self.metric.compute()


def reference_names():
    with torch.no_grad():
        return {"encoder": make_encoder(), "reference_embeddings": make_encoder()(IMAGES[TRAIN_ROWS])}


def metrics_in_a_lightning_module(tmp_path, monkeypatch):
    names = run_block(blocks("python")["metrics-in-a-lightningmodule"], reference_names())
    check_metrics_block(tmp_path, names)


def look_at_the_modes(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    python = blocks("python")
    names = run_block(python["metrics-in-a-lightningmodule"], reference_names())
    dataset = ImageDataset(IMAGES, LABELS, range(len(IMAGES)))  # dataset[i]: the sample of dataset index i
    names = run_block(python["metrics-in-a-lightningmodule-2"], {**names, "dataset": dataset})
    module = names["ModuleWithModes"](make_encoder(), names["reference_embeddings"])
    logger = TensorBoardLogger(tmp_path, name="modes")
    trainer = quiet_trainer(tmp_path, logger=logger)
    logged = trainer.validate(module, dict_loader(VAL_ROWS), verbose=False)[0]
    assert logged["val/vendi"] > 1  # the modes were read before Lightning reset the metric
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert {"val/modes", "val/spectrum"} <= set(events.Tags()["images"])


# ---------------------------------------------------------------------------------------------------------------
# SPEC
# ---------------------------------------------------------------------------------------------------------------


class TinyClip(L.LightningModule):
    """A module with a ``model.visual`` image tower, trained to reconstruct the digits from its embedding."""

    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.visual = make_encoder(width=8)
        self.decoder = nn.Linear(8, 64)

    def training_step(self, batch, batch_idx):
        image = batch["image"]
        return nn.functional.mse_loss(self.decoder(self.model.visual(image) / 40), image.flatten(1))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def compare_and_align_embeddings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # L.Trainer() as written logs and checkpoints into the working folder
    clip_module = TinyClip()
    with torch.no_grad():
        clip_features = clip_module.model.visual(IMAGES)
    dino_features = IMAGES.flatten(1) - IMAGES.flatten(1).mean(1, keepdim=True)  # a reference: centred pixels
    train_loader = dict_loader(list(range(200)), shuffle=True)  # 4 batches, the last of 8
    names = run_block(blocks("python")["compare-and-align-embeddings-spec"], {
        "clip_features": clip_features, "dino_features": dino_features, "clip_module": clip_module,
        "train_loader": train_loader,
    })
    assert 0 < float(names["result"].spec_diff) < 1
    assert names["align"].penalised_steps == 10 * 4  # every step of 10 whole epochs
    assert torch.isfinite(names["trainer"].callback_metrics["spec_align/spec_diff_epoch"])


# ---------------------------------------------------------------------------------------------------------------
# OOD
# ---------------------------------------------------------------------------------------------------------------


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = make_encoder(width=16)
        self.head = nn.Linear(16, 10)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return nn.functional.cross_entropy(self.head(self.encoder(images) / 40), labels)

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        self.log("val/loss", nn.functional.cross_entropy(self.head(self.encoder(images) / 40), labels))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def out_of_distribution_detection(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside, outside = LABELS < 8, LABELS >= 8  # digits 8 and 9 play SVHN
    train = TensorDataset(IMAGES[inside][:1000], LABELS[inside][:1000])
    val = TensorDataset(IMAGES[inside][1000:], LABELS[inside][1000:])
    model = Classifier()
    embeddings = torch.nn.functional.normalize(torch.randn(3, 800, 16), dim=2)
    names = run_block(blocks("python")["out-of-distribution-detection"], {
        "train_eval_loader": tuple_loader(train.tensors[0]),
        "svhn_loader": tuple_loader(IMAGES[outside]),
        "model": model,
        "train_loader": DataLoader(train, batch_size=64, shuffle=True),  # 16 batches, the last of 40
        "val_loader": DataLoader(val, batch_size=64),
        "train_embeddings": embeddings[0], "val_embeddings": embeddings[1], "new_embeddings": embeddings[2],
        "ood_embeddings": embeddings[2] + 0.5,
    })
    monitor, detector = names["monitor"], names["detector"]
    assert monitor.n_fits == 1 and monitor.detector.fitted  # fitted at the first validation epoch, then monitoring
    assert torch.isfinite(monitor.detector.threshold_)
    assert detector.fitted and detector.predict(embeddings[2]).shape == (800,)


# ---------------------------------------------------------------------------------------------------------------
# the core
# ---------------------------------------------------------------------------------------------------------------


def using_the_core(tmp_path, monkeypatch):
    names = run_block(blocks("python")["using-the-core"], {})
    covariance = names["covariance"]
    assert covariance.shape == (2048, 2048) and float(covariance.trace()) == pytest.approx(1.0, abs=1e-6)
    assert names["metric"].sample_count() == 10_000


# ---------------------------------------------------------------------------------------------------------------
# FID beside Vendi (GeneratedSamples alongside=)
# ---------------------------------------------------------------------------------------------------------------


def fid_beside_vendi(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "recipes"))
    from digits_vae import DigitsVAE
    from torchmetrics.image.fid import FrechetInceptionDistance

    from lightning_spectral.callbacks import draw_samples
    from lightning_spectral.data import DigitsImages

    monkeypatch.chdir(tmp_path)  # L.Trainer() as written logs and checkpoints into the working folder
    torch.manual_seed(0)
    vae, digits = DigitsVAE(hidden=32, n_components=5), DigitsImages(batch_size=256)  # the last batch smaller
    names = run_block(blocks("python")["generative-models-which-modes-a-model-drops-or-invents"],
                      {"vae": vae, "digits": digits})
    generated, trainer = names["generated"], names["trainer"]
    fid = FrechetInceptionDistance(feature=names["fid"].inception, normalize=True)  # the same extractor, by hand
    for _, images in draw_samples(lambda m, n, g: m.sample(n, generator=g), vae.eval(), 500, 250, 0):
        fid.update(images, real=False)
    for batch in digits.reference_dataloader():
        fid.update(batch["image"], real=True)
    assert generated.last_values["fid"] == pytest.approx(float(fid.compute()), rel=1e-6)
    assert float(trainer.callback_metrics["gen/fid"]) == pytest.approx(generated.last_values["fid"], rel=1e-6)
    assert "gen/vendi/vendi_1" in trainer.callback_metrics


def diversity_loss_block(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # L.Trainer() as written logs and checkpoints into the working folder
    torch.manual_seed(0)
    names = run_block(blocks("python")["generative-models-a-diversity-loss-against-dropped-modes"], {})
    trainer, regularizer = names["trainer"], names["regularizer"]
    # every batch of the epoch (1,797 training digits in batches of 64, the last smaller) added to the covariance
    batches = len(names["digits"].train_dataloader())
    assert trainer.global_step == 2 * batches  # two optimisers a step
    assert regularizer.running.weight == pytest.approx(sum(0.99**k * 64 for k in range(batches)), rel=0.05)
    assert {"diversity/loss_epoch", "diversity/rke_epoch"} <= set(trainer.callback_metrics)
    assert 1.0 < float(trainer.callback_metrics["diversity/rke_epoch"])


#: README block id -> the function that runs it with its free names.
RUNNERS = {
    "metrics-in-a-lightningmodule": metrics_in_a_lightning_module,
    "metrics-in-a-lightningmodule-2": look_at_the_modes,
    "compare-and-align-embeddings-spec": compare_and_align_embeddings,
    "out-of-distribution-detection": out_of_distribution_detection,
    "using-the-core": using_the_core,
    "generative-models-which-modes-a-model-drops-or-invents": fid_beside_vendi,
    "generative-models-a-diversity-loss-against-dropped-modes": diversity_loss_block,
}


def test_every_block_has_a_test():
    assert set(blocks("python")) == set(RUNNERS), "a README ```python block without a test here (or a test of a "\
        "block that is gone): add it to RUNNERS"


@pytest.mark.parametrize("block", list(RUNNERS))
def test_python_block(block, tmp_path, monkeypatch):
    assert block in blocks("python"), f"README.md has no block {block!r} any more; update RUNNERS"
    RUNNERS[block](tmp_path, monkeypatch)


# ---------------------------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------------------------


def cli_commands() -> list[str]:
    """The ``lightning-spectral ...`` lines of the Command line section's bash blocks."""
    commands = []
    for key, code in blocks("bash").items():
        if key.startswith(("command-line", "generative-models")):
            commands += [line for line in code.splitlines() if line.startswith("lightning-spectral ")]
    return commands


def test_the_command_line_section_lists_its_commands():
    assert [shlex.split(c)[1] for c in cli_commands()] == ["evaluate", "evaluate", "compare", "ood"]


def image_folders(root: Path) -> None:
    """``real/`` (898 digits 0-9, in sub-folders) and ``generated/`` (the other digits' 0-6, about 630: a model that
    lost 7, 8 and 9) as PNG files of 32 x 32 px. The halves are a random split: the data set's first and second
    halves come from different writers, whose styles FINC names as missing too."""
    from PIL import Image

    images, labels = load_digit_images()
    half = len(labels) // 2
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0)).tolist()
    for folder, keep, part in (("real", range(10), order[:half]), ("generated", range(7), order[half:])):
        for i in (i for i in part if int(labels[i]) in keep):
            where = root / folder / f"class{int(labels[i])}" if folder == "real" else root / folder
            where.mkdir(parents=True, exist_ok=True)
            pixels = (images[i, 0].numpy() * 255).astype(np.uint8)
            Image.fromarray(pixels).resize((32, 32), Image.NEAREST).save(where / f"{i}.png")


@pytest.mark.parametrize("command", cli_commands(), ids=lambda c: "-".join(shlex.split(c)[1:3]).replace("/", ""))
def test_command_line(tmp_path, command):
    if "generated/" in command:
        image_folders(tmp_path)
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 32)) * 20

    def table(n, shift=0.0):
        return torch.from_numpy((centres[rng.integers(5, size=n)] + rng.normal(size=(n, 32)) + shift)
                                .astype(np.float32))

    for name in ("gen.npy", "ref.safetensors", "train.npy", "test.npy", "val.npy"):
        save_features(tmp_path / name, table(600))
    save_features(tmp_path / "ood.npy", table(300, shift=30.0))
    clip = table(400)
    save_features(tmp_path / "clip.npy", clip)
    save_features(tmp_path / "dino.pt", clip @ torch.from_numpy(rng.normal(size=(32, 24)).astype(np.float32)))
    script = shutil.which("lightning-spectral", path=str(Path(sys.executable).parent))
    assert script is not None, "the console script is not installed: pip install -e ."
    argv = [script, *shlex.split(command, comments=True)[1:], "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "scores.json").read_text()) if "--output" in command else json.loads(run.stdout)
    assert result["command"] == shlex.split(command)[1] and result["world_size"] == 1
    if "images" in result:  # the two-folder command: embedded, measured and drawn
        assert result["images"]["file"]["images"] == 628 and result["images"]["reference"]["images"] == 898
        assert {"modes", "novel_spectrum", "missing_modes"} <= set(result["pictures"]) and result["mmd"]["reject"]
        named = []  # each missing region's dominant class (its real/classN folder) and its share of the samples
        for region in result["finc"]["missing"]["regions"]:
            classes = [Path(path).parent.name for path in region["samples"]]
            named.append(max((classes.count(name) / len(classes), name) for name in set(classes)))
        assert {name for purity, name in named if purity >= 0.8} == {"class7", "class8", "class9"}
        assert all(name in {"class7", "class8", "class9"} for _, name in named)  # the README: 7s, 8s and 9s only
        assert result["finc"]["missing"]["n_significant"] == 4 and len(named) == 6  # as the README says
