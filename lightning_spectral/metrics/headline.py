"""What a callback logs of a metric by default: a few scalars per metric, named ``{quantity}`` and ``{quantity}_se``.

Each metric's [`headline`][lightning_spectral.metrics.Reading.headline] picks them from its ``summary()``:
its scores with their standard errors, counts, and p-values as ``-log10 p``; never a setting (sigma, 2r) or a sample
size, which do not change between epochs. A callback logs them as ``{prefix}{metric name}/{quantity}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor


def headline_values(quantity: str, value: Any, se: Any = None) -> dict[str, Tensor]:
    """``{quantity: value, quantity_se: se}`` for a scalar; for a dict of values (Vendi orders, say) or a vector
    (one value per bandwidth), one ``{quantity}_{key}`` (``_{i}``) each, with its ``..._se``.

    Examples:
        >>> import torch
        >>> sorted(headline_values("vendi", {1.0: torch.tensor(3.0), 2.0: torch.tensor(2.0)}))
        ['vendi_1', 'vendi_2']
        >>> headline_values("mmd2", torch.tensor(0.5), torch.tensor(0.1))
        {'mmd2': tensor(0.5000), 'mmd2_se': tensor(0.1000)}
        >>> sorted(headline_values("new", torch.tensor([0.3]), torch.tensor([0.01])))  # one cluster left: still new_0
        ['new_0', 'new_0_se']
    """
    if isinstance(value, Mapping):
        out: dict[str, Tensor] = {}
        for key, item in value.items():
            out.update(headline_values(f"{quantity}_{order_name(key)}", item, None if se is None else se[key]))
        return out
    value = torch.as_tensor(value)
    if value.ndim > 0:  # a vector, even of one value, keeps its index: the logged names hold still across epochs
        out = {}
        for index, item in enumerate(value.flatten()):
            out.update(headline_values(f"{quantity}_{index}", item, None if se is None else se.flatten()[index]))
        return out
    out = {quantity: value.reshape(())}
    if se is not None:
        out[f"{quantity}_se"] = torch.as_tensor(se).reshape(())
    return out


def order_name(key: Any) -> str:
    """A key as a logged name: Vendi orders given as whole floats read as integers (``2.0`` -> ``"2"``)."""
    if isinstance(key, float) and key.is_integer():
        return str(int(key))
    return str(key)


def minus_log10(p_value: Tensor) -> Tensor:
    """``-log10 p`` (float64), the form in which a p-value survives a float32 logger: 1e-50 logs as 50, not 0.
    A p-value of 0 (an underflow in float64) gives 308, the smallest positive float64's."""
    p_value = torch.as_tensor(p_value, dtype=torch.float64)
    return -torch.log10(p_value.clamp_min(torch.finfo(torch.float64).tiny))
