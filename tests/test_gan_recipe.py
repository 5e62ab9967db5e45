"""The GAN recipe (recipes/gan.py over recipes/digits_gan.py): its two configs, shortened, run as their headers say;
the config with DiversityRegularizer adds the loss, the other does not; a resumed run trains as an uninterrupted one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import run_recipe_script

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "configs"


@pytest.fixture(scope="module")
def gan_main():
    sys.path.insert(0, str(ROOT / "recipes"))
    from gan import main

    return main


def short_config(tmp_path: Path, name: str, epochs: int = 2, **generated) -> Path:
    """The config as shipped, its runs under ``tmp_path``, ``epochs`` long, measured at the last epoch, small."""
    config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    config["trainer"]["max_epochs"] = epochs
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path)
    for callback in config["trainer"]["callbacks"]:
        if callback["class_path"].endswith("GeneratedSamples"):
            arguments = callback["init_args"]
            arguments.update(every_n_epochs=epochs, n_samples=300, **generated)
            for metric in arguments["metrics"].values():
                metric["init_args"]["n_frequencies"] = 64
        if callback["class_path"].endswith("DiversityRegularizer"):
            callback["init_args"]["n_frequencies"] = 64
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_configs_name_real_classes_and_arguments():
    from tests.test_recipe import _check_class_args

    for name in ("gan.yaml", "gan_diversity.yaml"):
        _check_class_args(yaml.safe_load((CONFIGS / name).read_text()), name)
    plain, regularised = (yaml.safe_load((CONFIGS / name).read_text()) for name in ("gan.yaml", "gan_diversity.yaml"))
    added = [c for c in regularised["trainer"]["callbacks"] if c not in plain["trainer"]["callbacks"]]
    assert [c["class_path"] for c in added] == ["lightning_spectral.callbacks.DiversityRegularizer"]
    assert plain["model"] == regularised["model"] and plain["data"] == regularised["data"]


def test_the_gan_trains_with_and_without_the_regulariser_and_is_measured_without_a_validation_step(
        gan_main, tmp_path, capsys):
    plain = gan_main(["--config", str(short_config(tmp_path, "gan")), "--kid_subsets", "5", "--kid_subset_size", "100"])
    regularised = gan_main(["--config", str(short_config(tmp_path, "gan_diversity")), "--kid_subsets", "0"])
    out = capsys.readouterr().out
    assert [row["epoch"] for row in plain["epochs"]] == [2] == [row["epoch"] for row in regularised["epochs"]]
    assert "diversity" not in plain and "Generated samples of DigitsGAN" in out
    assert set(regularised["diversity"]) == {"loss", "rke"} and regularised["diversity"]["rke"] > 1.0
    assert "DiversityRegularizer, the last epoch's means: loss" in out
    logged = {path.name for path in Path(regularised["log_dir"]).glob("events.out.tfevents.*")}
    assert logged, "the TensorBoard logger wrote nothing"


def test_a_resumed_regularised_run_trains_as_an_uninterrupted_one(gan_main, tmp_path):
    from digits_gan import DigitsGAN

    config = str(short_config(tmp_path, "gan_diversity", epochs=2))
    whole = gan_main(["--config", config, "--kid_subsets", "0", "--trainer.logger.init_args.version=whole"])
    gan_main(["--config", config, "--kid_subsets", "0", "--trainer.max_epochs=1",
              "--trainer.logger.init_args.version=first"])
    first = Path(tmp_path, "gan_diversity", "first", "checkpoints", "last.ckpt")
    resumed = gan_main(["--config", config, "--kid_subsets", "0", f"--ckpt_path={first}",
                        "--trainer.logger.init_args.version=resumed"])
    ends = [torch.load(Path(r["log_dir"], "checkpoints", "last.ckpt"), weights_only=False) for r in (whole, resumed)]
    for name, value in ends[0]["state_dict"].items():
        torch.testing.assert_close(ends[1]["state_dict"][name], value, msg=name)
    states = [next(v for k, v in end["callbacks"].items() if "DiversityRegularizer" in k) for end in ends]
    torch.testing.assert_close(states[1]["running"]["total"], states[0]["running"]["total"])
    assert states[1]["running"]["weight"] == pytest.approx(states[0]["running"]["weight"])
    assert resumed["diversity"] == pytest.approx(whole["diversity"])
    model = DigitsGAN.load_from_checkpoint(Path(whole["log_dir"], "checkpoints", "last.ckpt"))
    samples = model.sample(8, torch.Generator().manual_seed(0))
    assert samples.shape == (8, 1, 8, 8) and 0 <= float(samples.min()) and float(samples.max()) <= 1


def test_the_gan_refuses_bad_arguments():
    sys.path.insert(0, str(ROOT / "recipes"))
    from digits_gan import DigitsGAN

    for kwargs, name in (({"latent_dim": 0}, "latent_dim"), ({"lr": -1.0}, "lr"), ({"noise_seed": 1.5}, "noise_seed")):
        with pytest.raises(ValueError, match=name):
            DigitsGAN(**kwargs)
    with pytest.raises(ValueError, match="`n`"):
        DigitsGAN().sample(0)


def test_the_script_refuses_a_missing_checkpoint_in_one_line(tmp_path):
    run_ = run_recipe_script("gan.py", "gan_diversity.yaml", tmp_path, f"--ckpt_path={tmp_path / 'none.ckpt'}")
    assert run_.returncode == 2, run_.stderr[-3000:]
    last = run_.stderr.strip().splitlines()[-1]
    assert last.startswith("gan.py: error: `--ckpt_path`:") and "Traceback" not in run_.stderr, run_.stderr[-3000:]
    assert not list(tmp_path.glob("gan_diversity/*/checkpoints"))  # refused before any training
