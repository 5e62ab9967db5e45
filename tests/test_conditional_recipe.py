"""The conditional recipe: both configs run whole epochs (tiny settings), and the collapse run names its prompts."""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def tiny_config(tmp_path, name):
    config = yaml.safe_load((ROOT / "recipes" / "configs" / f"conditional_{name}.yaml").read_text())
    config["trainer"]["max_epochs"] = 2
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path)
    config["trainer"]["callbacks"] = config["trainer"]["callbacks"][:1]  # no progress lines
    generated = config["trainer"]["callbacks"][0]["init_args"]
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


def run(tmp_path, name, capsys):
    sys.path.insert(0, str(ROOT / "recipes"))
    from conditional_generative import main

    result = main(["--config", str(tiny_config(tmp_path, name)), "--kid_subsets", "5", "--kid_subset_size", "50"])
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
