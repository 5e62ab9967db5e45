"""A metric's pictures: its value (torchmetrics' ``plot``) and the spectrum or values behind it.

matplotlib is imported inside, when a plot is made (``import lightning_spectral.metrics`` stays light).
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_spectral._checks import check_positive_int


def _value(value: Any, owner: str) -> Any:
    """One value ``plot`` takes: a tensor, a dict of them (Vendi of several orders), a Python / NumPy number (as a
    tensor).

    Raises:
        TypeError: anything else (a string, ``None`` inside a list), naming ``val`` and what to pass.
    """
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (Real, np.number)) and not isinstance(value, (bool, np.bool_)):
        return torch.tensor(float(value))
    if isinstance(value, dict) and value:
        return {key: _value(item, owner) for key, item in value.items()}
    shown = f"the string {value!r}" if isinstance(value, str) else repr(value)[:80]
    raise TypeError(
        f"{owner}.plot: `val` must be the metric's value (a tensor, a number or a dict of them, as `compute()` "
        f"returns it), a list of such values (one per step) or None (the current value), got {shown}."
    )


def check_plot_value(metric: Any, value: Any) -> Any:
    """``value`` as ``plot`` draws it: a value (`_value`) or a non-empty list / tuple of them, numbers made tensors.

    Raises:
        TypeError: naming ``val`` (module doc of `_value`).
    """
    owner = type(metric).__name__
    if isinstance(value, (list, tuple)):
        if not value:
            raise TypeError(f"{owner}.plot: `val` is an empty {type(value).__name__}; pass values to draw, or None.")
        return [_value(item, owner) for item in value]
    return _value(value, owner)


def plot_value(metric: Any, value: Any, ax: Any = None) -> tuple[Any, Any]:
    """torchmetrics' ``plot`` of a metric: one value or a list of values over steps (one line per value).

    One value (a scalar, a per-bandwidth vector, a dict of orders) is drawn as labelled bars, its number written on
    each (`plot_labelled_value`); a list of values over steps goes through torchmetrics'
    ``plot_single_or_multi_val``, laid out so the y label stays inside the figure. A value that is a matrix
    (``RFFCovariance``) is drawn as its eigen-spectrum (a list of matrices: one spectrum per step).

    Returns:
        ``(figure, axis)``.

    Raises:
        TypeError: ``value`` that is not a value of the metric (a string, an empty list), naming ``val``.

    Examples:
        >>> import torch
        >>> from lightning_spectral.metrics import FKEAVendi
        >>> metric = FKEAVendi(sigma=1.0, n_frequencies=64)
        >>> values = []
        >>> for step in range(3):
        ...     metric.update(torch.randn(50, 2, generator=torch.Generator().manual_seed(step)) * (step + 1))
        ...     values.append(metric.compute())
        >>> figure, axis = metric.plot(values)        # Vendi over three steps
        >>> len(axis.lines[0].get_xdata())
        3
    """
    value = check_plot_value(metric, value)
    steps = list(value) if isinstance(value, (list, tuple)) else [value]
    if steps and all(isinstance(v, Tensor) and v.ndim == 2 and v.shape[0] == v.shape[1] for v in steps):
        from lightning_spectral.algebra.eigen import psd_eigenvalues
        from lightning_spectral.pictures.plots import plot_spectra, plot_spectrum

        spectra = [psd_eigenvalues(v.double()) for v in steps]
        name = type(metric).__name__
        if isinstance(value, (list, tuple)):
            figure = plot_spectra(spectra, title=f"{name}: eigen-spectrum over steps", ax=ax)
        else:
            figure = plot_spectrum(spectra[0], title=f"{name}: eigen-spectrum", ax=ax)
        return figure, figure.axes[0] if ax is None else ax
    if not isinstance(value, (list, tuple)):  # one step: labelled bars, not a lone dot
        from lightning_spectral.pictures.plots import plot_labelled_value

        figure = plot_labelled_value(
            labelled(value),
            name=type(metric).__name__,
            ax=ax,
            lower=metric.plot_lower_bound,
            upper=metric.plot_upper_bound,
        )
        return figure, figure.axes[0] if ax is None else ax
    from torchmetrics.utilities.plot import plot_single_or_multi_val

    figure, axis = plot_single_or_multi_val(
        value,
        ax=ax,
        higher_is_better=metric.higher_is_better,
        name=type(metric).__name__,
        lower_bound=metric.plot_lower_bound,
        upper_bound=metric.plot_upper_bound,
        legend_name=metric.plot_legend_name,
    )
    if ax is None:
        figure.tight_layout()  # the y label inside the figure
    return figure, axis


def labelled(value: Any) -> dict[str, float]:
    """A metric's value as ``{label: number}``: a scalar under ``""``, a vector by index, a dict by key (a dict of
    vectors: ``"key[i]"``).

    Examples:
        >>> import torch
        >>> labelled(torch.tensor(2.5)), labelled({1: torch.tensor(3.0), 2: torch.tensor([1.0, 2.0])})
        ({'': 2.5}, {'1': 3.0, '2[0]': 1.0, '2[1]': 2.0})
    """
    items = value.items() if isinstance(value, dict) else [("", value)]
    out: dict[str, float] = {}
    for key, entry in items:
        flat = torch.as_tensor(entry).detach().double().cpu().flatten().tolist()
        if len(flat) == 1:
            out[str(key)] = flat[0]
        else:
            out.update({f"{key}[{i}]": v for i, v in enumerate(flat)})
    return out


def plot_summary(reading: Any, ax: Any = None, top: int = 50) -> tuple[Any, Any]:
    """One bar panel per value of ``reading.summary()`` (not ``sigma``, ``n``, ``n_real``, ``n_features`` or the
    standard errors and biases), a bar per component (FastMMD: MMD^2 and the p-value per bandwidth, with the 5 % level
    dashed), from a reading (no collective).

    Returns:
        ``(figure, axis)``, or ``(figure, [axes])`` for several panels.
    """
    from lightning_spectral.pictures.plots import plot_values

    check_positive_int(top, "top")
    values = {
        key: torch.stack([torch.as_tensor(v) for v in value.values()]) if isinstance(value, dict) else value
        for key, value in reading.summary().items()
        # not values: the bandwidth and sizes they were computed at, their standard errors; {}: no mode's share
        if key not in ("sigma", "n", "n_real", "n_features") and key != "se"
        and not key.endswith(("_se", "_bias", "minus_log10_p"))  # -log10 p: the p-value's panel already
        and not (isinstance(value, dict) and not value)
    }
    figure = plot_values(values, title=reading.metric_name, lines={"p_value": 0.05}, ax=ax)
    axes = list(figure.axes) if ax is None else ax
    return figure, axes[0] if isinstance(axes, list) and len(axes) == 1 else axes
