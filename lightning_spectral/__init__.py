"""lightning-spectral: kernel spectral methods (FKEA, FINC, FastMMD, SPEC, kernel PCA) for Lightning.

Layers: [`features`][lightning_spectral.features] (random Fourier features), [`linalg`][lightning_spectral.linalg]
(covariance accumulation, spectra), [`distributed`][lightning_spectral.distributed] (all-reduce sync) and
[`metrics`][lightning_spectral.metrics] (torchmetrics metrics).
"""

from lightning_spectral.features import CosineMap, GaussianRFF, gaussian_kernel, median_bandwidth

__version__ = "0.1.0"
__all__ = ["CosineMap", "GaussianRFF", "__version__", "gaussian_kernel", "median_bandwidth"]
