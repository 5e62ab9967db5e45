"""The GAN recipe as a user runs it: ``recipes/gan.py`` with ``recipes/configs/gan.yaml`` (the GAN alone) and
``recipes/configs/gan_diversity.yaml`` (the same GAN with `DiversityRegularizer`), over seeds, at the configs'
settings (130 epochs, about 3,000 steps).

    python benchmarks/bench_diversity_recipe.py [--seeds 0 1 2] [--epochs 130]

Each run sets ``--seed_everything`` and ``--model.noise_seed`` to the seed, and writes its logs under a temporary
folder. Read per run: the classes an oracle classifier (an MLP of the digits' pixels, ``bench_diversity_gan.oracle``,
its held-out accuracy printed) finds in >= 2 % of 2,000 samples of the last checkpoint; the classes of the missing
regions FINC names at the last measured epoch (the recipe's summary: each region's majority class among its top real
images); Vendi-1 and KID as the recipe logs them; the regulariser's last ``diversity/rke``; the run's wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "recipes"))
from bench_diversity_gan import oracle  # noqa: E402
from bench_dropped_modes import digits  # noqa: E402
from digits_gan import DigitsGAN  # noqa: E402
from gan import main as gan_main  # noqa: E402


def config(name: str, folder: Path, epochs: int) -> Path:
    """The recipe's config with its logs in ``folder`` and, when ``epochs`` differs, measured at the last epoch."""
    data = yaml.safe_load((HERE.parent / "recipes" / "configs" / f"{name}.yaml").read_text())
    data["trainer"]["logger"]["init_args"]["save_dir"] = str(folder)
    data["trainer"]["max_epochs"] = epochs
    for callback in data["trainer"]["callbacks"]:
        if callback["class_path"].endswith("GeneratedSamples") and epochs % callback["init_args"]["every_n_epochs"]:
            callback["init_args"]["every_n_epochs"] = epochs
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=130)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # Lightning's and the metrics' notices: the table is the output
    x, y = digits()
    classifier, accuracy = oracle(x.flatten(1), y)
    print(f"oracle classifier's held-out accuracy {accuracy:.1%}; {args.epochs} epochs")
    print("| config | seed | classes >= 2 % | FINC names missing | Vendi-1 | KID | diversity/rke | wall time |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in ("gan", "gan_diversity"):
            path = config(name, Path(folder), args.epochs)
            for seed in args.seeds:
                began = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):  # the recipe's own summary: the table is the output
                    result = gan_main(["--config", str(path), f"--seed_everything={seed}", f"--model.noise_seed={seed}",
                                       f"--trainer.logger.init_args.version={name}_{seed}"])
                wall = time.perf_counter() - began
                model = DigitsGAN.load_from_checkpoint(Path(result["log_dir"]) / "checkpoints" / "last.ckpt")
                samples = model.sample(2000, torch.Generator().manual_seed(seed)).flatten(1)
                with torch.no_grad():
                    found = torch.bincount(classifier(samples).argmax(1), minlength=10).double() / len(samples)
                named = sorted({int(mode["shows"].split()[0]) for mode in result["modes"]["missing"]
                                if mode["classes"] is not None})
                last = result["epochs"][-1]
                rke = result.get("diversity", {}).get("rke")
                print(f"| {name} | {seed} | {int((found >= 0.02).sum())} | {named or '-'} | {last['vendi']:.2f} | "
                      f"{last['kid']:.4f} | {'-' if rke is None else f'{rke:.1f}'} | {wall:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
