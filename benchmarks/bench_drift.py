"""The cost of DriftMonitor at the tiny alignment config: its seconds per epoch against the epoch's.

    python benchmarks/bench_drift.py                 # the tiny config, 3 epochs
    python benchmarks/bench_drift.py --epochs 5

Runs ``recipes/align_clip.py`` on ``recipes/configs/tiny.yaml`` (no before / after evaluation) and times
DriftMonitor's hooks inside the fit: ``on_fit_start`` (the start: the probe embedded once) and
``on_validation_epoch_end`` (the probe embedded again, SPECDivergence, galleries and spectrum), split as the
callback records them (``timings``: ``embed``, ``compute``, ``pictures``). Prints the epoch's seconds without
DriftMonitor (the fit's wall time less DriftMonitor's, per epoch) and DriftMonitor's share of an epoch.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))

from align_clip import main  # noqa: E402

from lightning_spectral.callbacks import DriftMonitor  # noqa: E402

SPENT: dict[str, list[float]] = {"start": [], "epoch": [], "embed": [], "compute": [], "pictures": []}


def timed(hook_name: str) -> None:
    """Wrap a DriftMonitor hook so that each call's seconds (and its `timings` split) are recorded."""
    hook = getattr(DriftMonitor, hook_name)

    def wrapper(self: DriftMonitor, trainer, pl_module) -> None:  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        hook(self, trainer, pl_module)
        seconds = time.perf_counter() - began
        if hook_name == "on_fit_start":
            SPENT["start"].append(seconds)
        elif not trainer.sanity_checking:
            SPENT["epoch"].append(seconds)
            for key in ("embed", "compute", "pictures"):
                SPENT[key].append(self.timings.get(key, 0.0))

    setattr(DriftMonitor, hook_name, wrapper)


def main_cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "recipes" / "configs" / "tiny.yaml"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default=None, help="also write the numbers here (JSON)")
    args = parser.parse_args()
    timed("on_fit_start")
    timed("on_validation_epoch_end")
    config = yaml.safe_load(Path(args.config).read_text())
    if not any(c["class_path"].endswith("DriftMonitor") for c in config["trainer"]["callbacks"]):
        raise SystemExit(f"{args.config} has no DriftMonitor callback")
    config["trainer"]["max_epochs"] = args.epochs
    config["trainer"]["enable_progress_bar"] = False
    config["trainer"]["callbacks"] = [c for c in config["trainer"]["callbacks"] if not c["class_path"].endswith("Bar")]
    with tempfile.TemporaryDirectory() as folder:
        config["trainer"]["logger"]["init_args"]["save_dir"] = folder
        path = Path(folder) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        began = time.perf_counter()
        main(["--config", str(path), "--evaluate", "false"])
        fit = time.perf_counter() - began
    epochs = len(SPENT["epoch"])
    drift = sum(SPENT["start"]) + sum(SPENT["epoch"])
    epoch = (fit - drift) / epochs
    per_epoch = sum(SPENT["epoch"]) / epochs
    result = {
        "epochs": epochs,
        "fit_s": fit,
        "epoch_without_drift_s": epoch,
        "drift_start_s": sum(SPENT["start"]),
        "drift_per_epoch_s": per_epoch,
        **{f"drift_{key}_per_epoch_s": sum(SPENT[key]) / epochs for key in ("embed", "compute", "pictures")},
        "share_of_epoch": per_epoch / epoch,
        "share_with_start": (per_epoch + sum(SPENT["start"]) / epochs) / epoch,
    }
    print(f"\nDriftMonitor at {Path(args.config).name}, {epochs} epochs (the fit: {fit:.1f} s)")
    for key, value in result.items():
        print(f"  {key:32s}{value:10.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main_cli()
