"""Issue 14 benchmark: SPEC-align's penalty per training step, exact route against the warm-started solver.

    python benchmarks/bench_spec_align.py penalty [--device cpu] [--steps 60]
    python benchmarks/bench_spec_align.py omp [--size 1024] [--seconds 120]

penalty: the cheap-MLP worst case of issue 5 (student MLP 3072 -> 1024 -> 512, batch 256, reference 768-d
features, cosine kernel). Each step takes a fresh random batch (consecutive batches hold different samples,
as in training) and times, side by side in one loop: the MLP step alone (forward, task loss, backward, SGD
step), ``spec_align_loss`` forward + backward into the student embedding, and ``SpecAlignSolver`` forward +
backward on the same embedding. Medians over ``--steps`` steps after 5 warm-up steps; the penalty is also
given as a percentage of the MLP step. Both are also compared with the float64 exact route on the same
embedding (untimed). Run it once per OpenMP wait policy (``OMP_WAIT_POLICY=PASSIVE`` and
unset): the script reports the policy of its own process.

omp: is the Makefile's ``OMP_WAIT_POLICY=PASSIVE`` still needed? Two torch processes at once on the machine,
each timing ``eigh`` of a float64 ``--size`` x ``--size`` matrix (median of 5), once with the default policy
and once with the passive one (each pair killed after ``--seconds``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

from lightning_spectral.callbacks import SpecAlignSolver
from lightning_spectral.functional.spec import spec_align_loss

EIGH_CHILD = """
import statistics, sys, time, torch
size = int(sys.argv[1])
a = torch.randn(size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
a = a + a.T
times = []
for _ in range(6):
    start = time.perf_counter()
    torch.linalg.eigh(a)
    times.append(time.perf_counter() - start)
print(statistics.median(times[1:]))
"""


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def relative_to(truth: torch.Tensor, truth_grad: torch.Tensor, value: float, grad: torch.Tensor) -> tuple[float, float]:
    """Relative differences of a loss value and its gradient from the float64 answer."""
    return abs(value - float(truth)) / float(truth), float((grad.double() - truth_grad).norm() / truth_grad.norm())


def bench_penalty(args: argparse.Namespace) -> None:
    device = args.device
    policy = os.environ.get("OMP_WAIT_POLICY", "default (unset)")
    print(f"penalty: batch 256, MLP 3072-1024-512, reference 768-d, cosine; device {device}, "
          f"threads {torch.get_num_threads()}, OMP_WAIT_POLICY={policy}, torch {torch.__version__}")
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(3072, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)).to(device)
    optimiser = torch.optim.SGD(mlp.parameters(), lr=1e-4)
    solver = SpecAlignSolver(kernel="cosine")
    generator = torch.Generator().manual_seed(1)
    rows: dict[str, list[float]] = {"MLP step": [], "exact": [], "solver": []}
    differences = []
    for step in range(args.steps + 5):
        x = torch.randn(256, 3072, generator=generator).to(device)
        reference = torch.randn(256, 768, generator=generator).to(device)

        sync(device)
        start = time.perf_counter()
        loss = mlp(x).square().mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        sync(device)
        mlp_s = time.perf_counter() - start

        with torch.no_grad():
            embedding = mlp(x)
        values = []
        for name, penalty in (("exact", spec_align_loss), ("solver", solver)):
            student = embedding.clone().requires_grad_(True)
            sync(device)
            start = time.perf_counter()
            value = penalty(student, reference)
            value.backward()
            sync(device)
            if step >= 5:
                rows[name].append(time.perf_counter() - start)
            values.append((float(value.detach()), student.grad))
        if step >= 5:
            rows["MLP step"].append(mlp_s)
            student = embedding.double().requires_grad_(True)  # the float64 answer, untimed
            truth = spec_align_loss(student, reference.double())
            truth.backward()
            differences.append(
                [abs(values[0][0] - values[1][0]) / values[0][0],
                 float((values[0][1] - values[1][1]).norm() / values[0][1].norm())]
                + [x for value, grad in values for x in relative_to(truth, student.grad, value, grad)]
            )
    median = {name: statistics.median(times) * 1e3 for name, times in rows.items()}
    step_ms = median["MLP step"]
    print(f"  MLP step alone: {step_ms:.2f} ms (median of {args.steps})")
    for name in ("exact", "solver"):
        print(f"  penalty, {name:>6}: {median[name]:6.2f} ms = {100 * median[name] / step_ms:5.1f} % of the MLP step")
    print(f"  solver speed-up over the exact route: {median['exact'] / median['solver']:.1f}x; "
          f"fallbacks to the exact route: {solver.fallbacks} of {args.steps + 5} calls")
    print(f"  solver vs exact (float32): largest relative difference of the loss "
          f"{max(d[0] for d in differences):.1e}, of the gradient {max(d[1] for d in differences):.1e}")
    for column, name in ((2, "exact (float32)"), (4, "solver (float32)")):
        loss, grad = max(d[column] for d in differences), max(d[column + 1] for d in differences)
        print(f"  {name} vs the float64 exact route: largest relative difference of the loss {loss:.1e}, "
              f"of the gradient {grad:.1e}")


def bench_omp(args: argparse.Namespace) -> None:
    print(f"omp: two processes at once, each timing eigh of {args.size} x {args.size} float64 (median of 5)")
    for policy in ("default", "PASSIVE"):
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        if policy == "PASSIVE":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        start = time.perf_counter()
        children = [
            subprocess.Popen([sys.executable, "-c", EIGH_CHILD, str(args.size)], env=env, stdout=subprocess.PIPE,
                             text=True)
            for _ in range(2)
        ]
        results = []
        for child in children:
            try:
                out, _ = child.communicate(timeout=max(1.0, args.seconds - (time.perf_counter() - start)))
                results.append(f"{float(out) * 1e3:.0f} ms")
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()
                results.append(f"not finished in {args.seconds:.0f} s")
        print(f"  {policy:>8}: eigh {' / '.join(results)} (wall {time.perf_counter() - start:.1f} s for the pair)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["penalty", "omp"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    bench_penalty(args) if args.what == "penalty" else bench_omp(args)


if __name__ == "__main__":
    main()
