"""torchmetrics-compatible metrics whose state is a fixed-size random-Fourier-feature sum.

Every metric is a :class:`SpectralMetric` built from :class:`CovarianceSide` s (one accumulated stream each);
:class:`FrozenFeature` lets them take images through a frozen extractor.
"""

from lightning_spectral.metrics.base import ModeGallery, RFFMetric, SpectralMetric
from lightning_spectral.metrics.covariance import RFFCovariance
from lightning_spectral.metrics.feature import FrozenFeature
from lightning_spectral.metrics.finc import FINCNovelty
from lightning_spectral.metrics.fkea import FKEAVendi
from lightning_spectral.metrics.mmd import FastMMD
from lightning_spectral.metrics.side import CovarianceSide
from lightning_spectral.metrics.spec import SPECDivergence

__all__ = [
    "CovarianceSide",
    "FINCNovelty",
    "FKEAVendi",
    "FastMMD",
    "FrozenFeature",
    "ModeGallery",
    "RFFCovariance",
    "RFFMetric",
    "SPECDivergence",
    "SpectralMetric",
]
