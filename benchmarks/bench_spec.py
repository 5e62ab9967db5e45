"""Issue 5 benchmark: SPECAlign's overhead per training step, and SPEC route time against n.

    python benchmarks/bench_spec.py overhead [--encoder vit|mlp] [--model ViT-B-32] [--steps 3]
    python benchmarks/bench_spec.py routes
    python benchmarks/bench_spec.py reference [--device cpu] [--n 5000] [--r 1024] [--repeats 3]

overhead: one Trainer step (forward, loss, backward, optimizer step) of an open_clip image tower (random
init, 224 x 224 inputs, batch 256, embedding width 512) with and without SPECAlign (cosine kernel, weight
0.1, precomputed 768-d reference features looked up by index: the reference encoder's own forward is not
counted), both runs side by side in one process; plus the same for a cheap MLP encoder (3072 -> 1024 -> 512),
the worst case. Median of ``--steps`` timed steps after one warm-up step.

routes: time of ``spec`` on synthetic embeddings (d_a = 512, d_b = 768) for the exact n x n route and the
covariance route (cosine: D = 1280; Gaussian: r = 1000 per side, D = 4000) as n grows.

reference (issue 14): the covariance route's eigen-step against the reference code's core
(``spec/spec_core.py``, method ``'cholesky'``, as written there: float32 joint covariance, upper Cholesky of
``C + 1e-7 I``, ``Theta = Z D Z^T`` with a dense ``D``, ``eigh(Theta)``, eigenvectors ``D Z^T W``) and the
previous route (an ``eigh`` of ``C``, then one of ``B^T D B``), side by side on one joint covariance
(n = 5000 Gaussian-kernel samples, d_a = 512, d_b = 768, r = 1024 frequencies per side: D = 4096); plus
``spec(..., method="covariance")`` end to end. Eigenvalues are compared with the float64 general ``eig``-free
old route.
"""

from __future__ import annotations

import argparse
import statistics
import time

import lightning as L
import open_clip
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.algebra import covariance, extreme_eigenpairs
from lightning_spectral.callbacks import SPECAlign
from lightning_spectral.functional import spec, spec_align_loss
from lightning_spectral.functional.spec import differential_theta
from lightning_spectral.kernels import PairedFeatureMap


class StepTimer(L.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, *args) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        self.times.append(time.perf_counter() - self._start)


class EncoderModule(L.LightningModule):
    """A task loss on the image embedding (mean squared norm after a head), enough to train the encoder."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def training_step(self, batch, _):
        return self.encoder(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)


def step_times(encoder_fn, inputs: torch.Tensor, reference: torch.Tensor, steps: int, align: bool) -> float:
    torch.manual_seed(0)
    module = EncoderModule(encoder_fn())
    timer = StepTimer()
    callbacks = [timer] + ([SPECAlign(reference=reference, weight=0.1, index=1)] if align else [])
    loader = DataLoader(TensorDataset(inputs, torch.arange(len(inputs))), batch_size=256)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps + 1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=callbacks,
    )
    trainer.fit(module, loader)
    return statistics.median(timer.times[1:])


def penalty_cost(repeats: int = 30) -> float:
    """Median seconds of what SPECAlign adds on one process: spec_align_loss forward + backward."""
    student = torch.randn(256, 512, requires_grad=True)
    reference = torch.randn(256, 768)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        spec_align_loss(student, reference).backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def overhead(encoder: str, model: str, steps: int) -> None:
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    cost = penalty_cost()
    print(f"penalty alone (spec_align_loss + backward, n=256, 512 + 768 wide, cosine): {cost * 1e3:.1f} ms")
    reference = torch.randn(256 * (steps + 1), 768)
    if encoder == "vit":
        name = f"open_clip {model} image tower"
        encoder_fn = lambda: open_clip.create_model(model, pretrained=None).visual  # noqa: E731
        inputs = torch.randn(256 * (steps + 1), 3, 224, 224)
    else:
        name = "MLP 3072-1024-512"
        encoder_fn = lambda: torch.nn.Sequential(  # noqa: E731
            torch.nn.Linear(3072, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)
        )
        inputs = torch.randn(256 * (steps + 1), 3072)
    plain = step_times(encoder_fn, inputs, reference, steps, align=False)
    aligned = step_times(encoder_fn, inputs, reference, steps, align=True)
    print(
        f"{name}, batch 256: step without {plain * 1e3:.1f} ms, with SPECAlign {aligned * 1e3:.1f} ms "
        f"(end to end {100 * (aligned / plain - 1):+.1f} %); penalty / step = {100 * cost / plain:.2f} %"
    )


def routes(sizes: list[int]) -> None:
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        a = torch.randn(n, 512, generator=g)
        b = torch.cat([a[:, :256], torch.randn(n, 512, generator=g)], 1)
        row = [f"n={n}"]
        cases = [("cosine covariance", dict(kernel="cosine", method="covariance"))]
        cases.append(
            ("gaussian covariance r=1000", dict(sigma_a=32.0, sigma_b=40.0, n_frequencies=1000, method="covariance"))
        )
        if n <= 4000:
            cases.append(("exact n x n (gaussian)", dict(sigma_a=32.0, sigma_b=40.0, method="exact")))
        for name, kwargs in cases:
            start = time.perf_counter()
            result = spec(a, b, **kwargs)
            row.append(f"{name}: {time.perf_counter() - start:.2f} s (SPEC-diff {float(result.spec_diff):.4f})")
        print("; ".join(row), flush=True)


def reference_core(cov32: torch.Tensor, width_a: int, eps: float = 1e-7):
    """The reference code's ``compute_by_covariance_matrix(method='cholesky')`` from its covariance on: float32."""
    signs = torch.diag(torch.cat([torch.ones(width_a), -torch.ones(cov32.shape[0] - width_a)]).to(cov32))
    z = torch.linalg.cholesky(cov32 + eps * torch.eye(cov32.shape[0], device=cov32.device), upper=True)
    theta = z @ signs @ z.T
    eigenvalues, eigvecs = torch.linalg.eigh(theta)
    core = time.perf_counter()
    eigenvectors = signs @ z.T @ eigvecs
    eigenvectors = eigenvectors / torch.linalg.norm(eigenvectors, dim=0)
    return eigenvalues, eigenvectors, core


def previous_route(cov: torch.Tensor, width_a: int, rtol: float = 1e-12):
    """The eigen-step this issue replaced: eigh of C (float64), then eigh of B^T D B (B = U sqrt(S))."""
    values, vectors = torch.linalg.eigh(cov)
    keep = values > rtol * float(values[-1])
    basis = vectors[:, keep] * values[keep].sqrt()
    signs = torch.ones(basis.shape[0], dtype=basis.dtype, device=basis.device)
    signs[width_a:] = -1.0
    eigenvalues, w = torch.linalg.eigh(basis.T @ (signs[:, None] * basis))
    return eigenvalues.flip(0), signs[:, None] * (basis @ w.flip(1))


def new_route(cov: torch.Tensor, width_a: int, dtype: torch.dtype, k: int = 3):
    """The covariance route's eigen-step now: one float64 Cholesky, then Theta, its eigvalsh and Lanczos for the 2k
    cluster vectors in ``dtype`` (float64, or float32 as ``precision="auto"`` does from D = 4096)."""
    theta, factor, signs, floor = differential_theta(cov, width_a, dtype)
    values = torch.linalg.eigvalsh(theta).double().flip(0)
    values = torch.where(values.abs() > floor, values, 0.0)
    _, w = extreme_eigenpairs(theta, k, k, rtol=1e-10 if dtype == torch.float64 else 1e-5)
    return values, signs[:, None] * (factor @ w.double())


def bench_reference(args: argparse.Namespace) -> None:
    device, n, r = args.device, args.n, args.r
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, 512, generator=g)
    b = torch.cat([a[:, :256], torch.randn(n, 512, generator=g)], 1)
    a, b = a.to(device), b.to(device)
    paired = PairedFeatureMap("gaussian", (512, 768), (32.0, 40.0), r, 0).to(device)
    cov = covariance(torch.cat([a, b], 1), paired)
    cov32, width = cov.float(), paired.widths[0]
    print(f"reference: n = {n}, D = {cov.shape[0]} (r = {r} per side), device {device}, "
          f"threads {torch.get_num_threads()}, torch {torch.__version__}")
    names = ("reference core (Cholesky + Theta + eigh, float32)", "reference + eigenvectors",
             "previous route (2 eigh, float64)", "new eigen-step, float64 eigvalsh", "new eigen-step, float32 eigvalsh",
             "spec(method='covariance') end to end (auto: float32)")
    rows: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.repeats):
        start = time.perf_counter()
        ref_values, _, core = reference_core(cov32, width)
        rows[names[0]].append(core - start)
        rows[names[1]].append(time.perf_counter() - start)
        start = time.perf_counter()
        old_values, _ = previous_route(cov, width)
        rows[names[2]].append(time.perf_counter() - start)
        start = time.perf_counter()
        new_values, _ = new_route(cov, width, torch.float64)
        rows[names[3]].append(time.perf_counter() - start)
        start = time.perf_counter()
        single_values, _ = new_route(cov, width, torch.float32)
        rows[names[4]].append(time.perf_counter() - start)
        start = time.perf_counter()
        result = spec(a, b, sigma_a=32.0, sigma_b=40.0, n_frequencies=r, method="covariance")
        rows[names[5]].append(time.perf_counter() - start)
    median = {name: statistics.median(times) for name, times in rows.items()}
    core = median[names[0]]
    for name, value in median.items():
        print(f"  {name:>55}: {value:6.2f} s = {core / value:5.2f}x the reference core's speed")
    old_sorted = old_values.sort(descending=True).values
    m = min(len(old_sorted), len(new_values))
    above = old_sorted[:m].abs() > 1e-5  # the new route zeroes eigenvalues below its Cholesky floor (~8e-6 here)
    new_error = float((new_values[:m] - old_sorted[:m]).abs().max())
    single_error = float((single_values[:m] - old_sorted[:m]).abs().max())
    print(f"  above 1e-5 ({int(above.sum())} eigenvalues), largest |difference|: new float64 "
          f"{float((new_values[:m] - old_sorted[:m])[above].abs().max()):.1e}, new float32 "
          f"{float((single_values[:m] - old_sorted[:m])[above].abs().max()):.1e}")
    ref_error = float((ref_values.double().sort(descending=True).values[:m] - old_sorted[:m]).abs().max())
    print(f"  eigenvalues against the previous float64 route (all {m}), largest |difference|: new float64 "
          f"{new_error:.1e}, new float32 {single_error:.1e}, reference core (float32, eps 1e-7) {ref_error:.1e}; "
          f"max |eigenvalue| {float(old_sorted.abs().max()):.4f}, SPEC-diff {float(result.spec_diff):.6f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["overhead", "routes", "reference"])
    parser.add_argument("--encoder", choices=["vit", "mlp"], default="mlp")
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--r", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 16000, 32000],
                        help="routes: the values of n")
    args = parser.parse_args()
    if args.what == "overhead":
        overhead(args.encoder, args.model, args.steps)
    elif args.what == "routes":
        routes(args.sizes)
    else:
        bench_reference(args)
