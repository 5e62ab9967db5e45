"""Products at full float32 precision whatever the user set: the sums must not depend on a training run's speed knobs.

Lightning advises ``torch.set_float32_matmul_precision("high" or "medium")`` on tensor-core GPUs; torch then runs
float32 matrix products in TF32 or bfloat16, on the CPU too ("medium": bfloat16 through oneDNN, measured here: a
512 x 512 product moved by 0.25). A random-feature map (``cos(x W)``: a phase error of 1e-3 rad per unit of ``x W``)
and the float64 sums built from its products would carry that error into every eigenvalue near FINC's threshold.
[`full_precision`][lightning_spectral.algebra.full_precision] sets IEEE float32 for the block (torch's
per-backend ``fp32_precision``, for CUDA and the CPU's oneDNN) and gives the user's settings back after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


#: The float32 matrix-product settings of each backend (torch's per-backend ``fp32_precision``: "ieee", "tf32",
#: "bf16"); a torch without them is set through ``set_float32_matmul_precision``.
_BACKENDS = ("cuda", "mkldnn")


@contextmanager
def full_precision() -> Iterator[None]:
    """Inside the block float32 matrix products (CUDA and CPU) run at IEEE float32, as after
    ``torch.set_float32_matmul_precision("highest")``; the settings found on entry are restored on exit, an error
    included.

    Examples:
        >>> import torch
        >>> torch.set_float32_matmul_precision("medium")
        >>> with full_precision():
        ...     torch.backends.mkldnn.matmul.fp32_precision
        'ieee'
        >>> torch.get_float32_matmul_precision()
        'medium'
        >>> torch.set_float32_matmul_precision("highest")
    """
    matmuls = [getattr(getattr(torch.backends, name, None), "matmul", None) for name in _BACKENDS]
    matmuls = [matmul for matmul in matmuls if hasattr(matmul, "fp32_precision")]
    if not matmuls:  # an older torch: the one global setting
        found = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(found)
        return
    found = [matmul.fp32_precision for matmul in matmuls]
    generic = getattr(torch.backends, "fp32_precision", "none")  # what a backend's "none" follows
    if all((generic if value == "none" else value) in ("ieee", "none") for value in found):
        yield  # nothing to change (the default): no setting touched
        return
    for matmul in matmuls:
        matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        for matmul, value in zip(matmuls, found, strict=True):
            matmul.fp32_precision = value
