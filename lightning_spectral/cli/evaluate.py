"""``lightning-spectral evaluate FILE --sigma S [--reference REF]``: Vendi / RKE diversity (FKEA) of FILE and, with
a reference, FINC novelty and the FastMMD two-sample test; with ``--prompts PROMPTS --prompt-sigma S`` (the prompt
embedding of each row) Conditional-Vendi, Information-Vendi and the prompts' Vendi (``ConditionalVendi``); streams
the files and runs under ``torchrun``."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Union

import torch

from lightning_spectral._checks import check_memory
from lightning_spectral.cli import images
from lightning_spectral.cli.pictures import as_lists
from lightning_spectral.cli.reader import EmbeddingFile, shard_rows
from lightning_spectral.cli.runtime import Session, UsageError, positive_ints, same_width
from lightning_spectral.functional.finc import DEFAULT_RHO

#: Defaults of the flags, equal to the metrics' own defaults (a test keeps them in sync).
#: ``--truncation``: t = 100 moved under 1 % from n = 1,000 to 4,000 and 2r = 2,048 to 8,192, where Vendi-1 moved 5-37 %
#: (docs/benchmarks/diversity-convergence.md "Which diversity scores converge"), and saw a class go as well as
#: Vendi-1 at fixed n and 2r.
DEFAULT_TRUNCATION = 100
DEFAULTS = {"n_frequencies": 2048, "rho": DEFAULT_RHO, "significance": 0.05, "min_eigenvalue": 1e-3, "mmd_level": 0.05}


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        parents=[common],
        help="Vendi / RKE diversity of an embedding file; with --reference also FINC novelty and FastMMD.",
        description="Diversity (FKEA Vendi of each order in --alpha; order 2 is RKE) of the embeddings in FILE, "
        "and with --reference REF the FINC novelty of FILE against REF and the FastMMD test of FILE vs REF. "
        "All metrics share one random-Fourier-feature map (--sigma, --n-frequencies, --seed).",
    )
    parser.add_argument(
        "file", metavar="FILE", nargs="?",
        help="embeddings (N, d): .npy, .pt or .safetensors; or images: a folder or a .txt list (or --input1 FILE)",
    )
    parser.add_argument("--input1", metavar="FILE", help="FILE, in torch-fidelity's spelling")
    parser.add_argument(
        "--sigma", type=parse_sigma, default="auto", help="Gaussian bandwidth, in embedding units (> 0), or 'auto' "
        "(default): 0.5 x the median distance of 2,000 rows of REF (of FILE without REF) chosen by their content; "
        "the JSON reports the sigma used, to repeat the run with that number",
    )
    parser.add_argument(
        "--reference", "--input2", metavar="REF",
        help="reference embeddings (M, d) or images: enables FINC and FastMMD (--input2 is torch-fidelity's spelling)",
    )
    parser.add_argument(
        "--n-frequencies", type=parse_frequencies, default="auto", help="r; features 2r, or 'auto' (default): "
        f"ceil(rows / 2) for the rows of FILE or REF, whichever is larger, between 64 and {DEFAULTS['n_frequencies']} "
        "(a covariance of n rows has rank <= n: a wider map adds cost, not eigenvalues)",
    )
    parser.add_argument(
        "--alpha", nargs="+", default=["1", "2"], metavar="ORDER",
        help="Vendi orders in (0, inf]; 1 = Vendi (Shannon), 2 = RKE, inf (default: 1 2)",
    )
    parser.add_argument(
        "--truncation", type=int, default=DEFAULT_TRUNCATION, metavar="T",
        help="also the T-truncated Vendi score of each order (Ospanov and Farnia, arXiv 2410.21719), the one to "
        "compare across sample sizes and widths; 0: omit it (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="frequency seed (default: %(default)s)")
    parser.add_argument(
        "--prompts", metavar="PROMPTS", help="prompt embeddings (N, d_t), row i the prompt of FILE's row i (one-hot "
        "labels allowed): adds Conditional-Vendi / RKE and Information-Vendi (ConditionalVendi)",
    )
    parser.add_argument(
        "--prompt-sigma", type=float, help="with --prompts: Gaussian bandwidth of the prompts (> 0; 0.1 for one-hot "
        "labels makes distinct labels unrelated)",
    )
    parser.add_argument(
        "--rho", type=float, help="FINC (with --reference): novelty means more than rho times as often as in the "
        f"reference (default: {DEFAULTS['rho']:g})",
    )
    parser.add_argument(
        "--significance", type=float,
        help=f"FINC (with --reference): significance level of a mode's p-value (default: {DEFAULTS['significance']})",
    )
    parser.add_argument(
        "--min-eigenvalue", type=float,
        help=f"FINC (with --reference): absolute minimum of a significant eigenvalue (default: "
        f"{DEFAULTS['min_eigenvalue']})",
    )
    parser.add_argument(
        "--mmd-level", type=float, help=f"FastMMD (with --reference): test level (default: {DEFAULTS['mmd_level']})"
    )
    parser.add_argument("--top-k", type=int, default=10, help="modes listed (and gallery rows) (default: %(default)s)")
    parser.add_argument("--per-mode", type=int, default=8, help="samples per mode (default: %(default)s)")
    parser.add_argument(
        "--missing-modes", action=argparse.BooleanOptionalAction, default=None,
        help="FINC (with --reference): also the modes FILE under-represents, C_REF - rho C_FILE (one more "
        "eigendecomposition, and a pass over REF for their samples); on by default with --reference "
        "(--no-missing-modes: off)",
    )
    parser.add_argument(
        "--mode-samples", action="store_true",
        help="list the top --per-mode sample ids of each mode (a second pass over FILE; implied by --images)",
    )
    images.add_flags(parser)
    parser.set_defaults(handler=run, prepare=prepare)


#: Flags that only mean something against a reference.
REFERENCE_FLAGS = ("rho", "significance", "min_eigenvalue", "mmd_level", "missing_modes")


def prepare(args: argparse.Namespace) -> None:
    """Before any input is read: FILE from ``--input1``, the reference-only flags refused without ``--reference``,
    their defaults filled in.

    Raises:
        UsageError: no FILE, FILE twice, or a reference-only flag without ``--reference`` (exit code 2).
    """
    if args.file is not None and args.input1 is not None:
        raise UsageError("give FILE once: as the first argument or as `--input1`, not both.")
    if args.file is None and args.input1 is None:
        raise UsageError("FILE is required: `lightning-spectral evaluate FILE` (or `--input1 FILE`).")
    args.file = args.file if args.file is not None else args.input1
    if args.missing_modes is None:  # the question a reference asks: which modes did FILE drop? On unless turned off
        args.missing_modes = args.reference is not None
    if args.reference is None:
        given = [name for name in REFERENCE_FLAGS if getattr(args, name) not in (None, False)]
        if given:
            flags = ", ".join(f"`--{name.replace('_', '-')}`" for name in given)
            raise UsageError(f"{flags} compare FILE with a reference: add `--reference REF` (or `--input2 REF`).")
    for name in REFERENCE_FLAGS[:-1]:
        if getattr(args, name) is None:
            setattr(args, name, DEFAULTS[name])


def parse_sigma(text: str) -> Union[float, str]:
    """``--sigma``: a number, or ``"auto"``.

    Examples:
        >>> parse_sigma("2.5"), parse_sigma("auto")
        (2.5, 'auto')
    """
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def parse_frequencies(text: str) -> Union[int, str]:
    """``--n-frequencies``: an integer, or ``"auto"`` (decided from the files' rows by `frequencies_for`).

    Examples:
        >>> parse_frequencies("512"), parse_frequencies("auto")
        (512, 'auto')
    """
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None


def auto_sigma(table: Any, session: Session, batch_size: int) -> float:
    """``sigma="auto"``'s rule, as the metrics apply it
    ([`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]): 0.5 x the median distance of the 2,000 rows of
    ``table`` (REF, or FILE without a reference) of smallest content hash; each rank streams its shard and keeps
    its own smallest hashes, then the ranks merge them (a collective)."""
    from lightning_spectral.metrics.auto_bandwidth import reference_bandwidth, smallest_hashes

    sketch = torch.zeros(0, table.d, dtype=torch.float64)
    for rows, _ in table.chunks(batch_size, shard_rows(table.n, session.rank, session.world_size)):
        sketch = smallest_hashes(torch.cat([sketch, rows.double()]))
    return reference_bandwidth(sketch, "evaluate --sigma")


def parse_order(text: str) -> Union[int, float, str]:
    """``"2"`` -> 2, ``"0.5"`` -> 0.5, ``"inf"`` stays a string (the library validates the value).

    Examples:
        >>> [parse_order(t) for t in ("1", "0.5", "inf")]
        [1, 0.5, 'inf']
    """
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return "inf" if value == float("inf") else value
    return text


def run(args: argparse.Namespace, session: Session) -> dict[str, Any]:
    from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi

    orders = [parse_order(text) for text in args.alpha]
    if args.truncation < 0:
        raise UsageError(f"`--truncation` must be a number of eigenvalues >= 1 (0 omits the score), got {args.truncation}.")
    device = session.device
    with session.agreed():
        files = [EmbeddingFile(args.file, "FILE")]
        if args.reference is not None:
            files.append(EmbeddingFile(args.reference, "--reference"))
        same_width(files)
        data, width = files[0], files[0].d
        images.check_images_for(args.images, data)  # a short --images list: refused before the computation
        if args.sigma == "auto":
            args.sigma = auto_sigma(files[-1], session, args.batch_size)
        if args.n_frequencies == "auto":  # the same on every rank: the files' row counts
            from lightning_spectral.kernels.width import MAX_FREQUENCIES, frequencies_for

            args.n_frequencies = frequencies_for(max(table.n for table in files), cap=MAX_FREQUENCIES)
        conditional, prompts = _conditional(args, data, orders, device)
        common = dict(n_frequencies=args.n_frequencies, seed=args.seed, in_features=width)
        finc = mmd = None
        if args.reference is not None:
            # FINC's generated side holds FILE's covariance under the same frequencies: FKEA reads it from there
            # instead of accumulating the same (2r)^2 sums a second time.
            finc_options = dict(rho=args.rho, significance=args.significance, min_eigenvalue=args.min_eigenvalue)
            finc = FINCNovelty(args.sigma, **finc_options, **common).to(device)
            mmd = FastMMD(args.sigma, **common).to(device)
            owner = finc
        else:
            vendi = FKEAVendi(args.sigma, alpha=orders, **common).to(device)
            owner = vendi
        positive_ints(args, "top_k", "per_mode", "batch_size")
        if not 0 < args.mmd_level < 1:
            raise UsageError(f"`--mmd-level` must be a test level in (0, 1), got {args.mmd_level}.")
        rows = shard_rows(data.n, session.rank, session.world_size)
        for embeddings, _ in data.chunks(args.batch_size, rows, session.progress, "evaluate FILE"):
            embeddings = embeddings.to(device)
            if finc is not None and mmd is not None:
                finc.update(embeddings, real=False)
                mmd.update(embeddings, real=False)
            else:
                vendi.update(embeddings)
        if conditional is not None:
            chunks = zip(data.chunks(args.batch_size, rows), prompts.chunks(args.batch_size, rows), strict=True)
            for (embeddings, _), (prompt_rows, _) in chunks:
                conditional.update(embeddings.to(device), prompt_rows.to(device))
        if finc is not None and mmd is not None:
            reference = files[1]
            rows = shard_rows(reference.n, session.rank, session.world_size)
            for embeddings, _ in reference.chunks(args.batch_size, rows, session.progress, "evaluate REF"):
                embeddings = embeddings.to(device)
                finc.update(embeddings, real=True)
                mmd.update(embeddings, real=True)

    # collectives from here on: every rank computes the same synced values, each metric synced once
    wants_samples = args.images is not None or args.mode_samples
    if finc is not None:  # one reading of each metric (its one collective), in the same order on every rank
        finc, mmd = finc.reading(), mmd.reading()
        owner, side = finc, finc.pooled(real=False)
    else:
        owner = owner.reading()
        side = owner.samples
    result = _report(args, session, data, files, orders, owner, side, finc, mmd, wants_samples)
    if conditional is not None:  # its own reading, after the others (the same order on every rank)
        summary = conditional.reading().summary()
        labels = dict(zip(orders, args.alpha, strict=True))
        result["inputs"]["prompts"] = prompts.describe()
        for key, name in (("", "conditional"), ("information", "information"), ("prompt_vendi", "prompt_vendi"),
                          ("se", "conditional_se"), ("information_se", "information_se"),
                          ("prompt_vendi_se", "prompt_vendi_se")):
            if key not in summary:
                continue
            values = summary[key] if isinstance(summary[key], dict) else {orders[0]: summary[key]}
            result[name] = {labels[order]: float(value) for order, value in values.items()}
    return {"verdict": verdict(result, args), **result}


def verdict(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The answer first: what differs between FILE and REF (the FastMMD test at ``--mmd-level``), which modes FILE
    misses or adds (FINC's significant modes, with their shares of their side and p-values; the missing side as the
    regions its gallery shows, where REF was streamed for them), how diverse FILE is
    (Vendi with its se); and ``line``, the same in one line (printed on stderr).

    Examples:
        >>> import argparse
        >>> args = argparse.Namespace(alpha=["1"], reference=None, file="x.npy")
        >>> verdict({"vendi": {"1": 41.2}, "vendi_se": {"1": 0.8}}, args)["line"]
        'evaluate x.npy: Vendi-1 41.2 +- 0.8'
    """
    label = str(args.alpha[0])
    vendi, se = result["vendi"][label], result.get("vendi_se", {}).get(label)
    diversity = f"Vendi-{label} {vendi:.3g}" + ("" if se is None else f" +- {se:.2g}")
    out: dict[str, Any] = {"vendi": {label: vendi}, **({"vendi_se": {label: se}} if se is not None else {})}
    if "mmd" not in result:
        out["line"] = f"evaluate {args.file}: {diversity}"
        return out
    mmd = result["mmd"]
    out["differs"], out["mmd_p_value"], out["level"] = mmd["reject"], mmd["p_value"], mmd["level"]
    parts = [f"evaluate {args.file} vs {args.reference}: " + ("differs" if mmd["reject"] else "no difference found")
             + f" (MMD p={mmd['p_value']:.2g}, level {mmd['level']:g})"]
    finc = result["finc"]
    sides = [("missing", finc["missing"]["modes"] if "missing" in finc else None), ("novel", finc.get("novel_modes"))]
    for side, rows in sides:
        if rows is None:
            out[f"{side}_modes"] = None  # not asked (--no-missing-modes)
            parts.append(f"{side}: not asked")
            continue
        found = [{"mode": i + 1, "share": row["share"], "share_se": row.get("share_se"), "p_value": row["p_value"]}
                 for i, row in enumerate(rows) if row["significant"]]
        regions = finc["missing"].get("regions") if side == "missing" else None
        if regions:  # what the gallery shows: each region's share of REF (a contrast mode's own share reads ~0)
            p_values = {m["mode"]: m["p_value"] for m in found}
            found = [{"region": i + 1, "modes": sorted({end[0] for end in region["ends"]}), "share": region["share"],
                      "share_se": region.get("share_se"),
                      "p_value": min(p_values.get(end[0], 1.0) for end in region["ends"])}
                     for i, region in enumerate(regions)]
        out[f"{side}_modes"] = found
        what = "region" if regions else "mode"
        named = ", ".join(f"{what} {m[what]} ({100 * m['share']:.0f} %, p={m['p_value']:.1g})" for m in found[:3])
        parts.append(f"{side}: " + (f"{len(found)} ({named}{', ...' if len(found) > 3 else ''})" if found else "none"))
    parts.append(diversity)
    out["line"] = " | ".join(parts)
    return out


def _conditional(args: argparse.Namespace, data: Any, orders: list, device: Any) -> tuple[Any, Any]:
    """``(ConditionalVendi, the prompts file)`` with ``--prompts``, else ``(None, None)``.

    Raises:
        UsageError: ``--prompts`` without ``--prompt-sigma`` (or the reverse), or a prompts file of another length.
    """
    if args.prompts is None:
        if args.prompt_sigma is not None:
            raise UsageError("`--prompt-sigma` belongs to `--prompts PROMPTS` (the prompt of each row of FILE).")
        return None, None
    if args.prompt_sigma is None:
        raise UsageError(
            "`--prompts` needs `--prompt-sigma` (the prompts' Gaussian bandwidth; 0.1 for one-hot labels)."
        )
    from lightning_spectral.metrics import ConditionalVendi

    prompts = EmbeddingFile(args.prompts, "--prompts")
    if prompts.n != data.n:
        raise UsageError(
            f"`--prompts` ({prompts.where}) has {prompts.n} rows and FILE ({data.where}) {data.n}: row i of both "
            "must be the same sample (one prompt per generated sample)."
        )
    positive_ints(args, "batch_size", "n_frequencies")
    # The prompts' width sets the frequencies' draw ((d + d_t) x r, float64) and every chunk read (batch x d_t):
    # both are bounded from the file's header, before any row is read.
    needed = 8 * (data.d + prompts.d) * args.n_frequencies + 4 * min(args.batch_size, prompts.n) * prompts.d
    check_memory(
        "evaluate", "--prompts", f"{prompts.where} with {prompts.d:,} columns", needed,
        f"the {data.d + prompts.d:,} x {args.n_frequencies} frequencies and a chunk of {args.batch_size} prompt rows",
        "project the prompts to fewer columns first, or lower `--n-frequencies` and `--batch-size`",
    )
    metric = ConditionalVendi(
        args.sigma, args.prompt_sigma, args.n_frequencies, alpha=orders, seed=args.seed, in_features=(data.d, prompts.d)
    )
    return metric.to(device), prompts


def _report(
    args: argparse.Namespace, session: Session, data: Any, files: list, orders: list, owner: Any, side: Any,
    finc: Any, mmd: Any, wants_samples: bool,
) -> dict[str, Any]:
    """Every number of ``evaluate`` from the metrics' readings (``owner``, ``finc``, ``mmd``; ``side``: FILE's stream
    of the owner's reading)."""
    from lightning_spectral.functional.fkea import vendi_from_spectrum, vendi_standard_errors
    from lightning_spectral.functional.modes import mode_scores, top_samples

    device = session.device
    spectrum = side.eigenvalues()  # one float64 eigvalsh gives every order and the top eigenvalues
    vectors = side.modes()[1][:, : args.top_k] if wants_samples else None  # eigenvectors only if needed
    # FKEA's Vendi of a spectrum, as FKEAVendi.compute (RKE from pairs of distinct samples: FILE's count)
    scores = vendi_from_spectrum(spectrum, orders, None, float(side.count))
    scores = scores if isinstance(scores, dict) else {orders[0]: scores}
    inputs = {"file": data.describe(), **({"reference": files[1].describe()} if len(files) > 1 else {})}
    for attribute, source in getattr(args, "_sources", {}).items():  # images: their folder, not scratch embeddings
        if attribute in inputs:
            inputs[attribute]["path"] = str(source)
    result: dict[str, Any] = {
        "inputs": inputs,
        "sigma": float(args.sigma),
        "n_frequencies": int(args.n_frequencies),  # the r used ("auto": decided from the rows)
        "vendi": {label: float(scores[order]) for label, order in zip(args.alpha, orders, strict=True)},
    }
    # the standard error of each score, from the multiplier draws of FILE's side (FKEAVendi's, or FINC's generated
    # side's), beside the n and 2r it was computed at: Vendi-1 depends on both
    noise = (finc.gen[0] if finc is not None else owner.samples).noise_sums()
    errors = vendi_standard_errors(noise, orders, None, "auto")  # float32 from 2r = 4096: an se needs no more
    errors = errors if isinstance(errors, dict) else {orders[0]: errors}
    result["vendi_se"] = {label: float(errors[order]) for label, order in zip(args.alpha, orders, strict=True)}
    if args.truncation:
        truncated = vendi_from_spectrum(spectrum, orders, args.truncation)
        truncated = truncated if isinstance(truncated, dict) else {orders[0]: truncated}
        truncated_errors = vendi_standard_errors(noise, orders, args.truncation, "auto")
        truncated_errors = truncated_errors if isinstance(truncated_errors, dict) else {orders[0]: truncated_errors}
        result["vendi_truncated"] = {
            "t": args.truncation,
            **{label: float(truncated[order]) for label, order in zip(args.alpha, orders, strict=True)},
        }
        result["vendi_truncated_se"] = {
            label: float(truncated_errors[order]) for label, order in zip(args.alpha, orders, strict=True)
        }
    result["se_draws"] = noise.draws  # the interval is score +- t(se_draws, 0.975) se
    result["n"] = int(noise.count)
    result["n_features"] = 2 * int(args.n_frequencies)
    result["modes"] = {"eigenvalues": spectrum[: args.top_k]}
    rows = shard_rows(data.n, session.rank, session.world_size)

    def batches():  # a second pass over this rank's rows of FILE, for top_samples
        for embeddings, ids in data.chunks(args.batch_size, rows, session.progress, "modes FILE"):
            yield embeddings.to(device), ids

    samples = None
    if vectors is not None:
        from lightning_spectral.functional.mode_shares import counted_shares, counting, summed_over_ranks

        feature_map, r = owner.feature_map, owner.feature_map.n_frequencies
        score, histogram = counting(lambda x: mode_scores(x, feature_map, vectors), vectors.shape[1], r)
        samples = top_samples(batches(), score, vectors.shape[1], args.per_mode)
        result["modes"]["top_samples"] = as_lists(samples, spectrum)
        result["modes"]["shares"] = counted_shares(summed_over_ranks(histogram), samples, r).tolist()
    novel_samples = novel_spectrum = missing_samples = None
    if finc is not None and mmd is not None:
        result["finc"], novel_samples, novel_spectrum = _finc(finc, args, batches)
        result["mmd"] = _mmd(mmd, args.mmd_level)
        missing_samples = _missing_samples(args, session, finc, files[1], result["finc"])
        _name_samples(args, result["finc"], novel_samples, missing_samples)
    if session.is_main and args.plot_dir is not None:
        novel = None if novel_spectrum is None else (novel_spectrum, result["finc"]["threshold"])
        result["pictures"] = _pictures(args, result, spectrum, novel, samples, novel_samples)
        if missing_samples is not None and getattr(args, "_lists", {}).get("reference") is not None:
            result["pictures"]["missing_modes"] = _missing_gallery(args, result["finc"]["missing"], missing_samples)
    return result


def _missing_samples(args: argparse.Namespace, session: Session, finc: Any, reference: Any, finc_result: dict) -> Any:
    """The reference images of the significant missing modes (a second pass over REF), when REF is images and
    ``--missing-modes`` and ``--plot-dir`` are given; else ``None``. A collective."""
    if not args.missing_modes:
        return None
    count = int(sum(bool(flag) for flag in finc_result["missing"]["significant"]))
    if count == 0:
        return None
    rows = shard_rows(reference.n, session.rank, session.world_size)
    batches = (
        (embeddings.to(session.device), ids)
        for embeddings, ids in reference.chunks(args.batch_size, rows, session.progress, "missing modes REF")
    )
    return finc.grouped_modes(batches, k=count, per_mode=args.per_mode, missing=True)  # split modes as one region


def _missing_gallery(args: argparse.Namespace, missing: dict, samples: Any) -> str:
    from lightning_spectral.cli.pictures import save_gallery
    from lightning_spectral.functional.mode_groups import region_detail
    from lightning_spectral.functional.mode_shares import ModeRow

    total, regions, first_rows = missing["n_significant"], samples.groups, samples.region_of(1)
    labels = [
        ModeRow("missing", i, float(share), "reference", region_detail(group, samples.modes, first_rows),
                unit="region").line()
        for i, (group, share) in enumerate(zip(regions, samples.shares, strict=True))
    ]
    title = f"{plural(total, 'significant missing mode')} of FILE: REF images ({images.source_name(args, 'reference')})"
    shown = len(samples.mode_samples)
    title += f", {shown} shown" if shown != total else ""
    title += f" in {plural(len(regions), 'region')}"  # the rows: the modes' regions (the numbering of the labels)
    return save_gallery(
        Path(args.plot_dir), "evaluate_missing_modes", samples.samples, Path(args._lists["reference"]),
        args.thumb_size, labels=labels, title=title,
    )


def plural(count: int, noun: str) -> str:
    """``"1 mode"``, ``"3 modes"``.

    Examples:
        >>> plural(1, "significant novel mode"), plural(2, "mode")
        ('1 significant novel mode', '2 modes')
    """
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _finc(finc: Any, args: argparse.Namespace, batches: Any) -> tuple[dict[str, Any], Any, Any]:
    """FINC results; the calls are ordered so that each side's eigendecomposition is computed once (cached).
    The top samples of the novel modes come from a second pass over FILE when one is significant (or when asked)."""
    novelty, threshold = float(finc.value), finc.threshold()
    novel = finc.novel_modes(max(args.top_k, 50))  # 50 for the plot
    wanted = args.images is not None or args.mode_samples or bool(novel.significant.any())
    samples = finc.top_samples(batches(), k=args.top_k, per_mode=args.per_mode) if wanted else None
    novel_se = finc.standard_errors(missing=False)
    result = {
        "novelty": novelty,
        "novelty_se": float(novel_se),
        "threshold": threshold,
        "n_significant": int(novel.significant.sum()),
        "novel_eigenvalues": novel.eigenvalues[: args.top_k],
        "significant": novel.significant[: args.top_k],
        "p_values": novel.p_values[: args.top_k],
        # each significant mode's share of FILE's samples, from the sums (null for a mode that is not one)
        "shares": _significant_only(finc.mode_shares(args.top_k), novel.significant),
        "shares_se": _significant_only(finc.mode_share_standard_errors(args.top_k), novel.significant),
    }
    if args.missing_modes:  # C_REF - rho C_FILE: one more eigendecomposition
        missing = finc.missing_modes(args.top_k)
        result["missing"] = {
            "score": float(finc.missing_score()),
            "se": float(finc.standard_errors(missing=True)),
            "threshold": finc.threshold(missing=True),
            "n_significant": int(missing.significant.sum()),
            "eigenvalues": missing.eigenvalues,
            "significant": missing.significant,
            "p_values": missing.p_values,
            "shares": _significant_only(finc.mode_shares(args.top_k, missing=True), missing.significant),  # of REF's
            "shares_se": _significant_only(finc.mode_share_standard_errors(args.top_k, missing=True),
                                           missing.significant),
        }
    if samples is not None:
        result["top_samples"] = as_lists(samples, novel.eigenvalues)
    return result, samples, novel.eigenvalues


def _finite_or_none(value: Any) -> Any:
    """``value`` as a float, or ``None`` (JSON null) where there is none or it is not finite: never a "nan" string."""
    return None if value is None or not math.isfinite(float(value)) else float(value)


def _significant_only(values: Any, significant: Any) -> list:
    """``values`` (k,) as a list with ``None`` (JSON null) where the mode is not significant or the value is not
    finite: a share of what is no mode is no number a person should read."""
    flags = [bool(flag) for flag in significant[: len(values)]]
    return [_finite_or_none(value) if flag else None
            for value, flag in zip(values.tolist(), flags + [False] * (len(values) - len(flags)))]


def _name_samples(args: argparse.Namespace, finc: dict, novel: Any, missing: Any) -> None:
    """``finc["novel_modes"]`` / ``finc["missing"]["modes"]``: per mode its eigenvalue, p-value, significance,
    region (significant missing modes), share of its side's samples and top samples, named by image path (image
    inputs, or FILE with ``--images``) or by row id (embedding inputs)."""
    lists = getattr(args, "_lists", {})
    file_list = lists.get("file", args.images)
    finc["novel_modes"] = _modes_json(finc["novel_eigenvalues"], finc["p_values"], finc["significant"],
                                      finc["shares"], novel, file_list, finc.get("shares_se"))
    if "missing" in finc:
        part = finc["missing"]
        if missing is not None:  # a mode in a region reads the region's share: the one number its gallery row shows
            errors = missing.shares_se if missing.shares_se is not None else [None] * len(missing.groups)
            for mode, region in enumerate(missing.region_of()):
                if region is not None and mode < len(part["shares"]):
                    part["shares"][mode] = float(missing.shares[region])
                    part["shares_se"][mode] = _finite_or_none(errors[region])
        part["modes"] = _modes_json(part["eigenvalues"], part["p_values"], part["significant"], part["shares"],
                                    None if missing is None else missing.mode_samples, lists.get("reference"),
                                    part.get("shares_se"))
        if missing is not None:  # the significant modes' regions: both ends, split modes as one (mode_groups)
            for mode, (region, other) in enumerate(zip(missing.region_of(), missing.region_of(-1), strict=True)):
                part["modes"][mode]["region"] = region
                if other is not None:
                    part["modes"][mode]["other_end_region"] = other
            part["n_regions"] = len(missing.groups)
            part["regions"] = _regions_json(missing, lists.get("reference"))


def _regions_json(grouped: Any, listing: Any) -> list:
    """Per region of the significant missing modes: its mode ends (1-based mode, ``+1`` / ``-1`` end), share of the
    reference with its standard error, and top samples (image paths or row ids) with their scores on the leading
    end."""
    from lightning_spectral.cli.pictures import image_paths

    regions = []
    errors = grouped.shares_se if grouped.shares_se is not None else [None] * len(grouped.groups)
    for group, (ids, scores), share, se in zip(grouped.groups, grouped.samples, grouped.shares, errors, strict=True):
        se = _finite_or_none(se)
        ids = [int(i) for i in ids.tolist()]
        paths = image_paths(Path(listing), ids) if listing is not None else None
        regions.append({
            "ends": [[end.mode + 1, end.sign] for end in group],
            "share": float(share),
            "share_se": se,
            "samples": [str(paths[i]) for i in ids] if paths is not None else ids,
            "scores": scores.double().tolist(),
        })
    return regions


def _modes_json(
    values: Any, p_values: Any, significant: Any, shares: Any, samples: Any, listing: Any, shares_se: Any = None
) -> list:
    from lightning_spectral.cli.pictures import image_paths

    rows = []
    for mode in range(len(values)):
        row = {"eigenvalue": float(values[mode]), "p_value": float(p_values[mode]),
               "significant": bool(significant[mode]), "share": shares[mode]}
        if shares_se is not None:
            row["share_se"] = shares_se[mode]
        if samples is not None and mode < len(samples):
            ids, scores = samples[mode]
            ids = [int(i) for i in ids.tolist()]
            paths = image_paths(Path(listing), ids) if listing is not None else None
            row["samples"] = [str(paths[i]) for i in ids] if paths is not None else ids
            row["scores"] = scores.double().tolist()
        rows.append(row)
    return rows


def _mmd(mmd: Any, level: float) -> dict[str, Any]:
    test = mmd.test(level=level)
    return {
        "mmd2": float(mmd.value),
        "se": float(mmd.standard_error()),  # the sampling noise of MMD^2 at these sizes (interval +- 1.96 se)
        "n": int(mmd.gen.count),
        "n_real": int(mmd.real.count),
        "n_features": 2 * int(mmd.n_frequencies),
        "mmd2_biased": float(test.statistic),
        "p_value": float(test.p_value),
        "reject": bool(test.reject),
        "level": level,
    }


def _pictures(args: argparse.Namespace, result: dict[str, Any], spectrum: Any, novel: Any, samples: Any,
              novel_samples: Any) -> dict[str, str]:
    from lightning_spectral.cli.pictures import save_gallery, save_spectrum

    plot_dir, pictures = Path(args.plot_dir), {}
    name = images.source_name(args, "file")
    pictures["spectrum"] = save_spectrum(plot_dir, "evaluate_spectrum", spectrum, f"FKEA eigen-spectrum of {name}")
    if novel is not None:
        count = result["finc"]["n_significant"]
        title = f"FINC: C_FILE - {args.rho:g} C_REF ({count} significant)"
        pictures["novel_spectrum"] = save_spectrum(plot_dir, "evaluate_novel_spectrum", novel[0], title, novel[1])
    if args.images is not None:
        image_list = Path(args.images)
        from lightning_spectral.functional.mode_shares import ModeRow

        shares = result["modes"]["shares"]
        labels = [ModeRow("", i, float(shares[i]), "samples", f"(eigenvalue {float(v):.3g})").line()
                  for i, v in enumerate(spectrum[: len(samples)])]
        title = f"top {len(samples)} modes of FILE ({name}), best samples first"
        pictures["modes"] = save_gallery(
            plot_dir, "evaluate_modes", samples, image_list, args.thumb_size, labels=labels, title=title
        )
        if novel_samples is not None:
            finc = result["finc"]
            significant = [bool(flag) for flag in finc["significant"]][: len(novel_samples)]
            rows = [row for row, flag in zip(novel_samples, significant, strict=True) if flag]
            if rows:  # only significant novel modes are shown: the others are noise
                from lightning_spectral.functional.mode_shares import mode_line

                total, shares = finc["n_significant"], finc["shares"]
                labels = [mode_line("novel", i, float(shares[i]), "generated samples") for i in range(len(rows))]
                title = f"{plural(total, 'significant novel mode')} of FILE vs REF" + (
                    f", {len(rows)} shown" if len(rows) != total else ""
                )
                pictures["novel_modes"] = save_gallery(
                    plot_dir, "evaluate_novel_modes", rows, image_list, args.thumb_size, labels=labels, title=title
                )
    return pictures
