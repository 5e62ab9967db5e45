"""The alignment recipe (recipes/align_clip.py): a short run of the tiny config, resume, and the paper config."""

import importlib
import inspect
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "configs"
sys.path.insert(0, str(ROOT / "recipes"))

from align_clip import accuracy, agreement, knn_accuracy, main, summary_text  # noqa: E402

from tests.conftest import run_recipe_script  # noqa: E402

# Whole epochs, as `make demo` runs them: 1,155 training digits in batches of 64, the last of 3 rows.
QUIET: list[str] = []  # the config's StderrProgressBar writes a few lines to (captured) stderr
FAST = ["--evaluate=false"]


def run(tmp_path, *extra):
    args = ["--config", str(CONFIGS / "tiny.yaml"), f"--trainer.logger.init_args.save_dir={tmp_path}", *QUIET]
    return main([*args, *extra])


def steps_of(checkpoint):
    return torch.load(checkpoint, weights_only=False)["global_step"]


def batches_per_epoch():
    from lightning_spectral.data import DigitsImageText

    data = DigitsImageText(image_size=32, batch_size=64, held_out=[8, 9])
    data.setup()
    assert len(data.train_set) % 64 == 3  # the epoch ends with a batch of 3 rows
    return math.ceil(len(data.train_set) / 64)


class Crash(RuntimeError):
    """The interruption of a run (a pre-empted job)."""


class CrashAt(Callback):
    """Raises :class:`Crash` before the training step that follows optimizer step ``step``."""

    def __init__(self, step: int = 1) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise Crash(f"interrupted after step {self.step}")


def images_logged(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"images": 0})
    events.Reload()
    return events.Tags()["images"]


def test_tiny_recipe_runs_and_reports_every_number(tmp_path, capsys, recwarn):
    result = run(tmp_path, "--trainer.max_epochs=1", f"--summary_json={tmp_path / 'summary.json'}")
    (checkpoint,) = (Path(result["log_dir"]) / "checkpoints").glob("*.ckpt")
    assert steps_of(checkpoint) == batches_per_epoch()  # the whole epoch ran, its last batch of 3 rows included
    # called from Python with args under pytest's own command line: LightningCLI must not warn about both
    assert not [w for w in recwarn if "not recommended to provide both" in str(w.message)]
    expected = {"spec_diff_to_reference", "knn_accuracy", "reference_knn_accuracy", "zero_shot_accuracy", "vendi"}
    for stage in ("before", "after"):
        assert expected | {"ood_auroc"} <= set(result[stage])
        assert all(math.isfinite(v) for v in result[stage].values()), result[stage]
    assert 0 <= result["after"]["spec_diff_to_reference"] <= 1 and 0.5 < result["after"]["ood_auroc"] <= 1
    assert result["before"]["reference_knn_accuracy"] == result["after"]["reference_knn_accuracy"] > 0.9
    # the four callbacks' values were logged at the validation epoch
    logged = result["logged"]
    for key in ("ood/flagged_rate", "ood/held_out/auroc", "val/vendi/vendi_1", "val/novelty/novel_score", "val/mmd/mmd2",
                "val/mmd/minus_log10_p"):
        assert key in logged and math.isfinite(logged[key]), key
    assert "spec_align/spec_diff_epoch" in logged and logged["spec_align/weight"] == 1.0
    # a person can read the summary, and find the logs, galleries and summary file; progress went to stderr
    out, err = capsys.readouterr()
    assert "\r" not in out and "\r" not in err and "epoch 0 (1 of 1) done" in err and "epoch 0 (1 of 1)" not in out
    assert "SPEC-diff to the reference" in out and "kNN accuracy" in out and result["log_dir"] in out
    # each number says where it comes from; the whole validation set: the logged values repeat the table's
    assert "Recomputed from scratch on the whole validation set" in out and "Logged by the callbacks" in out
    assert "docs/concepts.md" in out and "equal, the same weights, samples and settings" in out
    assert json.loads((tmp_path / "summary.json").read_text())["after"] == result["after"]
    assert (Path(result["log_dir"]) / "summary.json").is_file()
    images = set(images_logged(result["log_dir"]))
    assert "val/vendi/modes" in images
    assert ("val/novelty/novel" in images) == (logged["val/novelty/novel_modes"] > 0)  # only significant modes


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Two whole epochs of the tiny recipe, uninterrupted: what every resumed run must log."""
    return run(tmp_path_factory.mktemp("whole"), "--trainer.max_epochs=2", *FAST)


def assert_same_logged(resumed, whole):
    assert set(resumed["logged"]) == set(whole["logged"])
    for key, value in whole["logged"].items():
        assert resumed["logged"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("where", ["end of epoch 0", "inside epoch 1"])
def test_a_resumed_recipe_logs_what_the_uninterrupted_run_logs(tmp_path, uninterrupted, where):
    """Interrupted after epoch 0 (its checkpoint) or inside epoch 1 (a checkpoint every n steps), with the same
    config (the learning-rate schedule spans both epochs): the resumed run trains on the rest of the batches (not
    the first ones of an epoch again) and SPECAlign's epoch means count the whole epoch, so every value logged at
    the end equals the uninterrupted run's (KPCA, Vendi, FINC, FastMMD, SPEC-diff included)."""
    step = batches_per_epoch() + (0 if where == "end of epoch 0" else 6)
    every = [] if step == batches_per_epoch() else [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.init_args.every_n_train_steps={step}",
    ]
    with pytest.raises(Crash):
        run(tmp_path / "first", "--trainer.max_epochs=2", *FAST, *every, f"--trainer.callbacks+={__name__}.CrashAt",
            f"--trainer.callbacks.init_args.step={step}")
    (checkpoint,) = (tmp_path / "first").rglob(f"*step={step}.ckpt")
    state = torch.load(checkpoint, weights_only=False)["callbacks"]
    assert {key.split("{")[0] for key in state} >= {"SPECAlign", "KPCAOODMonitor", "EmbeddingMetrics"}
    resumed = run(tmp_path / "resumed", "--trainer.max_epochs=2", f"--ckpt_path={checkpoint}", *FAST)
    assert_same_logged(resumed, uninterrupted)


def test_summary_labels_both_sources_and_says_when_they_agree():
    after = {"vendi": 49.7336, "ood_auroc": 0.8042, "knn_accuracy": 0.93}
    same = {"val/vendi/vendi_1": 49.7336, "ood/held_out/auroc": 0.8042, "val/novelty/novel_score": 0.0}
    text = summary_text(None, after, same, None, classes=8)
    assert text.index("Recomputed from scratch") < text.index("Vendi score") < text.index("Logged by the callbacks")
    assert "sigma = 0.5" in text and "8 classes" in text and "docs/concepts.md" in text
    assert agreement(after, same) == ["  (val/vendi/vendi_1 vs vendi, ood/held_out/auroc vs ood_auroc: equal, the same "
                                      "weights, samples and settings)"]
    fewer = {**same, "val/vendi/vendi_1": 47.1}
    assert "limit_val_batches" in " ".join(agreement(after, fewer))
    assert agreement({"knn_accuracy": 0.9}, same) == []


def test_image_size_mismatch_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="image_size"):
        run(tmp_path, "--trainer.max_epochs=1", "--data.init_args.image_size=48")


def test_knn_accuracy_against_a_hand_count():
    train = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = torch.tensor([0, 0, 1, 1])
    test = torch.tensor([[1.0, 0.05], [0.05, 1.0], [0.2, 1.0]])
    assert knn_accuracy(train, labels, test, torch.tensor([0, 1, 0]), k=1) == pytest.approx(2 / 3)


def test_accuracy_leaves_unknown_labels_out():
    assert accuracy(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 1, 0, -1])) == pytest.approx(2 / 3)
    assert accuracy(torch.tensor([3]), torch.tensor([3])) == 1.0
    assert accuracy(torch.tensor([0, 0]), torch.tensor([-1, -1])) == 0.0  # nothing known: 0, not NaN


def test_learning_rate_warms_up_linearly_then_decays_as_a_cosine():
    from clip_finetune import CLIPFineTune

    tiny = dict(
        embed_dim=16,
        vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
        text_cfg=dict(context_length=8, width=32, heads=2, layers=1),
    )
    for warmup, total in ((4, 20), (0, 10), (1, 5)):
        module = CLIPFineTune(model_kwargs=tiny, lr=0.1, warmup_steps=warmup, max_steps=total)
        config = module.configure_optimizers()
        optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
        rates = []
        for _ in range(total):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        cosine = [0.05 * (1 + math.cos(math.pi * step / (total - warmup))) for step in range(total - warmup)]
        expected = [0.1 * (step + 1) / warmup for step in range(warmup)] + cosine
        assert rates == pytest.approx(expected, rel=1e-6, abs=1e-12), (warmup, total)


def _check_class_args(node, where):
    """Every class_path imports and every init_arg is a parameter of that class."""
    if isinstance(node, dict):
        if "class_path" in node:
            module, name = node["class_path"].rsplit(".", 1)
            cls = getattr(importlib.import_module(module), name)
            params = inspect.signature(cls.__init__).parameters
            unknown = set(node.get("init_args", {})) - set(params)
            assert not unknown, f"{where}: {cls.__name__} has no parameter(s) {unknown}"
        for key, value in node.items():
            _check_class_args(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_class_args(value, f"{where}[{i}]")


@pytest.mark.parametrize("name", ["tiny.yaml", "vit_b32_dinov2.yaml"])
def test_configs_name_real_classes_and_arguments(name):
    config = yaml.safe_load((CONFIGS / name).read_text())
    _check_class_args(config, name)
    from clip_finetune import CLIPFineTune

    assert set(config["model"]) <= set(inspect.signature(CLIPFineTune.__init__).parameters)
    callbacks = [c["class_path"].rsplit(".", 1)[1] for c in config["trainer"]["callbacks"]]
    assert callbacks == ["SPECAlign", "KPCAOODMonitor", "EmbeddingMetrics", "DriftMonitor", "StderrProgressBar"]


def test_digits_diversity_recipe_runs(tmp_path):
    """The FKEA / FINC walk-through on real digits (recipes/digits_diversity.py) still runs and finds the nines."""
    import subprocess

    script = ROOT / "recipes" / "digits_diversity.py"
    run_ = subprocess.run(
        [sys.executable, str(script), "--n-frequencies", "256", "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout
    )
    assert run_.returncode == 0, run_.stderr[-2000:]
    assert "24 are nines" in run_.stdout
    assert (tmp_path / "finc_novel_mode.png").is_file()


def cut_checkpoint(path):
    torch.save({"state_dict": {"w": torch.zeros(10_000)}}, path)
    path.write_bytes(path.read_bytes()[:20_000])  # the end of the archive is missing
    return path


def test_a_cut_off_checkpoint_is_one_clear_line_before_any_work(tmp_path):
    ckpt = cut_checkpoint(tmp_path / "last.ckpt")
    run_ = run_recipe_script("align_clip.py", "tiny.yaml", tmp_path, f"--ckpt_path={ckpt}")
    assert run_.returncode == 2, run_.stderr[-3000:]
    last = run_.stderr.strip().splitlines()[-1]
    assert last.startswith("align_clip.py: error: `--ckpt_path`:") and str(ckpt) in last, run_.stderr[-3000:]
    assert "20000 bytes" in last and "cut off" in last and "another checkpoint" in last
    assert "Traceback" not in run_.stderr and "PytorchStreamReader" not in run_.stderr
    assert "Evaluating the initial model" not in run_.stderr  # refused before any work


def test_the_generative_recipe_refuses_a_cut_off_or_missing_checkpoint(tmp_path):
    from lightning_spectral.io import CheckpointError

    sys.path.insert(0, str(ROOT / "recipes"))
    from generative import main as generative_main

    config = ["--config", str(CONFIGS / "generative_normal.yaml"), f"--trainer.logger.init_args.save_dir={tmp_path}"]
    with pytest.raises(CheckpointError, match="is not a complete checkpoint"):
        generative_main([*config, f"--ckpt_path={cut_checkpoint(tmp_path / 'last.ckpt')}"])
    with pytest.raises(CheckpointError, match="no checkpoint file at"):
        generative_main([*config, f"--ckpt_path={tmp_path / 'none.ckpt'}"])


TINY_CLIP = dict(embed_dim=16, vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
                 text_cfg=dict(context_length=8, width=32, heads=2, layers=1))
TINY_DINO = dict(img_size=28, depth=1, embed_dim=48, num_heads=2)


def documented_command(config_file):
    """The command the header of a config documents (its continuation lines joined), as argv."""
    import shlex

    lines, taking = [], False
    for line in config_file.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("python recipes/align_clip.py"):
            taking = True
        if taking:
            lines.append(text.rstrip("\\").strip())
            if not text.endswith("\\"):
                break
    return shlex.split(" ".join(lines))


def test_the_paper_config_runs_as_its_header_documents(tmp_path, capsys):
    """The header's command, as written, with the weights files and the CSV it names created here (tiny
    architectures of the same models in a copy of the config, on CPU): it parses, loads both weights files and
    trains; a caption dataset without labels reads "n/a" for the kNN accuracies, and Vendi's note names no class
    count it does not know."""
    import numpy as np
    from PIL import Image
    from safetensors.torch import save_file

    from lightning_spectral.encoders import create_clip, create_timm_encoder

    argv = documented_command(CONFIGS / "vit_b32_dinov2.yaml")
    assert argv[:4] == ["python", "recipes/align_clip.py", "--config", "recipes/configs/vit_b32_dinov2.yaml"], argv
    assert "--reference_weights" in argv and not any(".0." in arg for arg in argv)  # no list index: jsonargparse
    # the files the command names, under tmp_path: tiny models of the same architectures, and a CSV of images
    here = {arg: tmp_path / arg.lstrip("/") for arg in argv if arg.startswith(("/weights/", "/data/"))}
    assert sorted(path.name for path in here.values()) == ["coco_train.csv", "dinov2_vitb14.safetensors",
                                                           "vit_b32.safetensors"]
    for path in here.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    by_name = {path.name: path for path in here.values()}
    clip_state = create_clip("ViT-B-32", **TINY_CLIP).model.state_dict()
    save_file({k: v.contiguous() for k, v in clip_state.items()}, str(by_name["vit_b32.safetensors"]))
    dino_state = create_timm_encoder("vit_base_patch14_dinov2", **TINY_DINO).model.state_dict()
    save_file({k: v.contiguous() for k, v in dino_state.items()}, str(by_name["dinov2_vitb14.safetensors"]))
    rng = np.random.default_rng(0)
    images = by_name["coco_train.csv"].parent
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(images / f"{i}.png")
    by_name["coco_train.csv"].write_text("filepath\ttitle\n" + "".join(f"{i}.png\ta picture {i}\n" for i in range(12)))
    # a copy of the config: tiny architectures and settings, on CPU; its /path/to/... placeholders are kept, so
    # the run only works if the command's flags reach the model, the data and the reference
    config = yaml.safe_load((CONFIGS / "vit_b32_dinov2.yaml").read_text())
    trainer = config["trainer"]
    trainer.update(accelerator="cpu", precision="32-true", max_epochs=1, limit_train_batches=2, log_every_n_steps=1)
    trainer["logger"]["init_args"]["save_dir"] = str(tmp_path / "runs")
    align, kpca, metrics, *_ = trainer["callbacks"]  # then DriftMonitor and the progress bar
    reference = align["init_args"]["reference"]["init_args"]
    assert reference["weights"].startswith("/path/to/")
    reference.update(model_kwargs=TINY_DINO, input_size=28)
    kpca["init_args"]["n_frequencies"] = 16
    for metric in metrics["init_args"]["metrics"].values():
        metric["init_args"]["n_frequencies"] = 16
    config["model"]["model_kwargs"] = TINY_CLIP
    config["data"]["init_args"].update(image_size=32, batch_size=4, num_workers=0, val_fraction=0.25)
    copy = tmp_path / "vit_b32_dinov2.yaml"
    copy.write_text(yaml.safe_dump(config))
    args = [str(here.get(arg, copy if arg == "recipes/configs/vit_b32_dinov2.yaml" else arg)) for arg in argv[2:]]
    result = main(args)
    saved = yaml.safe_load((Path(result["log_dir"]) / "config.yaml").read_text())
    assert saved["trainer"]["callbacks"][0]["init_args"]["reference"]["init_args"]["weights"] == str(
        by_name["dinov2_vitb14.safetensors"])
    assert saved["model"]["pretrained"] == str(by_name["vit_b32.safetensors"])
    assert "knn_accuracy" not in result["after"] and "reference_knn_accuracy" not in result["after"]
    out = capsys.readouterr().out
    knn = [line for line in out.splitlines() if "kNN accuracy" in line]
    assert len(knn) == 2 and all(line.split()[-2:] == ["n/a", "n/a"] for line in knn), knn
    assert "0.0000" not in " ".join(knn) and "no class labels" in out
    assert "8 classes" not in out and "far above the number of classes" in out


def test_reference_weights_without_a_reference_class_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--config", str(CONFIGS / "tiny.yaml"), f"--trainer.logger.init_args.save_dir={tmp_path}",
              "--reference_weights", str(tmp_path / "w.safetensors")])
    assert caught.value.code == 2
    assert "`--reference_weights`: the config has no SPECAlign callback whose reference" in capsys.readouterr().err


def test_the_generative_recipe_refuses_a_negative_kid_subsets(capsys):
    from generative import main as generative_main

    for flag, message in (("--kid_subsets=-1", 'key "kid_subsets"'), ("--kid_subset_size=0", 'key "kid_subset_size"')):
        with pytest.raises(SystemExit) as caught:  # was exit 0, KID skipped
            generative_main(["--config", str(CONFIGS / "generative_normal.yaml"), flag])
        assert caught.value.code == 2 and message in capsys.readouterr().err
