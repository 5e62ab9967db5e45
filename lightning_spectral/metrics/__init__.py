"""torchmetrics-compatible metrics whose state is a fixed-size random-Fourier-feature sum."""

from lightning_spectral.metrics._base import RFFMetric, SumStateMetric
from lightning_spectral.metrics.covariance import RFFCovariance
from lightning_spectral.metrics.finc import FINCNovelty
from lightning_spectral.metrics.fkea import FKEAVendi
from lightning_spectral.metrics.mmd import FastMMD
from lightning_spectral.metrics.spec import SPECDivergence

__all__ = ["FINCNovelty", "FKEAVendi", "FastMMD", "RFFCovariance", "RFFMetric", "SPECDivergence", "SumStateMetric"]
