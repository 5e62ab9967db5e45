"""torchmetrics-compatible metrics whose state is a fixed-size random-Fourier-feature sum.

Every metric is a [`SpectralMetric`][lightning_spectral.metrics.SpectralMetric] whose states are the sums of its
[`Accumulator`][lightning_spectral.metrics.Accumulator]s (one accumulated
stream each, under one feature map); [`FrozenFeature`][lightning_spectral.metrics.FrozenFeature] lets them take images
through a frozen extractor. [`KernelPCAOOD`][lightning_spectral.metrics.KernelPCAOOD], the kernel PCA
out-of-distribution detector, is built on the same accumulator.
"""

from lightning_spectral.metrics.accumulator import Accumulator
from lightning_spectral.metrics.base import SpectralMetric
from lightning_spectral.metrics.conditional import ConditionalVendi
from lightning_spectral.metrics.covariance import Covariance, RFFCovariance
from lightning_spectral.metrics.feature import FrozenFeature
from lightning_spectral.metrics.finc import FINCNovelty
from lightning_spectral.metrics.fkea import FKEAVendi
from lightning_spectral.metrics.kernel_pca_ood import KernelPCAOOD
from lightning_spectral.metrics.mmd import FastMMD
from lightning_spectral.metrics.reading import ModeGallery, Reading
from lightning_spectral.metrics.spec import SPECDivergence

__all__ = [
    "Accumulator",
    "ConditionalVendi",
    "Covariance",
    "FINCNovelty",
    "FKEAVendi",
    "FastMMD",
    "FrozenFeature",
    "KernelPCAOOD",
    "ModeGallery",
    "RFFCovariance",
    "Reading",
    "SPECDivergence",
    "SpectralMetric",
]
