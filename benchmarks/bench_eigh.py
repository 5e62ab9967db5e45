"""Issue 14 and 23 benchmarks: eigensolvers behind the FINC significance rule and the Vendi / FINC scores at large 2r.

    python benchmarks/bench_eigh.py floor [--device cpu] [--n 20000] [--repeats 3] [--rho2] [--floor-r 2048]
    python benchmarks/bench_eigh.py large [--device cpu] [--r 4096] [--n 20000] [--data digits|mixture]

floor: ``FINCNovelty.compute()`` against ``FKEAVendi.compute()`` (one ``eigvalsh``) on the same generated samples
(r = 2048, 2r = 4096, a 20-mode Gaussian mixture in d = 64, sigma 16, a novel mode on the generated side), and
the part of FINC's compute that its significance rule costs (``null_model``: Lanczos on one matrix per multiplier
draw at rho = 1; issue 23). ``--rho2`` also times rho = 2 (two matrices per draw), each round against its own
FKEA compute. Medians of ``--repeats`` rounds; each metric is copied before every ``compute()`` so no cached spectrum
is reused.

large: at 2r = 8192 (``--r 4096``) the eigendecomposition dominates every score. On one realistic covariance
(RFF covariance of scikit-learn's digits, d = 64, or of a mixture with d = 768), side by side: float64
``eigvalsh``, float32 ``eigvalsh``, and a partial route (the top-k eigenvalues by block Krylov, the rest of the
trace spread evenly); the Vendi-1 / RKE / FINC scores of each against float64, in percent.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch

from lightning_spectral.algebra import covariance, extreme_eigenpairs, psd_eigenvalues
from lightning_spectral.functional.finc import differential_spectrum
from lightning_spectral.functional.finc_null import null_model
from lightning_spectral.functional.fkea import vendi_score
from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, NoiseSums
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import FINCNovelty, FKEAVendi


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def mixture(n: int, d: int, k: int, seed: int, skip: tuple[int, ...] = (), scale: float = 2.0) -> torch.Tensor:
    """n samples of a k-component mixture in d dimensions (means ~ N(0, scale^2 I), unit within-mode std)."""
    means = scale * torch.randn(k, d, generator=torch.Generator().manual_seed(1234))
    allowed = torch.tensor([c for c in range(k) if c not in skip])
    generator = torch.Generator().manual_seed(seed)
    labels = allowed[torch.randint(len(allowed), (n,), generator=generator)]
    return means[labels] + torch.randn(n, d, generator=generator)


def bench_floor(args: argparse.Namespace) -> None:
    """FINC's compute (eigvalsh of C_gen - rho C_ref and the null of the significance rule) against FKEA's (one
    eigvalsh) on the same generated samples, rounds alternating, at rho = 1 (and rho = 2 with ``--rho2``)."""
    device, r, sigma, n = args.device, args.floor_r, 16.0, args.n
    generated = mixture(n, 64, 20, seed=1).to(device)
    reference = mixture(n, 64, 20, seed=2, skip=(0,)).to(device)
    fkea = FKEAVendi(sigma=sigma, n_frequencies=r, alpha=[1, 2]).to(device)
    fkea.update(generated)
    fkea._flush()  # the rows are mapped and summed here, not inside the timed compute
    finc = FINCNovelty(sigma=sigma, n_frequencies=r, rho=1.0).to(device)  # the default is 2: rho = 1 named
    (_, update_s) = timed(lambda: (finc.update(reference, real=True), finc.update(generated, real=False), finc._flush()))
    fincs = {1.0: finc}
    if args.rho2:  # the sums do not depend on rho: one copy of them, read at rho = 2 (memory: one metric's sums)
        fincs[2.0] = copy.copy(finc)
        fincs[2.0].rho = 2.0
    print(f"floor: 2r = {2 * r}, n = {n} per side, d = 64, sigma {sigma}, device {device}, "
          f"threads {torch.get_num_threads()}; FINC update {update_s:.1f} s ({finc.noise_draws} draws, generated side)")
    gen, ref = fincs[1.0]._side(real=False), fincs[1.0]._side(real=True)
    rows = {name: [] for name in ("FKEA compute", "FINC compute", "null of the rule (in FINC compute)",
                                  "FINC compute rho=2")}
    ratios = {1.0: [], 2.0: []}
    for _ in range(args.repeats):
        for rho, finc in fincs.items():
            fresh_fkea, fresh_finc = copy.deepcopy(fkea), copy.deepcopy(finc)
            vendi, t_fkea = timed(fresh_fkea.compute)
            novelty, t_finc = timed(fresh_finc.compute)
            rows["FKEA compute"].append(t_fkea)
            rows["FINC compute" if rho == 1.0 else "FINC compute rho=2"].append(t_finc)
            ratios[rho].append(t_finc / t_fkea)
            del fresh_finc
            before = copy.deepcopy(finc)  # the route before the partial spectrum: the null and a full eigvalsh
            full, t_full = timed(lambda b=before: b.reading()._spectrum(False, vectors=False, full=True).score)
            print(f"  round rho={rho:g}: FKEA {t_fkea:.2f} s, FINC {t_finc:.2f} s ({t_finc / t_fkea:.2f}x), "
                  f"full-eigvalsh route {t_full:.2f} s ({t_full / t_fkea:.2f}x); novelty {float(novelty):.6f} "
                  f"(full route {float(full):.6f}), Vendi-1 {float(vendi[1]):.2f}; load {os.getloadavg()[0]:.1f}",
                  flush=True)
            del fresh_fkea, before  # one copy at a time (the machine's memory is shared)
        rows["null of the rule (in FINC compute)"].append(timed(lambda: null_model(gen, ref, 1.0))[1])
    median = {name: statistics.median(times) for name, times in rows.items() if times}
    for name, value in median.items():
        print(f"  {name:>36}: {value:6.2f} s (median of {len(rows[name])})")
    for rho, values in ratios.items():
        if values:
            print(f"  FINC compute / FKEA compute at rho={rho:g}: median of the rounds' ratios "
                  f"{statistics.median(values):.2f}x (rounds {min(values):.2f}-{max(values):.2f}x; target <= 1.3x)")


def data_sets(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, float, str]:
    """(generated, reference, sigma, description): the reference lacks one class / mode of the generated side."""
    if args.data == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x, y = torch.tensor(digits.data, dtype=torch.float32), torch.tensor(digits.target)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        x, y = x[order], y[order]
        half = len(x) // 2
        generated, reference = x[:half], x[half:][y[half:] != 9]  # digit 9 is novel
        return generated, reference, 30.0, f"scikit-learn digits, d = 64, {half} generated (9 novel), sigma 30"
    generated = mixture(args.n, 768, 50, seed=1)
    reference = mixture(args.n, 768, 50, seed=2, skip=(0,))
    return generated, reference, 40.0, f"50-mode mixture, d = 768, n = {args.n} per side (1 novel mode), sigma 40"


def top_k_spectrum(matrix: torch.Tensor, k: int, passes: int = 6, oversample: int = 64) -> torch.Tensor:
    """Partial route: the top-k eigenvalues by randomised block subspace iteration (float64 GEMMs, one QR per
    pass, Rayleigh-Ritz at the end), the remaining trace spread evenly over the remaining dimensions."""
    size = matrix.shape[0]
    k = min(k, size // 2)
    block = torch.randn(size, k + oversample, generator=torch.Generator().manual_seed(0), dtype=matrix.dtype)
    block = block.to(matrix.device)
    for _ in range(passes):
        block = torch.linalg.qr(matrix @ block)[0]
    top = torch.linalg.eigvalsh(block.T @ matrix @ block).flip(0)[:k].clamp_min(0)
    rest = (matrix.trace() - top.sum()).clamp_min(0)
    return torch.cat([top, (rest / (size - k)).expand(size - k)])


def scores(spectrum: torch.Tensor, floor_values: torch.Tensor, threshold: float) -> dict[str, float]:
    """Vendi-1 and RKE of a covariance spectrum, FINC novelty of a difference spectrum at a given threshold."""
    return {
        "Vendi-1": float(vendi_score(spectrum.clamp_min(0), 1)),
        "RKE": float(vendi_score(spectrum.clamp_min(0), 2)),
        "FINC": float(floor_values[floor_values > threshold].sum()),
    }


def bench_large(args: argparse.Namespace) -> None:
    device, r = args.device, args.r
    generated, reference, sigma, what = data_sets(args)
    rff = GaussianRFF(generated.shape[1], r, sigma).to(device)
    cov_gen = covariance(generated.to(device), rff)
    cov_ref = covariance(reference.to(device), rff)
    difference = (cov_gen - cov_ref + (cov_gen - cov_ref).T) / 2
    print(f"large: 2r = {2 * r}, {what}; device {device}, threads {torch.get_num_threads()}")
    exact_cov = psd_eigenvalues(cov_gen)
    exact_diff = torch.linalg.eigvalsh(difference).flip(0)
    # the FINC threshold as finc_spectrum sets it (the null of 4 content groups per side, level 0.05, minimum 1e-3)
    multipliers = Multipliers(1, rff.sigma, 0, DEFAULT_RATIO)  # FINCNovelty's defaults: one draw, generated side
    sides = [NoiseSums.of(side.to(device), rff, m) for side, m in ((generated, multipliers), (reference, None))]
    threshold = differential_spectrum(*sides, 1.0, vectors=False).threshold
    reference_scores = scores(exact_cov, exact_diff, threshold)
    # each route: (spectrum of C_gen for Vendi, spectrum of C_gen - C_ref for FINC)
    routes = {
        "float64 eigvalsh": (lambda m: torch.linalg.eigvalsh(m).flip(0),) * 2,
        "float32 eigvalsh": (lambda m: torch.linalg.eigvalsh(m.float()).double().flip(0),) * 2,
        "top-256 (+ flat tail) / top-16 Lanczos": (lambda m: top_k_spectrum(m, 256), top_by_lanczos),
        "top-1024 (+ flat tail) / top-16 Lanczos": (lambda m: top_k_spectrum(m, 1024), top_by_lanczos),
    }
    print(f"  float64 scores: Vendi-1 {reference_scores['Vendi-1']:.3f}, RKE {reference_scores['RKE']:.3f}, "
          f"FINC {reference_scores['FINC']:.5f} (threshold {threshold:.2e})")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in routes}
    results = {}
    for _ in range(args.repeats):
        for name, (vendi_route, finc_route) in routes.items():
            cov_values, t_cov = timed(lambda route=vendi_route: route(cov_gen))
            diff_values, t_diff = timed(lambda route=finc_route: route(difference))
            times[name].append((t_cov, t_diff))
            results[name] = scores(cov_values, diff_values, threshold)
    base = [statistics.median(t[i] for t in times["float64 eigvalsh"]) for i in (0, 1)]
    for name in routes:
        median = [statistics.median(t[i] for t in times[name]) for i in (0, 1)]
        errors = ", ".join(
            f"{key} {100 * (results[name][key] / reference_scores[key] - 1):+.3f} %"
            if reference_scores[key] else f"{key} {results[name][key]:.2e}"
            for key in ("Vendi-1", "RKE", "FINC")
        )
        print(f"  {name:>40}: C_gen {median[0]:6.1f} s ({base[0] / median[0]:4.2f}x float64's speed), "
              f"C_gen - C_ref {median[1]:6.1f} s ({base[1] / median[1]:4.2f}x); {errors}")


def top_by_lanczos(matrix: torch.Tensor) -> torch.Tensor:
    """Partial route for FINC: the 16 largest eigenvalues by Lanczos (the significant ones are few)."""
    return extreme_eigenpairs(matrix, 0, 16)[0].flip(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["floor", "large"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--r", type=int, default=4096)
    parser.add_argument("--data", choices=["digits", "mixture"], default="digits")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rho2", action="store_true", help="floor: also time FINC's compute at rho = 2")
    parser.add_argument("--floor-r", type=int, default=2048, help="floor: n_frequencies (2r features)")
    args = parser.parse_args()
    bench_floor(args) if args.what == "floor" else bench_large(args)


if __name__ == "__main__":
    main()
