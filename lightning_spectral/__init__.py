"""lightning-spectral: kernel spectral methods (FKEA, FINC, FastMMD, SPEC, kernel PCA) for Lightning.

Layers, each a folder (docs/architecture.md): [`kernels`][lightning_spectral.kernels] (feature maps, the bandwidth
rule), [`algebra`][lightning_spectral.algebra] (covariance accumulation, spectra), [`sync`][lightning_spectral.sync]
(the all-reduce and the gather), [`functional`][lightning_spectral.functional] (one file per method),
[`metrics`][lightning_spectral.metrics] (torchmetrics metrics and the kernel PCA detector),
[`callbacks`][lightning_spectral.callbacks], [`pictures`][lightning_spectral.pictures] (galleries, plots, loggers),
[`io`][lightning_spectral.io], [`encoders`][lightning_spectral.encoders], [`data`][lightning_spectral.data] and
the command line.
"""

from lightning_spectral.kernels.bandwidth import median_bandwidth
from lightning_spectral.kernels.cosine_map import CosineMap
from lightning_spectral.kernels.exact import gaussian_kernel
from lightning_spectral.kernels.gaussian_rff import GaussianRFF


__version__ = "0.1.0"
__all__ = ["CosineMap", "GaussianRFF", "__version__", "gaussian_kernel", "median_bandwidth"]
