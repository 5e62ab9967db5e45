"""One Gaussian random-feature draw over paired inputs ``[x / sigma, t / prompt_sigma]`` (the product of the two
Gaussian kernels), split into its sample and prompt blocks.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import Tensor

from lightning_spectral._checks import check_positive, check_positive_int, check_seed
from lightning_spectral.kernels.bandwidth import check_sigma
from lightning_spectral.kernels.feature_map import FeatureMap, standard_normal_draws


# ---- random features ---------------------------------------------------------------------------------------------
class JointGaussianRFF(FeatureMap):
    r"""Random Fourier features of the product kernel ``k_X(x, x') k_T(t, t')`` and of its two factors, sharing
    frequencies: rows are ``[x, t]`` (N, d_x + d_t); ``Z`` (d_x + d_t, r) standard normal from ``seed``.

    ``side="joint"``: ``[cos, sin](x Z_x / sigma_x + t Z_t / sigma_t) / sqrt(r)`` (the Gaussian kernel of
    ``[x / sigma_x, t / sigma_t]``); ``"samples"``: ``x Z_x / sigma_x`` only; ``"prompts"``: ``t Z_t / sigma_t``.
    Every row has unit norm, so each covariance has trace 1. `side` gives a map of one side for an accumulator.
    ``sigma="auto"`` leaves the samples' bandwidth to
    [`set_bandwidth`][lightning_spectral.kernels.JointGaussianRFF.set_bandwidth] (no side maps a row before it).

    Examples:
        >>> import torch
        >>> rff = JointGaussianRFF(sigma=1.0, prompt_sigma=0.5, n_frequencies=8, in_features=(3, 2))
        >>> rows = torch.randn(4, 5)
        >>> [tuple(rff.side(name)(rows).shape) for name in ("joint", "samples", "prompts")]
        [(4, 16), (4, 16), (4, 16)]
    """

    z: Tensor
    squared_norm: Optional[float] = 1.0  # unit-norm rows, on every side

    def __init__(
        self,
        sigma: Union[float, str],
        prompt_sigma: float,
        n_frequencies: int,
        seed: int = 0,
        in_features: Optional[tuple[int, int]] = None,
    ) -> None:
        super().__init__()
        self.sigma: Optional[float] = check_sigma(sigma)  # None: "auto", fixed by `set_bandwidth`
        self.prompt_sigma = check_positive(prompt_sigma, "prompt_sigma")
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.seed = check_seed(seed)
        self.in_features = None
        self.register_buffer("z", torch.zeros(0, self.n_frequencies, dtype=torch.float64), persistent=False)
        self._sides = {name: _Side(self, name) for name in ("joint", "samples", "prompts")}
        if in_features is not None:
            self.build(in_features)

    def build(self, in_features: tuple[int, int]) -> "JointGaussianRFF":  # type: ignore[override]
        """Fix the widths ``(d_x, d_t)`` (a no-op when they are these already).

        Raises:
            ValueError: not a pair of integers >= 1, or other widths than before.
        """
        if not isinstance(in_features, (tuple, list)) or len(in_features) != 2:
            raise ValueError(f"`in_features` must be a pair (d_samples, d_prompts), got {in_features!r}.")
        widths = tuple(check_positive_int(width, "in_features") for width in in_features)
        if self.in_features is not None and tuple(self.in_features) != widths:
            raise ValueError(f"JointGaussianRFF was built for widths {self.in_features}, got {widths}.")
        if self.in_features is None:
            self.in_features = widths  # type: ignore[assignment]
            self.z = self._draw().to(self.z.device)
        return self

    def _draw(self) -> Tensor:
        d_x, d_t = self.in_features  # type: ignore[misc]
        return standard_normal_draws(d_x + d_t, self.n_frequencies, self.seed)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        super()._apply(fn, recurse)  # a parent's dtype cast must not round the draw: redraw it in float64
        if self.z.dtype != torch.float64:
            self.z = (self._draw() if self.in_features is not None else self.z.double()).to(self.z.device)
        return self

    @property
    def out_features(self) -> int:
        return 2 * self.n_frequencies

    @property
    def awaits_bandwidth(self) -> bool:
        """True while the samples' ``sigma="auto"`` is not fixed."""
        return self.sigma is None

    def set_bandwidth(self, sigma: float) -> None:
        """Fix the samples' bandwidth of a map built with ``sigma="auto"``."""
        self.sigma = check_positive(sigma, "sigma")

    def frequencies(self) -> Optional[Tensor]:
        """The draw and both bandwidths (every rank must hold them identically), ``None`` before the widths (and an
        ``"auto"`` sigma) are known."""
        if self.in_features is None or self.sigma is None:
            return None
        scales = torch.tensor([self.sigma, self.prompt_sigma], dtype=torch.float64, device=self.z.device)
        return torch.cat([self.z.flatten(), scales])

    def side(self, name: str) -> "FeatureMap":
        """The map of one side (``"joint"``, ``"samples"`` or ``"prompts"``) of concatenated rows ``[x, t]``."""
        return self._sides[name]

    def phases(self, rows: Tensor, name: str) -> Tensor:
        """The phases (N, r) of one side, in the rows' compute dtype."""
        if self.in_features is None:
            raise RuntimeError("JointGaussianRFF: build it with the widths (d_samples, d_prompts) first.")
        if self.sigma is None and name != "prompts":
            raise RuntimeError(
                "JointGaussianRFF(sigma='auto') maps no sample before its bandwidth is fixed: call `set_bandwidth(sigma)` "
                "(a metric fixes it from its rows at the first read)."
            )
        d_x = self.in_features[0]
        z = self.z.to(device=rows.device, dtype=rows.dtype)
        x_part = rows[:, :d_x] @ (z[:d_x] / self.sigma) if name != "prompts" else None
        t_part = rows[:, d_x:] @ (z[d_x:] / self.prompt_sigma) if name != "samples" else None
        if x_part is None:
            return t_part  # type: ignore[return-value]
        return x_part if t_part is None else x_part + t_part

    def forward(self, rows: Tensor, name: str = "joint") -> Tensor:
        """Unit-norm features (N, 2r) of one side of the rows ``[x, t]``."""
        phases = self.phases(rows, name)
        return torch.cat([phases.cos(), phases.sin()], dim=1).mul_(1.0 / math.sqrt(self.n_frequencies))


class _Side(FeatureMap):
    """One side of a `JointGaussianRFF` as a map of its own (what an accumulator holds)."""

    squared_norm: Optional[float] = 1.0  # unit-norm rows

    def __init__(self, parent: JointGaussianRFF, name: str) -> None:
        super().__init__()
        object.__setattr__(self, "parent", parent)  # not a submodule: the parent owns the draw
        self.name, self.in_features = name, None

    @property
    def out_features(self) -> int:
        return self.parent.out_features  # type: ignore[attr-defined]

    @property
    def awaits_bandwidth(self) -> bool:
        """The parent's: rows wait while its ``sigma="auto"`` is not fixed (every side, so that all stay in step)."""
        return self.parent.awaits_bandwidth  # type: ignore[attr-defined]

    def forward(self, rows: Tensor) -> Tensor:
        return self.parent(rows, self.name)  # type: ignore[attr-defined]
