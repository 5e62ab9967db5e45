"""``lightning-spectral compare A B``: SPEC between two embeddings of the same samples (row i of A and of B =
sample i): SPEC-diff, the top eigenvalues of both signs and the members of the top clusters on each side."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from lightning_spectral.cli import images
from lightning_spectral.cli.pictures import as_lists
from lightning_spectral.cli.reader import EmbeddingFile, shard_rows
from lightning_spectral.cli.runtime import Session, UsageError, positive_ints

#: The exact route forms an n x n matrix: refused above this n (use the covariance route).
EXACT_MAX_SAMPLES = 20000
DEFAULTS = {"n_frequencies": 2000, "top_k": 3, "per_cluster": 20}


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "compare",
        parents=[common],
        help="SPEC: where two embeddings of the same samples disagree (SPEC-diff and clusters).",
        description="SPEC comparison of two embeddings A and B of the same n samples (row i = sample i in both): "
        "the spectrum of (K_A - K_B)/n, SPEC-diff = max |eigenvalue|, and the members of the clusters A groups "
        "and B does not (positive eigenvalues, clusters_a) and the reverse (negative, clusters_b).",
    )
    parser.add_argument(
        "a", metavar="A", help="first embedding (n, d_a): .npy, .pt or .safetensors; or images (a folder or a .txt "
        "list) embedded by --encoder"
    )
    parser.add_argument(
        "b", metavar="B", help="second embedding (n, d_b) of the same samples; or the same images, embedded by "
        "--encoder-b"
    )
    parser.add_argument("--kernel", choices=("gaussian", "cosine"), default="gaussian", help="(default: %(default)s)")
    parser.add_argument("--sigma-a", type=float, help="Gaussian bandwidth of A (required for --kernel gaussian)")
    parser.add_argument("--sigma-b", type=float, help="Gaussian bandwidth of B (required for --kernel gaussian)")
    parser.add_argument(
        "--n-frequencies", type=int, default=DEFAULTS["n_frequencies"],
        help="r per embedding for the Gaussian kernel (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="frequency seed (default: %(default)s)")
    parser.add_argument(
        "--method", choices=("covariance", "exact"), default="covariance",
        help="covariance: streamed (D_a + D_b)^2 covariance, any n, DDP; exact: the n x n kernel matrices in "
        f"memory, exact kernels, one process, n <= {EXACT_MAX_SAMPLES} (default: %(default)s)",
    )
    parser.add_argument(
        "--top-k", type=int, default=DEFAULTS["top_k"], help="clusters and eigenvalues per side (default: %(default)s)"
    )
    parser.add_argument(
        "--per-cluster", type=int, default=DEFAULTS["per_cluster"], help="members listed per cluster (default: "
        "%(default)s)",
    )
    images.add_flags(parser, second=True)
    parser.set_defaults(handler=run)


def _open(args: argparse.Namespace) -> tuple[EmbeddingFile, EmbeddingFile]:
    first, second = EmbeddingFile(args.a, "A"), EmbeddingFile(args.b, "B")
    if first.n != second.n:
        raise ValueError(
            f"`A` ({first.where}) has {first.n} rows and `B` ({second.where}) {second.n}; SPEC compares two embeddings "
            "of the SAME samples, row i of both must be sample i."
        )
    if (first.index is not None or second.index is not None) and not torch.equal(
        first.ids(0, first.n), second.ids(0, second.n)
    ):
        raise ValueError(
            f"`A` ({first.where}) and `B` ({second.where}) list their samples in different orders (their stored "
            "dataset indices differ); write both in the same row order."
        )
    if args.kernel == "gaussian" and (args.sigma_a is None or args.sigma_b is None):
        raise UsageError(
            "`--kernel gaussian` needs `--sigma-a` and `--sigma-b` (bandwidths whose kernel matrices have similar top "
            "eigenvalues, see lightning_spectral.functional.match_bandwidth), or use `--kernel cosine`."
        )
    positive_ints(args, "top_k", "per_cluster", "n_frequencies", "batch_size")
    from lightning_spectral.cli.images import check_images_for

    check_images_for(args.images, first)  # a short --images list: refused before any work
    return first, second


def _paired(first: EmbeddingFile, second: EmbeddingFile, args, session: Session, label: str):
    rows = shard_rows(first.n, session.rank, session.world_size)
    pairs = zip(
        first.chunks(args.batch_size, rows, session.progress, f"{label} A"), second.chunks(args.batch_size, rows)
    )
    for (emb_a, ids), (emb_b, _) in pairs:
        yield (emb_a.to(session.device), emb_b.to(session.device)), ids


def _sides(values: torch.Tensor, k: int) -> dict[str, list[float]]:
    positive, negative = values[values > 0], values[values < 0]
    return {"positive": positive[:k].tolist(), "negative": negative.flip(0)[:k].tolist()}


def _covariance_route(first, second, args, session) -> tuple[dict[str, Any], torch.Tensor, list, list]:
    from lightning_spectral.metrics import SPECDivergence

    metric = SPECDivergence(
        args.kernel, args.sigma_a, args.sigma_b, n_frequencies=args.n_frequencies, seed=args.seed,
        in_features=(first.d, second.d),
    ).to(session.device)
    with session.agreed():
        for (emb_a, emb_b), _ in _paired(first, second, args, session, "compare"):
            metric.update(emb_a, emb_b)
    sides = []
    reading = metric.reading()  # one all-reduce for every number below
    spec_diff, values = float(reading.value), reading.spectrum()
    for sign in (1, -1):
        clusters = reading.clusters(args.top_k, sign)
        batches = _paired(first, second, args, session, "clusters")
        members = reading.top_samples(batches, k=args.top_k, sign=sign, per_cluster=args.per_cluster)
        sides.append(as_lists(members, clusters.eigenvalues))
    return {"spec_diff": spec_diff}, values, sides[0], sides[1]


def _exact_route(first, second, args, session) -> tuple[dict[str, Any], torch.Tensor, list, list]:
    from lightning_spectral.functional import spec

    if session.distributed:
        raise UsageError("`--method exact` runs on one process; use `--method covariance` under torchrun.")
    if first.n > EXACT_MAX_SAMPLES:
        raise UsageError(
            f"`--method exact` forms {first.n} x {first.n} matrices; above n = {EXACT_MAX_SAMPLES} use "
            "`--method covariance`."
        )
    emb_a = torch.cat([chunk for chunk, _ in first.chunks(args.batch_size, progress=session.progress)])
    emb_b = torch.cat([chunk for chunk, _ in second.chunks(args.batch_size)])
    result = spec(
        emb_a.to(session.device), emb_b.to(session.device), args.kernel, args.sigma_a, args.sigma_b,
        args.n_frequencies, args.seed, method="exact", k=args.top_k, per_cluster=args.per_cluster,
    )
    ids = first.ids(0, first.n)
    sides = []
    for clusters in (result.clusters_a, result.clusters_b):
        members = [
            (ids[row.cpu()], clusters.vectors[row, column].cpu()) for column, row in enumerate(clusters.members)
        ]
        sides.append(as_lists(members, clusters.eigenvalues))
    return {"spec_diff": float(result.spec_diff)}, result.eigenvalues, sides[0], sides[1]


def run(args: argparse.Namespace, session: Session) -> dict[str, Any]:
    with session.agreed():
        first, second = _open(args)
    route = _covariance_route if args.method == "covariance" else _exact_route
    head, values, clusters_a, clusters_b = route(first, second, args, session)
    values = values.double().cpu()
    result: dict[str, Any] = {
        "inputs": {"a": first.describe(), "b": second.describe()},
        **head,
        "n_nonzero_eigenvalues": int(values.numel()),
        "eigenvalues": _sides(values, args.top_k),
        "clusters_a": clusters_a,
        "clusters_b": clusters_b,
    }
    if session.is_main and args.plot_dir is not None:
        from lightning_spectral.cli.pictures import save_figure, save_gallery
        from lightning_spectral.pictures.plots import plot_signed_spectrum

        plot_dir, pictures = Path(args.plot_dir), {}
        embedded = getattr(args, "_sources", {})  # A and B as one folder of images: name them by their encoders
        labels = (args.encoder, args.encoder_b) if embedded else (Path(args.a).name, Path(args.b).name)
        names = (f"A ({labels[0]})", f"B ({labels[1]})")
        title = f"SPEC (K_A - K_B)/n: A = {labels[0]}, B = {labels[1]}"
        figure = plot_signed_spectrum(values, names, title=title)
        pictures["spectrum"] = save_figure(plot_dir, "compare_spectrum", figure)
        if args.images is not None:
            for side, clusters, (first, second) in (("a", clusters_a, names), ("b", clusters_b, names[::-1])):
                samples = [(torch.tensor(c["ids"]), torch.tensor(c["scores"])) for c in clusters]
                if samples:
                    labels = [f"cluster {i + 1}: {c['eigenvalue']:+.3f}" for i, c in enumerate(clusters)]
                    pictures[f"clusters_{side}"] = save_gallery(
                        plot_dir, f"compare_clusters_{side}", samples, Path(args.images), args.thumb_size,
                        labels=labels, title=f"clusters {first} groups and {second} does not",
                    )
        result["pictures"] = pictures
    return result
