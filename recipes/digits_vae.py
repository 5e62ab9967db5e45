"""A small generative model for 8x8 grey images: a multilayer-perceptron VAE that trains in seconds on a CPU."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_spectral._checks import check_positive, check_seed

__all__ = ["DigitsVAE"]


def step_noise(module: L.LightningModule, seed: Optional[int], step: int, stream: int) -> Optional[torch.Generator]:
    """The CPU generator of one step's reparameterisation noise (``None`` when ``seed`` is ``None``: the global
    RNG), seeded from (seed, stream, step, rank): a run resumed from a checkpoint draws the noise of the
    uninterrupted run, whatever the RNG state it restarts with."""
    if seed is None:
        return None
    try:
        trainer = module.trainer
    except RuntimeError:  # not attached to a Trainer (a direct call)
        trainer = None
    world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
    return torch.Generator().manual_seed((((seed * 2 + stream) * 1_000_003 + step) * world + rank) % 2**63)


def gaussian_noise(like: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    """Standard normal noise shaped as ``like``, from ``generator`` (CPU) or the global RNG when ``None``."""
    if generator is None:
        return torch.randn_like(like)
    return torch.randn(like.shape, generator=generator, dtype=like.dtype).to(like.device)


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width_in, width_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(width_in, width_out), nn.SiLU()]
    return nn.Sequential(*layers[:-1])  # no activation after the last layer


class DigitsVAE(L.LightningModule):
    r"""A variational auto-encoder of (1, H, W) images in [0, 1]: MLP encoder and decoder, mixture-of-Gaussians prior.

    Loss per image (the negative ELBO with a Bernoulli likelihood on pixel intensities, KL weighted by beta):
    ``BCE(decoder(z), x)`` summed over pixels ``+ beta * (log q(z|x) - log p(z))``, with one ``z`` drawn from
    ``q(z|x)`` by the reparameterisation trick (a one-sample estimate of the KL). The prior ``p(z)`` is a
    learned mixture of ``n_components`` diagonal Gaussians: with a small ``beta`` the codes of different digits
    sit apart, and a single ``N(0, I)`` prior would put much of its mass between them, where the decoder
    draws blurred, ambiguous digits (a mode the data lacks). Samples
    (`sample`) decode ``z ~ p(z)`` and
    return the Bernoulli means (grey levels), not binary draws.

    Args:
        image_size: side H = W of the images.
        latent_dim: size of ``z``.
        hidden: width of the hidden layers (two in the encoder, two in the decoder).
        n_components: Gaussians in the prior.
        beta: weight of the KL term (1 is the ELBO).
        lr: Adam learning rate.
        noise_seed: if given, the reparameterisation noise of training step ``s`` on rank ``k`` comes from its own
            generator, seeded from ``(noise_seed, s, k)`` (validation batches from the batch index), instead of the
            global RNG: a run resumed from a checkpoint then trains exactly as an uninterrupted one.

    Examples:
        >>> import torch
        >>> model = DigitsVAE(hidden=32)
        >>> loss = model.loss(torch.rand(4, 1, 8, 8))["loss"]
        >>> x = model.sample(3, generator=torch.Generator().manual_seed(0))
        >>> x.shape, bool(((x >= 0) & (x <= 1)).all()), loss.ndim
        (torch.Size([3, 1, 8, 8]), True, 0)
    """

    display_name = "the VAE"  # how the run's summary (generative.summary_text) names the model

    def __init__(
        self,
        image_size: int = 8,
        latent_dim: int = 8,
        hidden: int = 512,
        n_components: int = 50,
        beta: float = 0.05,
        lr: float = 2e-3,
        noise_seed: Optional[int] = None,
    ) -> None:
        super().__init__()
        sizes = (("image_size", image_size), ("latent_dim", latent_dim), ("hidden", hidden))
        for name, value in sizes + (("n_components", n_components),):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DigitsVAE: `{name}` must be an integer >= 1, got {value!r}.")
        check_positive(beta, "beta")
        check_positive(lr, "lr")
        if noise_seed is not None:
            check_seed(noise_seed, "noise_seed")
        self.save_hyperparameters()
        pixels = image_size * image_size
        self.encoder = _mlp([pixels, hidden, hidden, 2 * latent_dim])
        self.decoder = _mlp([latent_dim, hidden, hidden, pixels])
        self.prior_means = nn.Parameter(torch.randn(n_components, latent_dim))
        self.prior_log_scales = nn.Parameter(torch.zeros(n_components, latent_dim))
        self.prior_logits = nn.Parameter(torch.zeros(n_components))

    def encode(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and log-variance of ``q(z|x)``, each (N, latent_dim)."""
        mean, log_var = self.encoder(images.flatten(1)).chunk(2, dim=1)
        return mean, log_var

    def decode(self, z: Tensor) -> Tensor:
        """Pixel logits (N, 1, H, W) of latent codes ``z`` (N, latent_dim)."""
        size = self.hparams.image_size
        return self.decoder(z).view(-1, 1, size, size)

    def log_prior(self, z: Tensor) -> Tensor:
        """``log p(z)`` (N,) under the mixture prior."""
        scales = self.prior_log_scales.exp()
        per_dim = -0.5 * ((z[:, None] - self.prior_means) / scales) ** 2 - self.prior_log_scales
        per_component = per_dim.sum(-1) - 0.5 * z.shape[1] * math.log(2 * math.pi)
        return torch.logsumexp(per_component + F.log_softmax(self.prior_logits, 0), dim=1)

    def loss(self, images: Tensor, generator: Optional[torch.Generator] = None) -> dict[str, Tensor]:
        """Batch means of the negative ELBO (``"loss"``) and its two terms (``"reconstruction"``, ``"kl"``); the
        reparameterisation noise comes from ``generator`` (a CPU generator; the global RNG when ``None``)."""
        if images.ndim != 4 or images.shape[1:] != (1, self.hparams.image_size, self.hparams.image_size):
            size = self.hparams.image_size
            raise ValueError(f"DigitsVAE: expects images (N, 1, {size}, {size}), got {tuple(images.shape)}.")
        mean, log_var = self.encode(images)
        noise = gaussian_noise(mean, generator)
        z = mean + noise * (0.5 * log_var).exp()
        reconstruction = F.binary_cross_entropy_with_logits(self.decode(z), images, reduction="none")
        reconstruction = reconstruction.flatten(1).sum(1).mean()
        log_posterior = (-0.5 * noise**2 - 0.5 * log_var).sum(1) - 0.5 * z.shape[1] * math.log(2 * math.pi)
        kl = (log_posterior - self.log_prior(z)).mean()
        return {"loss": reconstruction + self.hparams.beta * kl, "reconstruction": reconstruction, "kl": kl}

    def _noise(self, step: int, stream: int) -> Optional[torch.Generator]:
        """The generator of one step's noise (``None`` without ``noise_seed``), seeded from (seed, stream, step,
        rank)."""
        return step_noise(self, self.hparams.get("noise_seed"), step, stream)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        terms = self.loss(batch["image"], self._noise(self.global_step, 0))
        self.log("train/loss", terms["loss"], prog_bar=True, batch_size=batch["image"].shape[0])
        return terms["loss"]

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        terms = self.loss(batch["image"], self._noise(batch_idx, 1))
        self.log_dict(  # averaged over ranks under DDP, as clip_finetune.py does
            {f"val/{key}": value for key, value in terms.items()}, batch_size=batch["image"].shape[0], sync_dist=True
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    @torch.no_grad()
    def sample(self, n: int, generator: Optional[torch.Generator] = None) -> Tensor:
        """``n`` images (n, 1, H, W) in [0, 1]: decoded draws of ``z`` from the mixture prior.

        The latent draws come from ``generator`` (a CPU ``torch.Generator``; the global RNG when ``None``), so
        one seed gives the same draws on any device.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"DigitsVAE.sample: `n` must be an integer >= 1, got {n!r}.")
        weights = F.softmax(self.prior_logits.detach().cpu(), 0)
        component = torch.multinomial(weights, n, replacement=True, generator=generator).to(self.device)
        noise = torch.randn(n, self.hparams.latent_dim, generator=generator).to(self.device)
        z = self.prior_means[component] + noise * self.prior_log_scales[component].exp()
        return torch.sigmoid(self.decode(z))


class ConditionalDigitsVAE(L.LightningModule):
    r"""A class-conditional VAE of (1, H, W) digits: ``q(z | x, y)`` and ``p(x | z, y)`` are MLPs of the image (or
    code) beside the one-hot label, the prior ``p(z) = N(0, I)``;
    `sample` draws images for given labels.

    Loss per image: ``BCE(decoder(z, y), x)`` summed over pixels ``+ beta * KL(q(z|x,y) || N(0, I))`` (closed form).

    The collapse switch (a controlled failure for the conditional recipe): from epoch ``collapse_after_epoch`` on,
    `sample` draws ``z = 0`` for the labels in
    ``collapse_prompts``: the model keeps drawing a plausible image
    of those digits, but always the same one (no variation within those prompts); the other prompts are untouched.

    Args:
        image_size: side H = W of the images.
        num_classes: labels (prompts).
        latent_dim: size of ``z``.
        hidden: width of the hidden layers.
        beta: weight of the KL term.
        lr: Adam learning rate.
        collapse_prompts: labels whose samples stop varying from ``collapse_after_epoch`` on.
        collapse_after_epoch: the first epoch (counted from 0) of the collapse; ``None``: never.
        noise_seed: if given, each step's reparameterisation noise comes from its own generator (as
            `DigitsVAE`'s): a resumed run trains as an uninterrupted one.

    Examples:
        >>> import torch
        >>> model = ConditionalDigitsVAE(hidden=32, collapse_prompts=[2], collapse_after_epoch=0)
        >>> x = model.sample(torch.tensor([2, 2, 5]), generator=torch.Generator().manual_seed(0))
        >>> loss = model.loss(torch.rand(4, 1, 8, 8), torch.arange(4))["loss"]
        >>> x.shape, bool(torch.equal(x[0], x[1])), float(loss) > 0
        (torch.Size([3, 1, 8, 8]), True, True)
    """

    def __init__(
        self,
        image_size: int = 8,
        num_classes: int = 10,
        latent_dim: int = 8,
        hidden: int = 256,
        beta: float = 1.0,
        lr: float = 2e-3,
        collapse_prompts: Sequence[int] = (),
        collapse_after_epoch: Optional[int] = None,
        noise_seed: Optional[int] = None,
    ) -> None:
        super().__init__()
        for name, value in (("image_size", image_size), ("num_classes", num_classes), ("latent_dim", latent_dim),
                            ("hidden", hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ConditionalDigitsVAE: `{name}` must be an integer >= 1, got {value!r}.")
        check_positive(beta, "beta")
        check_positive(lr, "lr")
        prompts = list(collapse_prompts)
        if any(isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < num_classes for p in prompts):
            raise ValueError(
                f"ConditionalDigitsVAE: `collapse_prompts` must be labels in [0, {num_classes}), got {prompts!r}."
            )
        if collapse_after_epoch is not None and (
            isinstance(collapse_after_epoch, bool)
            or not isinstance(collapse_after_epoch, int)
            or collapse_after_epoch < 0
        ):
            raise ValueError(
                "ConditionalDigitsVAE: `collapse_after_epoch` must be an epoch >= 0 or None, got "
                f"{collapse_after_epoch!r}."
            )
        if noise_seed is not None:
            check_seed(noise_seed, "noise_seed")
        self.save_hyperparameters()
        pixels = image_size * image_size
        self.encoder = _mlp([pixels + num_classes, hidden, hidden, 2 * latent_dim])
        self.decoder = _mlp([latent_dim + num_classes, hidden, hidden, pixels])

    def _one_hot(self, labels: Tensor) -> Tensor:
        return F.one_hot(labels.long().to(self.device), self.hparams.num_classes).float()

    def decode(self, z: Tensor, labels: Tensor) -> Tensor:
        """Pixel logits (N, 1, H, W) of codes ``z`` (N, latent_dim) for ``labels`` (N,)."""
        size = self.hparams.image_size
        return self.decoder(torch.cat([z, self._one_hot(labels)], 1)).view(-1, 1, size, size)

    def loss(self, images: Tensor, labels: Tensor, generator: Optional[torch.Generator] = None) -> dict[str, Tensor]:
        """Batch means of the negative ELBO (``"loss"``) and its terms (``"reconstruction"``, ``"kl"``); the
        reparameterisation noise comes from ``generator`` (a CPU generator; the global RNG when ``None``)."""
        mean, log_var = self.encoder(torch.cat([images.flatten(1), self._one_hot(labels)], 1)).chunk(2, dim=1)
        z = mean + gaussian_noise(mean, generator) * (0.5 * log_var).exp()
        reconstruction = F.binary_cross_entropy_with_logits(self.decode(z, labels), images, reduction="none")
        reconstruction = reconstruction.flatten(1).sum(1).mean()
        kl = 0.5 * (mean.square() + log_var.exp() - 1 - log_var).sum(1).mean()
        return {"loss": reconstruction + self.hparams.beta * kl, "reconstruction": reconstruction, "kl": kl}

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        noise = step_noise(self, self.hparams.noise_seed, self.global_step, 0)
        terms = self.loss(batch["image"], batch["label"], noise)
        self.log("train/loss", terms["loss"], prog_bar=True, batch_size=batch["image"].shape[0])
        return terms["loss"]

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        terms = self.loss(batch["image"], batch["label"], step_noise(self, self.hparams.noise_seed, batch_idx, 1))
        self.log_dict(  # averaged over ranks under DDP, as clip_finetune.py does
            {f"val/{key}": value for key, value in terms.items()}, batch_size=batch["image"].shape[0], sync_dist=True
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def collapsed(self) -> tuple[int, ...]:
        """The labels whose samples do not vary now (the collapse switch at the current epoch)."""
        start = self.hparams.collapse_after_epoch
        epoch = self.current_epoch  # 0 outside a Trainer (Lightning's property)
        return tuple(self.hparams.collapse_prompts) if start is not None and epoch >= start else ()

    @torch.no_grad()
    def sample(self, prompts: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """One image (1, H, W) in [0, 1] per label of ``prompts`` (N,): ``z ~ N(0, I)`` from ``generator`` (a CPU
        generator), ``z = 0`` for the collapsed labels."""
        prompts = torch.as_tensor(prompts)
        if prompts.ndim != 1 or prompts.is_floating_point() or prompts.numel() == 0:
            raise ValueError(
                f"ConditionalDigitsVAE.sample: `prompts` must be a non-empty (N,) tensor of integer labels, got "
                f"dtype {prompts.dtype} and shape {tuple(prompts.shape)}."
            )
        noise = torch.randn(len(prompts), self.hparams.latent_dim, generator=generator)
        collapsed = self.collapsed()
        if collapsed:
            noise[torch.isin(prompts.cpu(), torch.tensor(collapsed))] = 0.0
        return torch.sigmoid(self.decode(noise.to(self.device), prompts))
