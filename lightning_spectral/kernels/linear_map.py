"""The identity feature map (linear kernel), an accumulator's map when features are used as they are.
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from lightning_spectral._checks import (
    check_features,
)
from lightning_spectral.kernels.feature_map import FeatureMap


class LinearMap(FeatureMap):
    """The identity, the feature map of the linear kernel ``k(x, y) = x . y``: ``phi(x) = x``, ``D = d``.

    Examples:
        >>> import torch
        >>> LinearMap()(torch.tensor([[3.0, 4.0]]))
        tensor([[3., 4.]])
    """

    def __init__(self, in_features: Optional[int] = None) -> None:
        super().__init__()
        self.in_features = None
        if in_features is not None:
            self.build(in_features)

    @property
    def out_features(self) -> Optional[int]:
        """``d``, the input width (``None`` until it is known)."""
        return self.in_features

    def forward(self, x: Tensor) -> Tensor:
        """Validated inputs (N, d), in their compute dtype."""
        x = check_features(x, "x", width=self.in_features, owner=type(self).__name__)
        self.build(x.shape[1])
        return x
