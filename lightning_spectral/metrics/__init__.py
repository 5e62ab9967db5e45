"""torchmetrics-compatible metrics whose state is a fixed-size random-Fourier-feature sum."""

from lightning_spectral.metrics._base import RFFMetric
from lightning_spectral.metrics.covariance import RFFCovariance

__all__ = ["RFFCovariance", "RFFMetric"]
