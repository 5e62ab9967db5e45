"""A script's entry point: a refused checkpoint or output path ends the run with one line and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from lightning_spectral.io.checkpoints import CheckpointError
from lightning_spectral.io.writing import WriteError


def run_script(run: Callable[[], Any], script: str) -> None:
    """Call ``run()`` (a LightningCLI ``main`` reads ``sys.argv``); a bad ``--ckpt_path`` or output path
    ([`CheckpointError`][lightning_spectral.io.CheckpointError], [`WriteError`][lightning_spectral.io.WriteError])
    prints ``"<script name>: error: <reason>"`` on stderr and exits with code 2, as argparse does for a bad
    argument, instead of a traceback."""
    try:
        run()
    except (CheckpointError, WriteError) as error:
        print(f"{Path(script).name}: error: {error}", file=sys.stderr)
        sys.exit(2)
