# ruff: noqa: E402 - os.environ is set before the imports that load torch
"""Train a small GAN on 8x8 digits, with or without the diversity loss, and watch which digits it drops.

    python recipes/gan.py --config recipes/configs/gan.yaml              # the GAN alone: it drops digits
    python recipes/gan.py --config recipes/configs/gan_diversity.yaml    # the same GAN with DiversityRegularizer
    python recipes/gan.py --config recipes/configs/gan_diversity.yaml --seed_everything 1 --model.noise_seed 1

The generative recipe (``generative.py`` beside this script: its LightningCLI, summary, KID alongside and
``--summary_json``) over ``DigitsGAN`` (``digits_gan.py``): MLPs, two optimisers, no validation step, so
``GeneratedSamples`` measures at the end of the training epochs it is due. ``gan_diversity.yaml`` adds
:class:`~lightning_spectral.callbacks.DiversityRegularizer` to the callbacks; the generator's step adds its term
when the Trainer holds one. The summary ends with the regulariser's last ``diversity/rke``.
"""

from __future__ import annotations

import os

# OpenMP threads that wait passively (see generative.py). Set before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from typing import Any, Optional

from digits_gan import DigitsGAN
from generative import main as generative_main

from lightning_spectral.io import run_script


def main(args: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the recipe with `DigitsGAN`; returns the generative recipe's result (``generative.summarise``)."""
    return generative_main(args, model_class=DigitsGAN)


if __name__ == "__main__":
    run_script(main, __file__)
