"""Evidence for the tiny alignment recipe: SPEC-align (weight > 0) against the same recipe with weight 0.

    python benchmarks/bench_align_recipe.py                       # weights 0 and 1, seeds 0 1 2, the tiny config
    python benchmarks/bench_align_recipe.py --weights 0 0.3 1 --seeds 0 1 2 3 4 --epochs 20

Each run is ``recipes/align_clip.py`` on ``recipes/configs/tiny.yaml`` with the SPECAlign weight, the seed
(model init, data split and shuffle) and the epochs overridden; everything else is the config. Prints one row
per run and the mean per weight (the summary after training, and the drift since the start of the fit that the
config's DriftMonitor logged), and writes all summaries to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))

from align_clip import main  # noqa: E402

KEYS = ("spec_diff_to_reference", "knn_accuracy", "zero_shot_accuracy", "vendi", "ood_auroc")
#: DriftMonitor's values at the last validation epoch (the validation images, start of the fit vs now).
DRIFT = ("drift/spec/spec_diff", "drift/spec/lost_0", "drift/spec/new_0", "drift/zero_shot_acc",
         "drift/zero_shot_acc_change")


def run(config: dict, weight: float, seed: int, epochs: int, folder: Path, caption_noise=None) -> dict:
    config = json.loads(json.dumps(config))  # a deep copy
    config["seed_everything"] = seed
    if caption_noise is not None:
        config["data"]["init_args"]["caption_noise"] = caption_noise
    config["data"]["init_args"]["seed"] = seed
    config["trainer"]["max_epochs"] = epochs
    config["trainer"]["enable_progress_bar"] = False
    # no progress bar: the config's StderrProgressBar goes with it (Lightning refuses a bar callback without a bar)
    config["trainer"]["callbacks"] = [
        callback for callback in config["trainer"]["callbacks"] if not callback["class_path"].endswith("ProgressBar")
    ]
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(folder)
    for callback in config["trainer"]["callbacks"]:
        if callback["class_path"].endswith("SPECAlign"):
            callback["init_args"]["weight"] = weight
    path = folder / f"w{weight}_s{seed}.yaml"
    path.write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    result = main(["--config", str(path)])
    result["seconds"] = time.perf_counter() - start
    return result


def main_cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "recipes" / "configs" / "tiny.yaml"))
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=None, help="default: the config's max_epochs")
    parser.add_argument("--caption-noise", type=float, default=None, help="default: the config's")
    parser.add_argument("--out", default="align_recipe_evidence.json")
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    epochs = args.epochs or config["trainer"]["max_epochs"]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            for weight in args.weights:
                result = run(config, weight, seed, epochs, Path(folder), args.caption_noise)
                rows.append({"weight": weight, "seed": seed, **result})
    header = f"{'weight':>7s}{'seed':>5s}" + "".join(f"{k[:14]:>16s}" for k in KEYS) + f"{'seconds':>9s}"
    print("\nafter training\n" + header)
    for row in rows:
        values = "".join(f"{row['after'].get(k, float('nan')):16.4f}" for k in KEYS)
        print(f"{row['weight']:7.2f}{row['seed']:5d}{values}{row['seconds']:9.1f}")
    print("mean over seeds")
    for weight in args.weights:
        mine = [r["after"] for r in rows if r["weight"] == weight]
        print(f"{weight:7.2f}{'':5s}" + "".join(f"{statistics.mean(m[k] for m in mine):16.4f}" for k in KEYS))
    print("\ndrift since the start of the fit (DriftMonitor, last validation epoch)\n" + f"{'weight':>7s}{'seed':>5s}"
          + "".join(f"{k.removeprefix('drift/')[:20]:>22s}" for k in DRIFT))
    for row in rows:
        print(f"{row['weight']:7.2f}{row['seed']:5d}"
              + "".join(f"{row['logged'].get(k, float('nan')):22.4f}" for k in DRIFT))
    print("mean over seeds")
    for weight in args.weights:
        mine = [r["logged"] for r in rows if r["weight"] == weight]
        print(f"{weight:7.2f}{'':5s}"
              + "".join(f"{statistics.mean(m.get(k, float('nan')) for m in mine):22.4f}" for k in DRIFT))
    before = {r["seed"]: r["before"] for r in rows}
    print("before training, per seed:")
    for seed, values in before.items():
        print(f"{'':7s}{seed:5d}" + "".join(f"{values.get(k, float('nan')):16.4f}" for k in KEYS))
    Path(args.out).write_text(
        json.dumps({"epochs": epochs, "caption_noise": args.caption_noise, "runs": rows}, indent=2)
    )


if __name__ == "__main__":
    main_cli()
