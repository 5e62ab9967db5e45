"""A small GAN for 8x8 grey images that drops digits: multilayer perceptrons, two optimisers, no validation step.

The generator's step adds the diversity loss when the Trainer holds a
:class:`~lightning_spectral.callbacks.DiversityRegularizer` (``recipes/configs/gan_diversity.yaml``), so one module
trains with and without it (``recipes/configs/gan.yaml``): the config turns it on.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning as L
import torch
import torch.nn.functional as F
from digits_vae import gaussian_noise, step_noise
from torch import Tensor, nn

from lightning_spectral._checks import check_positive, check_positive_int, check_seed
from lightning_spectral.callbacks import DiversityRegularizer

__all__ = ["DigitsGAN"]


def _mlp(sizes: list[int], last: nn.Module) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width_in, width_out in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(width_in, width_out), nn.LeakyReLU(0.2)]
    return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1]), last)


class DigitsGAN(L.LightningModule):
    """A GAN of (1, H, W) images in [0, 1]: generator ``latent -> hidden -> hidden -> H W`` (sigmoid),
    discriminator ``H W -> hidden -> hidden -> 1`` (LeakyReLU 0.2), the non-saturating loss (Goodfellow et al.
    2014, section 3), Adam with betas (0.5, 0.999), manual optimisation: one discriminator step, then one generator
    step, per batch.

    Without a regulariser it keeps some digits and drops others, and which ones changes with the seed
    (``benchmarks/bench_diversity_recipe.py``).

    Args:
        image_size: H = W of the images.
        latent_dim: the generator's input noise.
        hidden: the width of both networks' hidden layers.
        lr: both optimisers' learning rate.
        noise_seed: seeds each step's latent draws from (seed, step, rank), so that a run resumed from a checkpoint
            draws the latents of the uninterrupted run; ``None``: the global RNG.
    """

    def __init__(self, image_size: int = 8, latent_dim: int = 32, hidden: int = 256, lr: float = 2e-4,
                 noise_seed: Optional[int] = 0) -> None:
        super().__init__()
        check_positive_int(image_size, "image_size")
        check_positive_int(latent_dim, "latent_dim")
        check_positive_int(hidden, "hidden")
        check_positive(lr, "lr")
        if noise_seed is not None:
            check_seed(noise_seed, "noise_seed")
        self.save_hyperparameters()
        self.automatic_optimization = False  # two optimisers, stepped in turn
        self._regularizer: Optional[DiversityRegularizer] = None  # on_fit_start finds it
        pixels = image_size * image_size
        self.generator = _mlp([latent_dim, hidden, hidden, pixels], nn.Sigmoid())
        self.discriminator = _mlp([pixels, hidden, hidden, 1], nn.Identity())

    def generate(self, z: Tensor) -> Tensor:
        """Images (N, 1, H, W) in [0, 1] of latents ``z`` (N, latent_dim), with their graph."""
        size = self.hparams.image_size
        return self.generator(z).view(-1, 1, size, size)

    def on_fit_start(self) -> None:
        """The Trainer's `DiversityRegularizer`, or ``None`` (the config's callback turns the loss on), looked up once a
        fit."""
        found = [callback for callback in self.trainer.callbacks if isinstance(callback, DiversityRegularizer)]
        self._regularizer = found[0] if found else None

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        real = batch["image"]
        g_opt, d_opt = self.optimizers()
        z = torch.randn(len(real), self.hparams.latent_dim, generator=step_noise(self, self.hparams.noise_seed,
                                                                                   self.global_step, 0))
        fake = self.generate(z.to(self.device))
        ones, zeros = real.new_ones(len(real), 1), real.new_zeros(len(real), 1)

        d_loss = (F.binary_cross_entropy_with_logits(self.discriminator(real.flatten(1)), ones)
                  + F.binary_cross_entropy_with_logits(self.discriminator(fake.detach().flatten(1)), zeros))
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()

        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake.flatten(1)), ones)
        self.log_dict({"train/d_loss": d_loss.detach(), "train/g_loss": g_loss.detach()}, prog_bar=True,
                      batch_size=len(real))
        if self._regularizer is not None:  # a module trained with it always writes `diversity_term(self, fake)`
            g_loss = g_loss + self._regularizer(fake)
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        betas = (0.5, 0.999)
        return [torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr, betas=betas),
                torch.optim.Adam(self.discriminator.parameters(), lr=self.hparams.lr, betas=betas)]

    @torch.no_grad()
    def sample(self, n: int, generator: Optional[torch.Generator] = None) -> Tensor:
        """``n`` images (n, 1, H, W) in [0, 1]; the latents come from ``generator`` (a CPU ``torch.Generator``; the
        global RNG when ``None``), so one seed gives the same draws on any device."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"DigitsGAN.sample: `n` must be an integer >= 1, got {n!r}.")
        noise = gaussian_noise(torch.empty(n, self.hparams.latent_dim), generator)
        return self.generate(noise.to(self.device))
