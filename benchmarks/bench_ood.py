"""Issue 6 benchmark: KernelPCAOOD fit throughput and per-sample scoring latency against an exact kernel PCA
(scikit-learn) and a kNN detector, at N_train in {10k, 100k}.

    python benchmarks/bench_ood.py [--sizes 10000 100000]
    python benchmarks/bench_ood.py --accuracy          # detection accuracy on real data (digits 8, 9 held out)

Features: synthetic "penultimate-layer" embeddings, d = 512, 10 non-negative class clusters with random
per-sample scale (in-distribution); out-of-distribution = Dirichlet mixtures of the class means (they lie
inside the linear span of the in-distribution data). Latency = time to score 2,000 samples / 2,000.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.decomposition import KernelPCA
from sklearn.metrics.pairwise import rbf_kernel

from lightning_spectral.functional import detection_metrics
from lightning_spectral.metrics import KernelPCAOOD

D, CLASSES, SIGMA = 512, 10, 0.5


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    means = torch.rand(CLASSES, D, generator=torch.Generator().manual_seed(99)) ** 4  # sparse-ish, non-negative
    labels = torch.randint(CLASSES, (n,), generator=generator)
    scale = 0.5 + 2.5 * torch.rand(n, 1, generator=generator)
    inside = scale * (means[labels] + 0.05 * torch.randn(n, D, generator=generator)).clamp_min(0)
    weights = torch.distributions.Dirichlet(torch.ones(CLASSES)).sample((n,))
    outside = scale * (weights @ means + 0.05 * torch.randn(n, D, generator=generator)).clamp_min(0)
    return inside, outside


def normalise(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def knn_scores(train: torch.Tensor, test: torch.Tensor, k: int = 50) -> torch.Tensor:
    """Sun et al.'s kNN detector: distance to the k-th nearest normalised training feature (higher = OOD)."""
    train, test = normalise(train), normalise(test)
    return torch.cat([torch.cdist(chunk, train).topk(k, largest=False).values[:, -1] for chunk in test.split(500)])


def exact_kpca_scores(model: KernelPCA, train: np.ndarray, kernel_mean: float, test: np.ndarray) -> np.ndarray:
    """Centred kernel-PCA reconstruction error (Hoffmann 2007) with scikit-learn's fitted KernelPCA."""
    k_test = rbf_kernel(test, train, gamma=model.gamma)
    self_term = 1.0 - 2.0 * k_test.mean(1) + kernel_mean
    projections = model.transform(test)
    return np.sqrt(np.clip(self_term - (projections**2).sum(1), 0, None))


def accuracy_on_digits() -> None:
    """AUROC / FPR95 of each detector on scikit-learn's digits: raw 64-pixel features, digits 0-7 in-distribution
    (a seeded 80 / 20 split: fit / test), digits 8 and 9 out-of-distribution. Harder than the synthetic data."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    inside = torch.nonzero(y < 8).flatten()
    inside = inside[torch.randperm(len(inside), generator=torch.Generator().manual_seed(0))]
    cut = int(0.8 * len(inside))
    train, test_in, test_out = x[inside[:cut]], x[inside[cut:]], x[y >= 8]
    print(f"digits: fit on {len(train)} images of 0-7, test {len(test_in)} of 0-7 against {len(test_out)} of 8, 9")
    rows = []
    for mapping, sigma in [("corp", 0.3), ("corp", 0.5), ("corp", 1.0), ("cop", None), ("linear", None)]:
        options = {} if sigma is None else {"sigma": sigma}
        detector = KernelPCAOOD(mapping, n_frequencies=1024, explained_variance=0.9, **options).fit([train])
        metrics = detection_metrics(detector.score(test_in), detector.score(test_out))
        name = f"KernelPCAOOD {mapping}" + (f", sigma {sigma}" if sigma else "")
        rows.append((name, detector.components_.shape[1], metrics))
    for k in (1, 10, 50):
        knn = detection_metrics(knn_scores(train, test_in, k), knn_scores(train, test_out, k))
        rows.append((f"kNN (k = {k})", None, knn))
    train_np = normalise(train).double().numpy()
    for sigma in (0.3, 0.5):
        q = next(q for name, q, _ in rows if name == f"KernelPCAOOD corp, sigma {sigma}")
        model = KernelPCA(n_components=q, kernel="rbf", gamma=1 / (2 * sigma**2), eigen_solver="dense").fit(train_np)
        kernel_mean = float(rbf_kernel(train_np, train_np, gamma=model.gamma).mean())
        scores = [
            torch.from_numpy(exact_kpca_scores(model, train_np, kernel_mean, normalise(t).double().numpy()))
            for t in (test_in, test_out)
        ]
        rows.append((f"exact kernel PCA, sigma {sigma}", q, detection_metrics(*scores)))
    for name, q, metrics in rows:
        kept = "" if q is None else f" (q = {q})"
        print(f"  {name + kept:46s} AUROC {float(metrics['auroc']):.3f}  FPR95 {float(metrics['fpr']):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--exact-max", type=int, default=10_000, help="largest N_train for the exact kernel PCA")
    parser.add_argument("--accuracy", action="store_true", help="detection accuracy on digits instead")
    args = parser.parse_args()
    if args.accuracy:
        accuracy_on_digits()
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; d = {D}, CoRP sigma = {SIGMA} "
          f"(gamma = {1 / (2 * SIGMA**2):g}), 2r = 2048, explained variance 0.9")
    test_in, test_out = make_data(2000, seed=1)
    test_in, test_out = test_in[:2000], test_out[:2000]
    for n in args.sizes:
        train, _ = make_data(n, seed=2)
        detector = KernelPCAOOD("corp", sigma=SIGMA, n_frequencies=1024, explained_variance=0.9)
        _, fit_s = timed(lambda train=train, detector=detector: detector.fit(train.split(4096)))
        scores_in, score_s = timed(lambda detector=detector: detector.score(test_in))
        scores_out = detector.score(test_out)
        metrics = detection_metrics(scores_in, scores_out)
        print(f"N_train = {n:,}: KernelPCAOOD fit {fit_s:.1f} s ({n / fit_s:,.0f} samples/s, q = "
              f"{detector.components_.shape[1]}); score {1000 * score_s / len(test_in):.3f} ms/sample; "
              f"AUROC {float(metrics['auroc']):.3f}, FPR95 {float(metrics['fpr']):.3f}", flush=True)
        knn_in, knn_s = timed(lambda train=train: knn_scores(train, test_in))
        knn_metrics = detection_metrics(knn_in, knn_scores(train, test_out))
        print(f"  kNN (k = 50): {1000 * knn_s / len(test_in):.3f} ms/sample "
              f"({knn_s / score_s:.0f}x KernelPCAOOD); AUROC {float(knn_metrics['auroc']):.3f}, "
              f"FPR95 {float(knn_metrics['fpr']):.3f}", flush=True)
        if n > args.exact_max:
            print(f"  exact kernel PCA: not run (an {n:,} x {n:,} kernel matrix, {8 * n * n / 1e9:.0f} GB)")
            continue
        train_np = normalise(train).double().numpy()
        q = detector.components_.shape[1]
        model = KernelPCA(n_components=q, kernel="rbf", gamma=1 / (2 * SIGMA**2), eigen_solver="arpack")
        start = time.perf_counter()
        model.fit(train_np)
        exact_fit_s = time.perf_counter() - start
        kernel_mean = float(np.mean([rbf_kernel(chunk, train_np, gamma=model.gamma).mean()
                                     for chunk in np.array_split(train_np, 10)]))
        start = time.perf_counter()
        exact_in = exact_kpca_scores(model, train_np, kernel_mean, normalise(test_in).double().numpy())
        exact_s = time.perf_counter() - start
        exact_out = exact_kpca_scores(model, train_np, kernel_mean, normalise(test_out).double().numpy())
        exact_metrics = detection_metrics(torch.from_numpy(exact_in), torch.from_numpy(exact_out))
        print(f"  exact kernel PCA (scikit-learn, same q): fit {exact_fit_s:.1f} s; score "
              f"{1000 * exact_s / len(test_in):.3f} ms/sample ({exact_s / score_s:.0f}x KernelPCAOOD); "
              f"AUROC {float(exact_metrics['auroc']):.3f}, FPR95 {float(exact_metrics['fpr']):.3f}", flush=True)


if __name__ == "__main__":
    main()
