"""Run a function on 2 real CPU processes (gloo) and collect what each rank returns or raises."""

from __future__ import annotations

import os
import pickle
import socket
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, fn: Callable, args: tuple, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        result: Any = ("ok", fn(rank, world_size, *args))
    except Exception as error:  # reported to the parent test, which decides
        result = ("error", f"{type(error).__name__}: {error}", traceback.format_exc())
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def run_ddp(fn: Callable, *args: Any, tmp_path: Path, world_size: int = 2, timeout: float = 180.0) -> list:
    """Spawn ``world_size`` gloo processes running ``fn(rank, world_size, *args)``; return one result per rank.

    Each result is ``("ok", value)`` or ``("error", message, traceback)``. A process that does not finish
    within ``timeout`` seconds (a hang in a collective) fails the calling test.
    """
    context = mp.start_processes(
        _worker, args=(world_size, _free_port(), fn, args, str(tmp_path)), nprocs=world_size, join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(deadline - time.monotonic(), 0.1)):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise AssertionError(f"DDP workers did not finish within {timeout} s: a collective hangs")
    return [pickle.loads(Path(tmp_path, f"rank{rank}.pkl").read_bytes()) for rank in range(world_size)]
