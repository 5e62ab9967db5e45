"""The conditional recipe: both configs run whole epochs (tiny settings), and the collapse run names its prompts."""

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def tiny_config(tmp_path, name):
    config = yaml.safe_load((ROOT / "recipes" / "configs" / f"conditional_{name}.yaml").read_text())
    config["trainer"]["max_epochs"] = 2
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path)
    callbacks = [c for c in config["trainer"]["callbacks"] if not c["class_path"].endswith("StderrProgressBar")]
    config["trainer"]["callbacks"] = callbacks  # no progress lines
    (generated,) = [c["init_args"] for c in callbacks if c["class_path"].endswith("GeneratedSamples")]
    for metric in generated["metrics"].values():
        metric["init_args"].update(n_frequencies=64, sigma=0.3)  # a narrow kernel: a 2-epoch model varies a little
    generated["metrics"]["cond"]["init_args"]["per_prompt_frequencies"] = 32
    generated.update(n_samples=230, sample_batch_size=60, every_n_epochs=1)  # 4 chunks, the last one of 50
    config["model"]["hidden"] = 64
    if config["model"]["collapse_after_epoch"] is not None:
        config["model"]["collapse_after_epoch"] = 1
    config["data"]["batch_size"] = 100  # 1,438 digits: the last batch of an epoch holds 38
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(tmp_path, name, capsys, *extra):
    sys.path.insert(0, str(ROOT / "recipes"))
    from conditional_generative import main

    config = ["--config", str(tiny_config(tmp_path, name)), "--kid_subsets", "5", "--kid_subset_size", "50"]
    result = main([*config, *extra])
    return result, capsys.readouterr().out


def test_the_collapse_config_names_the_collapsed_prompts(tmp_path, capsys):
    result, out = run(tmp_path, "collapse", capsys)
    first, last = result["epochs"]
    assert first["per_prompt"][4] > 1.2 and last["per_prompt"][4] < 1.0 + 1e-6 and last["per_prompt"][9] < 1.0 + 1e-6
    assert result["collapsed"] == [4, 9], out
    assert result["least_diverse"][0].startswith("'a photo of the digit 4': Vendi 1.00"), out
    assert "Collapsed prompts (Vendi < half the median prompt's): a photo of the digit 4, a photo of the digit 9" in out
    assert {"vendi", "rke", "cond_vendi", "cond_rke", "information", "kid"} <= set(last)
    assert Path(result["log_dir"], "summary.json").exists()


def test_the_normal_config_names_no_prompt(tmp_path, capsys):
    result, out = run(tmp_path, "normal", capsys)
    assert len(result["epochs"]) == 2 and result["collapsed"] == [], out
    assert min(result["epochs"][-1]["per_prompt"].values()) > 1.2, out


def test_a_run_resumed_from_its_checkpoint_logs_what_the_uninterrupted_run_logs(tmp_path, capsys):
    """Two epochs in one go, against one epoch then a resume from its last.ckpt: the per-epoch values (the collapse
    switch at epoch 1 included) are the same, since each step's noise comes from its own seeded generator."""
    for name in ("whole", "first", "resumed"):
        (tmp_path / name).mkdir()
    whole, _ = run(tmp_path / "whole", "collapse", capsys)
    run(tmp_path / "first", "collapse", capsys, "--trainer.max_epochs=1")
    (checkpoint,) = (tmp_path / "first").rglob("last.ckpt")
    resumed, _ = run(tmp_path / "resumed", "collapse", capsys, f"--ckpt_path={checkpoint}")
    assert len(resumed["epochs"]) == len(whole["epochs"]) == 2
    for got, want in zip(resumed["epochs"], whole["epochs"], strict=True):
        for key, value in want.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert resumed["collapsed"] == whole["collapsed"] == [4, 9]


def test_a_cut_off_checkpoint_is_refused_before_any_work(tmp_path, capsys):
    from lightning_spectral.io import CheckpointError

    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(b"PK\x03\x04 not a whole checkpoint")
    with pytest.raises(CheckpointError, match="--ckpt_path"):
        run(tmp_path, "normal", capsys, f"--ckpt_path={cut}")
