"""The parser, the flags every subcommand shares, and [`main`][lightning_spectral.cli.main]: JSON out, exit code 0; any
error one line on
stderr and exit code 2 (``--debug`` shows the traceback instead)."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn, Optional

PROG = "lightning-spectral"
POSITIONALS = {"file", "a", "b", "train", "test", "command"}


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage block): ``prog: error: message``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def common_flags() -> argparse.ArgumentParser:
    """The flags of every subcommand: output, pictures, streaming, device."""
    common = Parser(add_help=False)
    group = common.add_argument_group("output and running")
    group.add_argument("--output", metavar="FILE.json", help="write the JSON here instead of stdout")
    group.add_argument("--plot-dir", metavar="DIR", help="save pictures (spectrum plot; galleries with --images) here")
    group.add_argument(
        "--images", metavar="LIST.txt", help="text file, one image path per line (line i = sample i): mode galleries "
        "in --plot-dir; relative paths are relative to the list's folder",
    )
    group.add_argument("--thumb-size", type=int, default=96, help="gallery tile size in pixels (default: %(default)s)")
    group.add_argument(
        "--batch-size", type=int, default=4096, help="rows read per chunk; memory is one chunk (default: %(default)s)"
    )
    group.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="where features are computed; cuda uses NCCL under torchrun (default: %(default)s)",
    )
    group.add_argument("--no-progress", action="store_true", help="no progress bars (they go to stderr, rank 0)")
    group.add_argument("--debug", action="store_true", help="on error, show the Python traceback")
    return common


def build_parser() -> Parser:
    """The ``lightning-spectral`` parser with its three subcommands."""
    from lightning_spectral.cli import compare, evaluate, ood

    parser = Parser(
        prog=PROG,
        description="Kernel spectral methods on embedding files (.npy / .pt / .safetensors, streamed) or image folders "
        "(embedded with --encoder): diversity, "
        "novelty and two-sample tests (evaluate), embedding comparison (compare), out-of-distribution scores (ood). "
        "JSON on stdout. Runs under torchrun (evaluate, compare and ood shard the rows over the ranks).",
    )
    from lightning_spectral import __version__

    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = common_flags()
    for module in (evaluate, compare, ood):
        module.add_parser(subparsers, common)
    return parser


def arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments used (defaults included), for the JSON output."""
    hidden = ("handler", "prepare", "command")
    return {key: value for key, value in vars(args).items() if key not in hidden and not key.startswith("_")}


def _flag_names(message: str, args: argparse.Namespace) -> str:
    """Name the command-line flag where a library message names the Python argument: `sigma` -> `--sigma`."""
    flags = {key for key, value in vars(args).items() if not callable(value)} - POSITIONALS
    return re.sub(r"`(\w+)`", lambda m: f"`--{m[1].replace('_', '-')}`" if m[1] in flags else m[0], message)


def one_line(error: BaseException) -> str:
    """The error as one line, its type named unless it is a plain user error.

    Examples:
        >>> one_line(ValueError("bad\\n  value"))
        'bad value'
        >>> one_line(ZeroDivisionError("division by zero"))
        'ZeroDivisionError: division by zero'
    """
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    text = " ".join(str(text).split()) or type(error).__name__
    plain = isinstance(error, (ValueError, TypeError, OSError, KeyError, RuntimeError))
    return text if plain else f"{type(error).__name__}: {text}"


def writable_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an ``--output``, ``--plot-dir`` or ``--scores-out`` that cannot be created."""
    from lightning_spectral.io.writing import check_writable

    if args.output not in (None, "-"):
        check_writable(args.output, "--output")
    if args.plot_dir is not None:
        check_writable(args.plot_dir, "--plot-dir", folder=True)
    if getattr(args, "scores_out", None) is not None:
        check_writable(args.scores_out, "--scores-out")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (0, or 2 on any error).

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).

    Examples:
        >>> import tempfile, numpy as np
        >>> path = tempfile.mkdtemp() + "/emb.npy"
        >>> np.save(path, np.random.default_rng(0).normal(size=(200, 8)).astype("float32"))
        >>> main(["evaluate", path, "--sigma", "4", "--n-frequencies", "64", "--output", path + ".json"])
        0
        >>> main(["evaluate", path, "--sigma", "-1"])
        2
    """
    from lightning_spectral.cli.images import remove_scratch
    from lightning_spectral.cli.images import resolve as resolve_images
    from lightning_spectral.cli.runtime import FailedElsewhere, Session, write_json

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error already printed on one line
        return int(exit_.code or 0)
    session = None
    try:
        if args.images is not None and args.plot_dir is None:
            raise ValueError("`--images` needs `--plot-dir` (the folder the galleries are written to).")
        if args.thumb_size < 1:
            raise ValueError(f"`--thumb-size` must be an integer >= 1, got {args.thumb_size}.")
        prepare = getattr(args, "prepare", None)
        if prepare is not None:
            prepare(args)  # the subcommand's own flag rules, before any input is read
        writable_outputs(args)
        started = time.perf_counter()
        given = arguments(args)  # as typed: image inputs are replaced by their embeddings below
        session = Session(args.device, progress=not args.no_progress)
        embedded = resolve_images(args, session)  # image folders / lists -> embeddings (checked before any work)
        result = args.handler(args, session)
        if session.is_main:
            payload = {"command": args.command, "arguments": given, "world_size": session.world_size}
            if embedded:
                payload["images"] = embedded
            if "verdict" in result:  # the answer first, in the JSON and as one line on stderr
                payload = {"verdict": result["verdict"], **payload}
            payload.update(result)
            payload["seconds"] = round(time.perf_counter() - started, 3)
            write_json(payload, args.output)
            if "verdict" in result:  # after the JSON is written: a failed write is the one line on stderr
                print(result["verdict"]["line"], file=sys.stderr)
        return 0
    except FailedElsewhere as error:
        if session is None or session.is_main:
            print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - every error is reported on one line
        if args.debug:
            raise
        where = f" [rank {session.rank}]" if session is not None and session.distributed else ""
        print(f"{PROG} {args.command}{where}: error: {_flag_names(one_line(error), args)}", file=sys.stderr)
        return 2
    finally:
        remove_scratch(args)
        if session is not None:
            session.close()
