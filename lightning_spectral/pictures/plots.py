"""Eigen-spectrum and test-history plots, built with matplotlib's object interface (``matplotlib.figure.Figure``,
imported when a plot is made): no pyplot state and no backend switch, so a notebook's backend is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_spectrum(
    eigenvalues: Tensor,
    threshold: Optional[float] = None,
    top: int = 50,
    title: str = "Eigen-spectrum",
    ax: Any = None,
    *,
    cut: Optional[int] = None,
) -> "Figure":
    """Bar plot of the ``top`` largest eigenvalues, with an optional significance threshold line.

    Positive bars are modes (FKEA) or over-represented modes (FINC: those above the dashed threshold pass).
    ``cut`` marks the first ``cut`` bars as kept (kernel PCA's components): a dotted line after bar ``cut``, the
    bars beyond it grey, and at least ``cut + 10`` bars shown so the line is in the picture. Draws into ``ax`` when
    given (returns its figure), else into a new figure.

    Examples:
        >>> figure = plot_spectrum(torch.linspace(1, 0.01, 80), cut=60)
        >>> len(figure.axes[0].patches), figure.axes[0].get_legend().get_texts()[0].get_text()
        (70, '60 kept')
    """
    from matplotlib.figure import Figure

    if cut is not None:
        top = max(top, cut + 10)
    values = eigenvalues.detach().double().cpu()[:top]
    if ax is None:
        figure = Figure(figsize=(6, 3.2))
        axis = figure.subplots()
    else:
        axis, figure = ax, ax.figure
    colors = [
        "tab:gray" if (threshold is not None and v <= threshold) or (cut is not None and i >= cut) else "tab:blue"
        for i, v in enumerate(values.tolist())
    ]
    axis.bar(range(1, len(values) + 1), values.numpy(), color=colors)
    if threshold is not None:
        axis.axhline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:.3g}")
    if cut is not None:
        axis.axvline(cut + 0.5, color="tab:red", linestyle=":", label=f"{cut} kept")
    if threshold is not None or cut is not None:
        axis.legend()
    axis.axhline(0.0, color="black", linewidth=0.5)
    axis.set_xlabel("mode (eigenvalue rank)")
    axis.set_ylabel("eigenvalue")
    axis.set_title(title)
    _integer_ticks(axis)
    figure.tight_layout()
    return figure


def _integer_ticks(axis: Any) -> None:
    """Ticks at whole numbers only on the x axis (ranks, epochs)."""
    from matplotlib.ticker import MaxNLocator

    axis.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_signed_spectrum(
    eigenvalues: Tensor, names: tuple[str, str] = ("A", "B"), top: int = 50, title: str = "", ax: Any = None
) -> "Figure":
    """SPEC's eigenvalues of ``(K_A - K_B) / n`` by magnitude (the ``top`` largest), coloured by sign: positive bars
    are clusters ``names[0]`` makes and ``names[1]`` does not, negative bars the reverse.

    Examples:
        >>> figure = plot_signed_spectrum(torch.tensor([0.3, -0.2, 0.1]), names=("clip.npy", "dino.npy"))
        >>> [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
        ['clip.npy groups, dino.npy does not', 'dino.npy groups, clip.npy does not']
    """
    values = eigenvalues.detach().double().cpu()
    values = values[values.abs().argsort(descending=True)][:top]
    figure, (axis,) = panels(1, ax, width=7.0, height=3.6)
    ranks = torch.arange(1, len(values) + 1)
    for sign, color, label in (
        (1, "tab:blue", f"{names[0]} groups, {names[1]} does not"),
        (-1, "tab:orange", f"{names[1]} groups, {names[0]} does not"),
    ):
        chosen = values * sign > 0
        axis.bar(ranks[chosen].numpy(), values[chosen].numpy(), color=color, label=label)
    axis.axhline(0.0, color="black", linewidth=0.5)
    axis.set_xlabel("eigenvalue rank (by |eigenvalue|)")
    axis.set_ylabel("eigenvalue of (K_A - K_B)/n")
    axis.set_title(title or f"SPEC: A = {names[0]}, B = {names[1]}")
    axis.legend()
    _integer_ticks(axis)
    figure.tight_layout()
    return figure


def plot_test_history(
    epochs: Sequence[int],
    statistic: Mapping[str, Sequence[float]],
    p_value: Mapping[str, Sequence[float]],
    level: float = 0.05,
    title: str = "FastMMD",
    ax: Any = None,
) -> "Figure":
    """A two-sample test over epochs: the statistic (one line per bandwidth) left, the p-value right on a log scale
    with the test ``level`` dashed (below it the samples differ from the reference).

    p-values are drawn as they are, however small (``1e-161`` sits at ``1e-161``); a p-value of exactly 0 (an
    underflow) sits at the bottom of the axis, a decade below the smallest positive one (see `log_floor`).

    Examples:
        >>> figure = plot_test_history([0, 1, 2], {"MMD^2": [0.1, 0.05, 0.01]}, {"p-value": [0.001, 0.01, 0.3]})
        >>> [axis.get_title() for axis in figure.axes]
        ['FastMMD: MMD^2 over epochs', 'FastMMD: p-value over epochs']
    """
    figure, (left, right) = panels(2, ax, width=4.5, height=3.2)
    bottom = log_floor([float(v) for values in p_value.values() for v in values], level)
    for axis, series, name in ((left, statistic, "MMD^2"), (right, p_value, "p-value")):
        for label, values in series.items():
            points = [max(float(v), bottom) if axis is right else float(v) for v in values]  # log scale: no zero
            axis.plot(list(epochs), points, marker="o", markersize=4, label=label)
        axis.set_xlabel("epoch")
        axis.set_ylabel(name)
        axis.set_title(f"{title}: {name} over epochs")
        _integer_ticks(axis)
    right.set_yscale("log")
    right.axhline(level, color="tab:red", linestyle="--", label=f"level {level:g}")
    left.axhline(0.0, color="black", linewidth=0.5)
    for axis in (left, right):
        if len(axis.get_legend_handles_labels()[0]) > 1:
            axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def log_floor(values: Sequence[float], reference: float = 1.0) -> float:
    """Where a zero goes on a log axis: a decade below the smallest positive value among ``values`` and
    ``reference`` (the limits follow the data; no fixed floor such as ``1e-16``).

    Examples:
        >>> log_floor([1e-161, 0.3, 0.0], reference=0.05) == 1e-161 / 10
        True
        >>> log_floor([0.0], reference=0.05)
        0.005
    """
    positive = [v for v in (*values, reference) if v > 0.0]
    return min(positive) / 10.0 if positive else 1e-300


def panels(count: int, ax: Any = None, width: float = 6.0, height: float = 3.2) -> tuple["Figure", list[Any]]:
    """A figure with ``count`` side-by-side axes, or the given ones: ``ax`` may be one axis (``count == 1``) or a
    sequence of ``count`` axes.

    Raises:
        ValueError: ``ax`` does not hold ``count`` axes.
    """
    if ax is None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(width * count, height))
        axes = figure.subplots(1, count)
        return figure, list(axes) if count > 1 else [axes]
    axes = list(ax.flat) if hasattr(ax, "flat") else list(ax) if isinstance(ax, (list, tuple)) else [ax]
    if len(axes) != count:
        raise ValueError(f"`ax`: this plot has {count} panels; pass {count} axes (or none), got {len(axes)}.")
    return axes[0].figure, axes


def plot_spectra(
    spectra: Sequence[Tensor],
    labels: Optional[Sequence[str]] = None,
    top: int = 50,
    title: str = "Eigen-spectrum over steps",
    ax: Any = None,
) -> "Figure":
    """One line per spectrum (e.g. a covariance's eigenvalues at successive steps), the ``top`` largest each, on a
    log scale. Draws into ``ax`` when given (returns its figure), else into a new figure.

    Examples:
        >>> import torch
        >>> figure = plot_spectra([torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.9, 0.1, 0.0])])
        >>> len(figure.axes[0].lines)
        2
    """
    figure, (axis,) = panels(1, ax)
    for index, values in enumerate(spectra):
        values = values.detach().double().cpu()[:top].clamp_min(1e-12)
        label = labels[index] if labels is not None else f"step {index}"
        axis.plot(range(1, len(values) + 1), values.numpy(), marker="o", markersize=3, label=label)
    axis.set_yscale("log")
    axis.set_xlabel("mode (eigenvalue rank)")
    axis.set_ylabel("eigenvalue")
    axis.set_title(title)
    axis.legend()
    figure.tight_layout()
    return figure


def plot_values(
    values: Mapping[str, Tensor],
    title: str = "",
    lines: Optional[Mapping[str, float]] = None,
    ax: Any = None,
) -> "Figure":
    """One bar panel per named value, a bar per component (e.g. FastMMD's MMD^2 and p-value per bandwidth), each
    bar labelled with its number, with optional dashed reference lines per name (e.g. ``{"p_value": 0.05}``).

    Examples:
        >>> import torch
        >>> figure = plot_values({"": torch.tensor([0.1, 0.2]), "p_value": torch.tensor([0.5, 0.01])},
        ...                      title="FastMMD", lines={"p_value": 0.05})
        >>> len(figure.axes), len(figure.axes[1].patches)
        (2, 2)
    """
    figure, axes = panels(len(values), ax, width=4.0)
    for axis, (name, value) in zip(axes, values.items()):
        flat = torch.as_tensor(value).detach().double().cpu().flatten()
        bars = axis.bar(range(len(flat)), flat.numpy(), color="tab:blue")
        axis.bar_label(bars, labels=[f"{v:.4g}" for v in flat.tolist()], fontsize=8)  # the number, however small
        axis.margins(y=0.15)  # room for the labels
        if lines and name in lines:
            axis.axhline(lines[name], color="tab:red", linestyle="--", label=f"{lines[name]:.3g}")
            axis.legend()
        axis.axhline(0.0, color="black", linewidth=0.5)
        axis.set_xticks(range(len(flat)))
        axis.set_xlabel("component")
        axis.set_ylabel(name or "value")
        axis.set_title(f"{title} {name or 'value'}".strip())
    figure.tight_layout()
    return figure


def plot_labelled_value(
    values: Mapping[str, float],
    name: str,
    ax: Any = None,
    lower: Optional[float] = None,
    upper: Optional[float] = None,
) -> "Figure":
    """One value (or one per order / bandwidth) as labelled bars: a bar per entry of ``values``, its number written
    on it, the metric's ``name`` on the y axis and in the title (a single value is read, not guessed from a dot's
    height). ``lower`` / ``upper`` (a metric's plot bounds) fix the y limits when given.

    Examples:
        >>> figure = plot_labelled_value({"": 3.25}, name="FKEAVendi")
        >>> axis = figure.axes[0]
        >>> axis.get_ylabel(), axis.get_title(), [text.get_text() for text in axis.texts]
        ('FKEAVendi', 'FKEAVendi = 3.25', ['3.25'])
    """
    figure, (axis,) = panels(1, ax, width=4.0, height=3.2)
    labels, heights = list(values.keys()), [float(v) for v in values.values()]
    bars = axis.bar(range(len(heights)), heights, color="tab:blue", width=0.6)
    for bar, height in zip(bars, heights, strict=True):  # the number, on the bar (bar_label adds an annotation per bar)
        axis.annotate(
            f"{height:.4g}", (bar.get_x() + bar.get_width() / 2, height), ha="center",
            va="bottom" if height >= 0 else "top", fontsize=10, xytext=(0, 2 if height >= 0 else -2),
            textcoords="offset points",
        )
    axis.axhline(0.0, color="black", linewidth=0.5)
    axis.set_xticks(range(len(heights)), [label or name for label in labels])
    axis.set_ylabel(name)
    pairs = zip(labels, heights, strict=True)
    shown = ", ".join(f"{label} {height:.4g}" if label else f"{height:.4g}" for label, height in pairs)
    axis.set_title(f"{name} = {shown}")
    axis.margins(y=0.15)
    if lower is not None or upper is not None:
        axis.set_ylim(bottom=lower, top=upper)
    figure.tight_layout()
    return figure
