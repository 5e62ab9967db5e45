"""Generic input validation, shared by every layer: numbers, flags and seeds; tensors and batches (dense, finite,
of a rank and width); memory budgets (``check_memory`` and the sizes of the RFF frequency matrices, sums and mapped
batches); and the argument forms several modules take (selectors, embedding sources, normalisation statistics).

The rule: a check that is not one owner's business lives here. A check of one owner's own inputs lives beside that
owner: a method's settings and inputs in its functional module, whose metric and callbacks import it from there
(FINC's ``check_significance`` in ``functional/finc.py``, SPEC's ``check_pair`` in ``functional/spec.py``, the Vendi
orders' ``check_orders`` in ``functional/fkea.py``), a file's format in ``io/``, a command-line flag in ``cli/``, a
feature map's phases in ``kernels/gaussian_rff.py``; it is private (``_check_*``) when only its module calls it.
Owner-specific memory estimates (the candidates of ``top_samples`` in ``functional/modes.py``, ``FINCNovelty``'s
sums, the SPEC-align solver's frequencies) compute their bytes beside the owner and refuse through ``check_memory``.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from numbers import Integral, Real
from typing import Optional

import numpy as np
import torch
from torch import Tensor


def plain_number(value: object, name: str, integer: bool = False, what: str = "") -> float:
    """``value`` as a Python number when it is one: an ``int`` / ``float`` or a NumPy scalar, never a bool, a
    string or a tensor (a numeric string or a 0-d tensor would otherwise pass ``float()`` silently).

    With ``integer=True`` the value must be integral (``2`` or ``np.int64(2)``, not ``2.0``).

    Raises:
        ValueError: naming ``name``, what was given and what to pass instead (``what`` describes the number,
            e.g. "a positive number").
    """
    kind = what or ("an integer" if integer else "a number")
    convert = "int" if integer else "float"
    if isinstance(value, (str, bytes)):
        try:
            number = float(value)
            shown = int(number) if integer and number.is_integer() else number
            hint = "" if integer and isinstance(shown, float) else f"; pass the number itself, `{name}={shown!r}`"
        except (ValueError, OverflowError):
            hint = ""
        raise ValueError(f"`{name}` must be {kind}, got the string {value!r}{hint}.")
    if isinstance(value, (Tensor, np.ndarray)):
        what_it_is = "a tensor" if isinstance(value, Tensor) else "a NumPy array"
        size = value.numel() if isinstance(value, Tensor) else value.size
        shown = f"{value!r}" if size == 1 else f"of shape {tuple(value.shape)}"
        raise ValueError(
            f"`{name}` must be {kind}, got {what_it_is} {shown}; pass a Python number instead, e.g. "
            f"`{name}={convert}(value)` for a one-element `value`."
        )
    allowed = Integral if integer else Real
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise ValueError(f"`{name}` must be {kind}, got {value!r}.")
    return value  # type: ignore[return-value]


def check_positive(value: float, name: str) -> float:
    """Return ``float(value)`` or raise ``ValueError`` unless it is a finite number > 0 (a Python or NumPy number:
    not a bool, a string or a tensor)."""
    value = float(plain_number(value, name, what="a positive number"))
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0, got {value}.")
    return value


def check_bandwidths(sigma: object, name: str = "sigma") -> tuple[tuple[float, ...], bool]:
    """One bandwidth or several: ``((sigma,), True)`` for a number, ``(tuple, False)`` for a non-empty list / tuple
    or a 1-D tensor / array of them; each a finite number > 0.

    Raises:
        ValueError: naming ``name``: an empty sequence, a string, a bad bandwidth.
    """
    if isinstance(sigma, (Tensor, np.ndarray)) and sigma.ndim == 1:
        sigma = sigma.tolist()
    if isinstance(sigma, (list, tuple)):
        if not sigma:
            raise ValueError(f"`{name}` must be a positive number or a non-empty sequence of them, got {sigma!r}.")
        return tuple(check_positive(value, name) for value in sigma), False
    return (check_positive(sigma, name),), True


#: Fraction of the machine's memory a metric's sums may take before construction refuses (they must also fit
#: a copy for the all-reduce and the eigendecomposition's workspace).
MEMORY_FRACTION = 0.5


@functools.lru_cache(maxsize=1)
def total_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_memory(owner: str, argument: str, value: object, needed: int, what: str, fix: str = "") -> None:
    """Raise before allocating ``needed`` bytes (``what``) when they exceed half of this machine's memory.

    ``fix`` replaces the default advice (a smaller ``n_frequencies``-like argument).

    Raises:
        ValueError: naming ``argument`` (whose ``value`` asks for the memory) and the amount.
    """
    available = total_memory_bytes()
    if available and needed > MEMORY_FRACTION * available:
        advice = fix or f"use a smaller `{argument}` (2r = 4096 to 16384 is typical)"
        raise ValueError(
            f"{owner}: `{argument}`={value} needs {needed / 2**30:.1f} GiB ({needed:,} bytes: {what}), more than half "
            f"of this machine's {available / 2**30:.1f} GiB; {advice}."
        )


def check_frequency_memory(owner: str, in_features: int, n_frequencies: int) -> None:
    """Raise before drawing a float64 (in_features, n_frequencies) frequency matrix that cannot fit in memory.

    Raises:
        ValueError: naming ``in_features`` or ``n_frequencies`` (the larger one) and the bytes.
    """
    needed = 8 * in_features * n_frequencies
    what = f"1 float64 frequency matrix of {in_features} x {n_frequencies}"
    if in_features > n_frequencies:
        fix = "reduce the embedding width `in_features` first (e.g. a PCA or a linear projection) or `n_frequencies`"
        check_memory(owner, "in_features", in_features, needed, what, fix)
    check_memory(owner, "n_frequencies", n_frequencies, needed, what)


def check_state_memory(owner: str, n_frequencies: int, matrices: int, vectors: int = 0) -> None:
    """Raise before allocating ``matrices`` float64 (2r)^2 sums and ``vectors`` 2r ones that cannot fit in memory."""
    width = 2 * n_frequencies
    needed = 8 * (matrices * width * width + vectors * width)
    check_memory(owner, "n_frequencies", n_frequencies, needed, f"{matrices} float64 matrices of {width} x {width}")


def check_width_memory(owner: str, in_features: object, width: int, matrices: int = 1, vectors: int = 1) -> None:
    """Raise before allocating float64 sums whose size follows the input width (cosine and linear maps):
    ``matrices`` of ``width x width`` and ``vectors`` of ``width``.

    Raises:
        ValueError: naming ``in_features`` (the input width) and the bytes.
    """
    needed = 8 * (matrices * width * width + vectors * width)
    check_memory(
        owner, "in_features", in_features, needed, f"{matrices} float64 matrices of {width} x {width}",
        "reduce the embedding width first (e.g. a PCA or a linear projection), or use the Gaussian kernel, whose "
        "sums have the width 2 * n_frequencies",
    )


def check_batch_memory(owner: str, x: Tensor, n_frequencies: int) -> None:
    """Raise before mapping a batch whose phases and (N, 2r) features cannot fit in memory (about 5 N r values).

    Raises:
        ValueError: naming ``n_frequencies``, the batch size and the bytes.
    """
    needed = 5 * x.shape[0] * n_frequencies * x.element_size()
    check_memory(
        owner, "n_frequencies", n_frequencies, needed, f"the features of a batch of {x.shape[0]} rows",
        "use a smaller `n_frequencies`, or smaller batches (`chunk_size`)",
    )


def check_positive_int(value: int, name: str) -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer >= 1 (Python or NumPy; not a bool, a
    float, a string or a tensor)."""
    value = int(plain_number(value, name, integer=True, what="an integer >= 1"))
    if value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}.")
    return value


def check_int_range(value: int, name: str, low: int, high: int, what: str = "") -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer (not a bool, not a float) in
    ``[low, high]``; ``what`` says what the argument is for."""
    if isinstance(value, bool) or not isinstance(value, Integral) or not low <= int(value) <= high:
        extra = f" ({what})" if what else ""
        raise ValueError(f"`{name}` must be an integer in [{low}, {high}]{extra}, got {value!r}.")
    return int(value)


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype features are computed in: float64 stays float64, every other float runs in float32.

    Half precision (float16 / bfloat16) is upcast to float32: cos/sin of phases and the Gram sums lose
    too much in 16 bits (the unit-norm identity would fail at ~1e-3).
    """
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def check_dense(x: Tensor, name: str, owner: str = "") -> Tensor:
    """Return ``x`` or raise ``TypeError`` when it is sparse or a meta tensor: the maths here needs dense values.

    Raises:
        TypeError: a sparse layout (the fix: ``x.to_dense()``) or the ``meta`` device (a tensor without data).
    """
    where = f"{owner}: " if owner else ""
    if x.layout != torch.strided:
        raise TypeError(
            f"{where}`{name}` is a sparse tensor (layout {x.layout}); pass a dense one, e.g. `{name}.to_dense()`."
        )
    if x.device.type == "meta":
        raise TypeError(
            f"{where}`{name}` is a 'meta' tensor, which has a shape but no values; pass a tensor holding data "
            "(created or loaded on 'cpu' or 'cuda')."
        )
    return x


def as_tensor(value: object, name: str, owner: str = "") -> object:
    """A NumPy array or a (nested) list / tuple of numbers as a CPU tensor (float64 stays float64, Python floats
    become float64); a tensor, or anything else, is returned as it is for the caller's own checks.

    Raises:
        TypeError: an array or list that holds something other than numbers (strings, objects, ragged rows).
    """
    if isinstance(value, Tensor) or not isinstance(value, (np.ndarray, list, tuple)):
        return value
    where = f"{owner}: " if owner else ""
    try:
        array = np.asarray(value)
    except ValueError:  # ragged nested lists
        array = np.asarray([], dtype=object)
    if array.dtype.kind not in "biuf":
        raise TypeError(
            f"{where}`{name}` must hold numbers (rows of equal length), got a {type(value).__name__} with "
            f"{'ragged rows or objects' if array.dtype == object else f'dtype {array.dtype}'}."
        )
    return torch.from_numpy(np.ascontiguousarray(array.astype(array.dtype.newbyteorder("="), copy=False)))


def is_table(value: object) -> bool:
    """Whether ``value`` is one table of samples (a tensor, an array, a list of rows of numbers) rather than an
    iterable of batches (a list of tensors, a DataLoader)."""
    if isinstance(value, (Tensor, np.ndarray)):
        return True
    if isinstance(value, (list, tuple)) and value:
        first = value[0]
        return isinstance(first, Real) or (isinstance(first, (list, tuple)) and not any(
            isinstance(item, (Tensor, np.ndarray)) for item in first
        ))
    return False


def all_finite(x: Tensor) -> bool:
    """Whether every entry of ``x`` is finite: one sum in the common case instead of three elementwise passes.

    A NaN or an Inf anywhere makes the sum NaN or Inf; a finite sum therefore proves every entry finite, and
    only a non-finite sum (possibly an overflow of finite entries) needs the elementwise check.
    """
    if x.numel() == 0 or bool(torch.isfinite(x.sum())):
        return True
    return bool(torch.isfinite(x).all())


def check_features(x: Tensor, name: str = "features", width: Optional[int] = None, owner: str = "") -> Tensor:
    """Validate an embedding batch of shape (N, d) and return it in its compute dtype.

    Raises:
        TypeError: if ``x`` is not a dense floating-point tensor (sparse and meta tensors are refused).
        ValueError: wrong rank, no columns, wrong width, or NaN / Inf entries.
    """
    where = f"{owner}: " if owner else ""
    if not isinstance(x, Tensor):
        raise TypeError(f"{where}`{name}` must be a torch.Tensor of shape (N, d), got {type(x).__name__}.")
    check_dense(x, name, owner)
    if not x.is_floating_point():
        raise TypeError(
            f"{where}`{name}` must be floating point, got {x.dtype}; convert it first, e.g. `{name}.float()`."
        )
    if x.ndim != 2:
        raise ValueError(
            f"{where}`{name}` must have shape (N, d), got {tuple(x.shape)}; "
            "flatten per-sample dimensions with `x.flatten(1)` (or `x[None]` for one sample)."
        )
    if x.shape[1] == 0:
        raise ValueError(f"{where}`{name}` has no columns (shape {tuple(x.shape)}); each sample needs d >= 1 values.")
    if width is not None and x.shape[1] != width:
        raise ValueError(
            f"{where}`{name}` has width {x.shape[1]} but {width} was expected "
            "(the feature map was built for that width; all batches must share it)."
        )
    if not all_finite(x):
        bad = int((~torch.isfinite(x)).any(dim=1).sum())
        raise ValueError(f"{where}`{name}` contains NaN or Inf in {bad} of {x.shape[0]} rows; clean or drop them.")
    return x.to(compute_dtype(x))


def check_side(real: object, owner: str) -> bool:
    """The ``real`` flag of two-sample updates: True for the reference, False for the generated side."""
    if not isinstance(real, bool):
        raise TypeError(f"{owner}.update: `real` must be True (reference) or False (generated), got {real!r}.")
    return real


def check_fraction(value: float, name: str, low_open: bool = True, high_closed: bool = True) -> float:
    """Return ``float(value)`` or raise ``ValueError`` unless it lies in (0, 1] (the bounds as the flags say).

    ``low_open=False`` admits 0 and ``high_closed=False`` excludes 1: e.g. a validation share in [0, 1).
    """
    interval = ("(" if low_open else "[") + "0, 1" + ("]" if high_closed else ")")
    value = float(plain_number(value, name, what=f"a number in {interval}"))
    above = value > 0 if low_open else value >= 0
    below = value <= 1 if high_closed else value < 1
    if not (above and below):  # NaN fails both
        raise ValueError(f"`{name}` must be in {interval}, got {value}.")
    return value


def check_order(value: object, name: str = "alpha") -> float:
    """Return a Renyi / Vendi order as a float in (0, inf], or raise ``ValueError`` naming ``name``.

    Numbers (Python or NumPy) in (0, inf], ``math.inf`` and the strings ``"inf"`` / ``"infinity"`` are orders;
    bools are not (``True`` would silently be order 1).

    Examples:
        >>> check_order(2), check_order("inf")
        (2.0, inf)
    """
    if isinstance(value, str):
        if value.lower() not in ("inf", "infinity"):
            raise ValueError(f"`{name}` must be a number in (0, inf] or 'inf', got {value!r}.")
        return math.inf
    if isinstance(value, bool):
        raise ValueError(f"`{name}` must be an order in (0, inf], not a bool (got {value}); e.g. {name}=1 or 2.")
    order = float(plain_number(value, name, what="a number in (0, inf] or 'inf'"))
    if not order > 0:  # NaN fails too
        raise ValueError(f"`{name}` must be in (0, inf], got {order}.")
    return order


def check_bool(value: bool, name: str) -> bool:
    """Return ``value`` or raise ``TypeError`` unless it is ``True`` or ``False`` (the string "false" is truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False, got {value!r}.")
    return value


def check_seed(value: int, name: str = "seed") -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer (Python or NumPy) in the range a
    ``torch.Generator`` accepts."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"`{name}` must be an integer, got {value!r}.")
    value = int(value)
    if not -(2**63) <= value < 2**64:
        raise ValueError(f"`{name}` must be an integer in [-2**63, 2**64) (torch.Generator's range), got {value}.")
    return value


def check_nonnegative_int(value: int, name: str) -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer >= 0 (e.g. ``num_workers``)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0, got {value!r}.")
    return int(value)


def check_normalisation(
    mean: Optional[tuple[float, ...]],
    std: Optional[tuple[float, ...]],
    names: tuple[str, str] = ("mean", "std"),
    channels: tuple[int, ...] = (3,),
) -> None:
    """Per-channel image normalisation: ``mean`` and ``std`` (sequences) both given or both ``None``, each
    ``channels`` finite numbers, ``std > 0``; ``names`` are the two arguments as the caller calls them.

    Raises:
        ValueError: naming the argument at fault.
    """
    mean_name, std_name = names
    if (mean is None) != (std is None):
        raise ValueError(f"Pass both `{mean_name}` and `{std_name}` (per-channel normalisation), or neither.")
    if mean is None or std is None:
        return
    counts = " or ".join(map(str, channels))
    for values, name in ((mean, mean_name), (std, std_name)):
        try:
            floats = [float(v) for v in values]
        except (TypeError, ValueError):
            floats = []
        if len(floats) not in channels or not all(map(math.isfinite, floats)):
            raise ValueError(f"`{name}` must be {counts} finite numbers (per channel), got {values!r}.")
    if any(float(s) <= 0 for s in std):
        raise ValueError(f"`{std_name}` must be > 0 in every channel, got {std!r}.")


def check_image_batch(
    images: object, name: str = "images", channels: Sequence[int] = (1, 3), owner: str = ""
) -> Tensor:
    """Validate a float batch of images (N, C, H, W) in [0, 1] with C in ``channels``; return it as float32.

    Raises:
        TypeError: not a tensor, or not floating point.
        ValueError: no batch dimension or another rank, a channel count outside ``channels``, an empty image,
            NaN / Inf, values outside [0, 1]; the message names ``name`` and the fix.
    """
    where = f"{owner}: " if owner else ""
    if not isinstance(images, Tensor):
        raise TypeError(f"{where}`{name}` must be a tensor of images (N, C, H, W), got {type(images).__name__}.")
    check_dense(images, name, owner)
    if images.ndim == 3:
        raise ValueError(
            f"{where}`{name}` has shape {tuple(images.shape)}: one image without a batch dimension? Pass a batch "
            f"(N, C, H, W), e.g. `{name}[None]` for a single image."
        )
    if images.ndim != 4:
        raise ValueError(f"{where}`{name}` must be a batch of images (N, C, H, W), got shape {tuple(images.shape)}.")
    if not images.is_floating_point():
        raise TypeError(
            f"{where}`{name}` has dtype {images.dtype}; it takes float images in [0, 1]: convert uint8 images with "
            f"`{name}.float() / 255`."
        )
    if images.shape[1] not in channels:
        allowed = " or ".join(map(str, channels))
        hint = f"drop the alpha channel with `{name}[:, :3]`" if images.shape[1] == 4 else (
            "put the channels first, (N, C, H, W)" if images.shape[-1] in channels else "convert them to grey or RGB"
        )
        raise ValueError(
            f"{where}`{name}` has {images.shape[1]} channels (shape {tuple(images.shape)}), but it takes {allowed}; "
            f"{hint}."
        )
    if images.shape[-1] == 0 or images.shape[-2] == 0:
        raise ValueError(f"{where}`{name}` has empty images (shape {tuple(images.shape)}).")
    if not all_finite(images):
        raise ValueError(f"{where}`{name}` contains NaN or Inf; clean the images first.")
    if images.numel() and (float(images.min()) < -1e-6 or float(images.max()) > 1 + 1e-6):
        raise ValueError(
            f"{where}`{name}` has values in [{float(images.min()):.3g}, {float(images.max()):.3g}]; it takes images in "
            "[0, 1]: map [-1, 1] outputs with `(x + 1) / 2` and divide 0-255 values by 255."
        )
    return images.float()


def check_embedding_source(value: object, name: str, owner: str) -> None:
    """A callback's embedding source: a non-empty submodule name or a function (``None`` leaves nothing to measure).

    Raises:
        ValueError: naming ``name`` and what to pass.
    """
    if not ((isinstance(value, str) and value) or callable(value)):
        raise ValueError(
            f"{owner}: `{name}` must be a submodule name (e.g. 'encoder': its output is the embedding) or a function "
            f"`fn(pl_module, batch) -> Tensor`, got {value!r}."
        )


def check_selector(value: object, name: str, owner: str = "") -> None:
    """Where a batch holds something: ``None``, a key (str), a position (int) or a function ``fn(batch)``.

    Raises:
        ValueError: anything else (a float, a bool, a list), naming ``name``.
    """
    if value is None or callable(value) or isinstance(value, str) or (
        isinstance(value, Integral) and not isinstance(value, bool)
    ):
        return
    where = f"{owner}: " if owner else ""
    raise ValueError(
        f"{where}`{name}` must be a key (str), a position (int) or a function `fn(batch)` selecting part of a "
        f"batch, got {value!r}."
    )


def check_batches(batches: object, owner: str, name: str = "batches") -> Iterator[tuple[object, object]]:
    """``batches`` of ``(features, ids)`` pairs (a list, a generator, a DataLoader), each pair checked as it comes:
    a pair (a tuple or a list of two), ids that are not bools. Nothing is read before the returned generator is.

    Raises:
        TypeError: ``None``, a tensor or an array (one table rather than batches of pairs), something not iterable
            (at once); an item that is not a pair, bool ids (when it comes); naming ``owner``, ``name`` and the fix.
    """
    pairs = "an iterable of (features, ids) pairs, e.g. [(features, torch.arange(len(features)))] or a DataLoader"
    if isinstance(batches, (Tensor, np.ndarray)):
        raise TypeError(
            f"{owner}: `{name}` must be {pairs}; got one {type(batches).__name__} of shape "
            f"{tuple(batches.shape)}: pair it with its ids, [(features, torch.arange(len(features)))]."
        )
    if batches is None or isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise TypeError(f"{owner}: `{name}` must be {pairs}, got {batches!r}.")
    return _checked_pairs(batches, owner, name)


def _checked_pairs(batches: Iterable, owner: str, name: str) -> Iterator[tuple[object, object]]:
    for position, item in enumerate(batches):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            what = (f"a {type(item).__name__} of shape {tuple(item.shape)}" if isinstance(item, (Tensor, np.ndarray))
                    else f"a {type(item).__name__}")
            raise TypeError(
                f"{owner}: item {position} of `{name}` is {what}, not a (features, ids) pair; pair each batch "
                "with its dataset indices, e.g. (features, torch.arange(start, start + len(features)))."
            )
        ids = item[1]
        dtype = getattr(ids, "dtype", None)
        if dtype in (torch.bool, np.bool_) or (
            isinstance(ids, (list, tuple)) and ids and all(isinstance(i, (bool, np.bool_)) for i in ids)
        ):
            raise TypeError(
                f"{owner}: the ids of item {position} of `{name}` are bools; pass integer dataset indices (e.g. "
                "`mask.nonzero().flatten()` for the positions of a mask)."
            )
        yield item[0], item[1]
