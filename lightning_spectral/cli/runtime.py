"""What every subcommand shares: the process group under ``torchrun``, errors agreed on by all ranks, output.

Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) `Session` initialises ``torch.distributed``
(gloo, or NCCL with ``--device cuda``) from the ``env://`` variables torchrun sets (``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), so the same command runs on one process, several
processes of one machine and several machines. Only rank 0 writes.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from lightning_spectral.io.writing import written
from lightning_spectral.sync.collectives import all_reduce_max


class UsageError(ValueError):
    """A bad combination of flags, reported like the library's ``ValueError`` (one line, exit code 2)."""


class FailedElsewhere(RuntimeError):
    """Another rank failed; it printed its own message."""


class Session:
    """The process's place in the run: rank, world size, device, and whether to show progress bars.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (NCCL under torchrun, this process's ``LOCAL_RANK`` GPU).
        progress: show tqdm bars (rank 0 only, and only when stderr is a terminal).

    Examples:
        >>> session = Session("cpu", progress=False)   # outside torchrun: one process
        >>> session.rank, session.world_size, session.is_main
        (0, 1, True)
        >>> session.close()
    """

    def __init__(self, device: str = "cpu", progress: bool = True) -> None:
        if device not in ("cpu", "cuda"):
            raise UsageError(f"`--device` must be 'cpu' or 'cuda', got {device!r}.")
        if device == "cuda" and not torch.cuda.is_available():
            raise UsageError("`--device cuda`: CUDA is not available on this machine; use `--device cpu`.")
        self.owns_group = False
        world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0") or 0))
        if world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method="env://")
            self.owns_group = True
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if distributed else 0
        self.world_size = dist.get_world_size() if distributed else 1
        self.device = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.progress = bool(progress) and self.is_main and sys.stderr.isatty()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @contextmanager
    def agreed(self) -> Iterator[None]:
        """Run a block of local work (opening and streaming files) and make every rank agree on its outcome.

        A rank whose block raises re-raises after telling the others (one small all-reduce); the others raise
        `FailedElsewhere` instead of waiting forever in the next collective.
        """
        error: Optional[BaseException] = None
        try:
            yield
        except Exception as caught:  # noqa: BLE001 - re-raised below, after the other ranks know
            error = caught
        if self.distributed:
            failed = all_reduce_max(0.0 if error is None else 1.0)  # every rank votes, all decide alike
            if error is None and failed > 0:
                raise FailedElsewhere("another rank failed (its message is above)")
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for the other ranks (gloo: at most a minute), then destroy the process group this session created.

        Without the barrier a rank with nothing left to write tears its connections down while rank 0 still
        writes its output, and gloo may abort rank 0 ("terminate called without an active exception", seen
        once in a clean-clone run of tests/test_cli.py).
        """
        if self.owns_group and dist.is_initialized():
            try:
                if dist.get_backend() == "gloo":
                    dist.monitored_barrier(timeout=timedelta(seconds=60))
                else:
                    dist.barrier()
            except RuntimeError:
                pass  # a rank already gone: nothing left to wait for, the group is destroyed all the same
            finally:
                dist.destroy_process_group()
                self.owns_group = False


def to_builtin(value: Any) -> Any:
    """Tensors, NumPy values, paths and tuples as JSON-ready Python values (non-finite floats as strings)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return to_builtin(value.item() if value.ndim == 0 else value.tolist())
    if hasattr(value, "item") and hasattr(value, "dtype"):  # NumPy scalars
        return to_builtin(value.item())
    if isinstance(value, dict):
        return {str(key): to_builtin(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_builtin(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "inf" / "nan": JSON has no such numbers
    return value


def write_json(result: dict[str, Any], output: Optional[str]) -> None:
    """Write ``result`` as indented JSON to ``output`` (parents created; whole or not at all, see
    [`written`][lightning_spectral.io.written]) or to stdout."""
    text = json.dumps(to_builtin(result), indent=2) + "\n"
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with written(output, "--output") as temporary:
        temporary.write_text(text, encoding="utf-8")


def same_width(files: list[Any]) -> None:
    """Raise when embedding files that feed one feature map have different widths."""
    first = files[0]
    for other in files[1:]:
        if other.d != first.d:
            raise ValueError(
                f"width mismatch: `{first.name}` ({first.where}) has d={first.d} but `{other.name}` ({other.where}) "
                f"has d={other.d}; both must come from the same encoder."
            )


def positive_ints(args: Any, *names: str) -> None:
    """Raise ``UsageError`` naming the flag when one of ``args.<name>`` is not an integer >= 1."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"`--{name.replace('_', '-')}` must be an integer >= 1, got {value}.")
