"""Generative models measured during training: offline digits with dropped classes, and a small VAE."""

from lightning_spectral.generative.data import DigitsImages, DropClassesSampler, ImageDataset, load_digit_images
from lightning_spectral.generative.models import ConditionalDigitsVAE, DigitsVAE

__all__ = [
    "ConditionalDigitsVAE", "DigitsImages", "DigitsVAE", "DropClassesSampler", "ImageDataset", "load_digit_images",
]
