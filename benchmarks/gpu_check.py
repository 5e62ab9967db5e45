"""`make gpu-check`: the suite's CUDA tests and the benchmarks at GPU sizes, their tables written to
docs/benchmarks/gpu.md.

    python benchmarks/gpu_check.py [--page docs/benchmarks/gpu.md] [--timeout 900] [--only NAME ...] [--plan]

With a CUDA device: runs ``pytest -m cuda`` (every test that needs a GPU carries the ``cuda`` marker), then each
benchmark of ``RUNS`` at GPU sizes (2r = 8,192, n = 10^5 .. 10^6) with ``--device cuda``, and rewrites the section
of the page between ``<!-- gpu-check:start -->`` and ``<!-- gpu-check:end -->`` with the device's name, the date,
the test result and every benchmark's command and printed table (the rest of the page is left as it is). Without
CUDA it prints one line saying so and exits 0 (nothing is run, the page is not touched). ``--plan`` prints the
commands it would run and runs none (what `make bench` calls).
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- gpu-check:start -->", "<!-- gpu-check:end -->"
NO_CUDA = (
    "gpu-check: no CUDA device (torch.cuda.is_available() is False): nothing run, docs/benchmarks/gpu.md unchanged."
)

# name -> arguments of a benchmark script at GPU sizes (r = 4096 frequencies: 2r = 8,192 features)
RUNS: dict[str, list[str]] = {
    "updates": ["bench_updates.py", "--d", "768", "--n-frequencies", "4096", "--rows", "100000"],
    "eigh": ["bench_eigh.py", "large", "--r", "4096", "--n", "100000", "--data", "mixture", "--repeats", "1"],
    "mmd_statistic": ["bench_mmd_speed.py", "statistic", "--n", "100000", "--seeds", "1"],
    "spec_reference": ["bench_spec.py", "reference", "--n", "100000", "--r", "4096", "--repeats", "1"],
    "spec_align": ["bench_spec_align.py", "penalty", "--steps", "60"],
    "generated": ["bench_generated.py", "--n-samples", "100000", "--frequencies", "4096"],
}


def rewrite_section(page: str, body: str) -> str:
    """``page`` with the text between the gpu-check markers replaced by ``body`` (the markers appended at the end
    when the page has none yet).

    Examples:
        >>> rewrite_section("a\\n<!-- gpu-check:start -->\\nold\\n<!-- gpu-check:end -->\\nb\\n", "new")
        'a\\n<!-- gpu-check:start -->\\nnew\\n<!-- gpu-check:end -->\\nb\\n'
    """
    if START not in page or END not in page:
        return page.rstrip("\n") + f"\n\n{START}\n{body}\n{END}\n"
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{body}\n{END}{tail}"


def run(command: list[str], timeout: float) -> tuple[int, str, float]:
    """Runs ``command`` from the repository root: its exit status, its output (stdout then stderr's last lines) and
    its wall time in seconds."""
    began = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code, out, err = 124, str(expired.stdout or ""), f"timed out after {timeout:.0f} s"
    tail = "\n".join(err.strip().splitlines()[-5:]) if code else ""
    return code, (out.strip() + ("\n" + tail if tail else "")).strip(), time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "benchmarks" / "gpu.md")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    parser.add_argument("--only", nargs="*", choices=sorted(RUNS), help="a subset of the benchmarks")
    parser.add_argument("--plan", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args()

    import torch

    if args.plan:
        print("pytest -q -m cuda tests")
        for name in args.only or RUNS:
            print(" ".join(["python", f"benchmarks/{RUNS[name][0]}", *RUNS[name][1:], "--device", "cuda"]))
    if not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    if args.plan:
        return 0
    device = torch.cuda.get_device_name(0)
    python = sys.executable
    lines = [
        f"Device: **{device}** (torch {torch.__version__}, CUDA {torch.version.cuda}), "
        f"{datetime.date.today().isoformat()}, written by `make gpu-check`.",
        "",
    ]
    code, out, seconds = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "tests"], 1800)
    summary = out.strip().splitlines()[-1] if out.strip() else "no output"
    lines += [f"CUDA tests (`pytest -m cuda`): {summary} ({seconds:.0f} s).", ""]
    failed = code != 0
    for name in args.only or RUNS:
        command = [python, f"benchmarks/{RUNS[name][0]}", *RUNS[name][1:], "--device", "cuda"]
        code, out, seconds = run(command, args.timeout)
        failed |= code != 0
        shown = " ".join(["python", *command[1:]])
        lines += [f"### {name}", "", f"`{shown}`: exit {code}, {seconds:.0f} s", "", "```text", out, "```", ""]
        print(f"{name}: exit {code}, {seconds:.0f} s", flush=True)
    page = args.page.read_text(encoding="utf-8")
    args.page.write_text(rewrite_section(page, "\n".join(lines).rstrip()), encoding="utf-8")
    print(f"gpu-check: {device}: numbers written to {args.page}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
