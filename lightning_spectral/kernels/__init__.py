"""Kernels: feature maps (Gaussian random Fourier features, cosine, linear, joint and multi-bandwidth maps),
exact kernel matrices and the bandwidth rule. Every map gives rows of norm 1 (Gaussian, cosine), so covariance
traces are exactly 1.
"""

from lightning_spectral._checks import check_batch_memory
from lightning_spectral.kernels.bandwidth import (
    AUTO_FACTOR,
    AUTO_SAMPLES,
    auto_bandwidth,
    check_sigma,
    median_bandwidth,
)
from lightning_spectral.kernels.by_name import KERNELS, kernel_feature_map
from lightning_spectral.kernels.cosine_map import CosineMap, unit_rows
from lightning_spectral.kernels.exact import gaussian_kernel, scaled_distances
from lightning_spectral.kernels.feature_map import FeatureMap, standard_normal_draws
from lightning_spectral.kernels.gaussian_rff import GaussianRFF, check_phases
from lightning_spectral.kernels.joint_gaussian_rff import JointGaussianRFF
from lightning_spectral.kernels.linear_map import LinearMap
from lightning_spectral.kernels.multi_bandwidth_rff import MultiBandwidthRFF
from lightning_spectral.kernels.paired_feature_map import PairedFeatureMap
from lightning_spectral.kernels.width import frequencies_for

__all__ = [
    "AUTO_FACTOR",
    "AUTO_SAMPLES",
    "auto_bandwidth",
    "check_sigma",
    "check_batch_memory",
    "check_phases",
    "CosineMap",
    "FeatureMap",
    "frequencies_for",
    "gaussian_kernel",
    "GaussianRFF",
    "JointGaussianRFF",
    "kernel_feature_map",
    "KERNELS",
    "LinearMap",
    "median_bandwidth",
    "MultiBandwidthRFF",
    "PairedFeatureMap",
    "scaled_distances",
    "standard_normal_draws",
    "unit_rows",
]
