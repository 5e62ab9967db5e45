"""Images where the command line takes embeddings: a folder of images (searched recursively) or a ``.txt`` list of
image paths, embedded by ``--encoder`` before the subcommand runs.

Every input of ``evaluate`` (FILE, ``--reference``), ``ood`` (TRAIN, TEST, ``--calibrate``, ``--ood``) and ``compare``
(A and B: one folder given twice, embedded by ``--encoder`` and ``--encoder-b``) may be
images. Before any image is decoded, each source is listed and every file's header is read, so a missing folder,
an empty one, a missing or unreadable image and a short ``--images`` list are refused first, named. Then each
source is embedded (this rank's contiguous share under ``torchrun``, gathered in file order) into a ``.npy`` that
the subcommand streams like any embedding file; ``--save-features DIR`` keeps them (``DIR/<input>.npy`` and the
image list ``DIR/<input>.images.txt``, line i = row i) so the next run reads embeddings instead. The galleries of
the measured input (FILE, TEST) show its images without ``--images``.

Images are read as RGB, their shorter side resized to the encoder's input size and centre-cropped (torchvision's
``Resize`` + ``CenterCrop``, the eval transform torchmetrics' and timm's extractors use); the encoder then applies
its own normalisation (`encoders.extractors`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from lightning_spectral._checks import check_memory
from lightning_spectral.cli.runtime import Session, UsageError
from lightning_spectral.io.images import open_rgb, opened
from lightning_spectral.io.text_lists import list_lines, read_list

#: Image files a folder source picks up (lower-case suffixes).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
#: Inputs that take embeddings, per subcommand: (argument attribute, the name errors use).
INPUTS = {
    "evaluate": (("file", "FILE"), ("reference", "--reference")),
    "ood": (("train", "TRAIN"), ("test", "TEST"), ("calibrate", "--calibrate"), ("ood", "--ood")),
    "compare": (("a", "A"), ("b", "B")),  # the same images, embedded by --encoder (A) and --encoder-b (B)
}
#: The input whose rows the galleries show, per subcommand.
GALLERY_INPUT = {"evaluate": "file", "ood": "test", "compare": "a"}
#: Default pooled size of ``--encoder pixels`` and the size images are read at for it.
PIXELS_SIZE, PIXELS_READ = 16, 64


def add_flags(parser: argparse.ArgumentParser, second: bool = False) -> None:
    """The image flags of a subcommand whose inputs may be images (``second``: ``--encoder-b`` / ``--weights-b``
    for ``compare``'s B)."""
    group = parser.add_argument_group("images instead of embeddings (an input that is a folder or a .txt list)")
    group.add_argument(
        "--encoder", default=None, metavar="NAME",
        help="how image inputs are embedded: 'pixels' or 'pixels:SIZE' (grey pixels pooled to SIZE x SIZE, centred; "
        f"weight-free, default size {PIXELS_SIZE}), 'clip:ARCH' (an open_clip image tower, e.g. clip:ViT-B-32) or "
        "'timm:ARCH' (e.g. timm:vit_small_patch14_dinov2); clip and timm take --weights (default: pixels)",
    )
    group.add_argument(
        "--weights", metavar="FILE", help="local weights of a clip: or timm: encoder (.safetensors, .pt, .pth, .bin); "
        "without them the network is randomly initialised (a warning says so)",
    )
    if second:
        group.add_argument("--encoder-b", metavar="NAME", help="how B is embedded when A and B are the same images")
        group.add_argument("--weights-b", metavar="FILE", help="local weights of --encoder-b")
    group.add_argument(
        "--image-batch-size", type=int, default=64, help="images embedded per batch (default: %(default)s)"
    )
    group.add_argument(
        "--save-features", metavar="DIR", help="keep the embeddings of image inputs: DIR/<input>.npy and "
        "DIR/<input>.images.txt (pass them next time instead of the images)",
    )


def is_image_source(path: Any) -> bool:
    """Whether an input names images: a folder (a path without suffix that does not exist is taken for a missing
    folder), or a ``.txt`` file (a list of image paths)."""
    if not isinstance(path, str):
        return False
    where = Path(path).expanduser()
    missing_folder = not where.exists() and (where.suffix == "" or path.endswith(("/", os.sep)))
    return where.is_dir() or path.lower().endswith(".txt") or missing_folder


def list_images(source: str, name: str) -> list[Path]:
    """The image files of ``source``: a folder (recursively, sorted by path, suffixes `IMAGE_SUFFIXES`) or a
    ``.txt`` list (one path a line, relative to the list's folder; blank lines are refused, line i is sample i).
    Each file's header is read (no pixel is decoded).

    Raises:
        FileNotFoundError / ValueError: a missing source, no image in it, a missing or unreadable image; the
            message names the input ``name`` and the file.
    """
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(  # hidden files (macOS's ._name resource forks) are not images
            p for p in path.rglob("*")
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
        )
        if not files:
            raise ValueError(
                f"`{name}`: the folder {source!r} holds no image ({', '.join(IMAGE_SUFFIXES)}, searched recursively)."
            )
    elif path.suffix.lower() == ".txt":
        if not path.is_file():
            raise FileNotFoundError(f"`{name}`: no list file at {source!r}; pass a folder or a .txt of image paths.")
        files = []
        for number, line in enumerate(read_list(path, name).splitlines(), start=1):
            if not line.strip():
                raise ValueError(f"`{name}`: line {number} of {source!r} is blank; list one image path per line.")
            item = Path(line.strip()).expanduser()
            files.append(item if item.is_absolute() else path.parent / item)
        if not files:
            raise ValueError(f"`{name}`: the list {source!r} is empty; list one image path per line.")
    else:
        raise FileNotFoundError(f"`{name}`: no folder at {source!r}.")
    _check_readable(files, name)
    return files


def _check_readable(files: Sequence[Path], name: str) -> None:
    """Open each image's header with PIL; raise naming the first file that is missing or not an image."""
    from PIL import UnidentifiedImageError

    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"`{name}`: no image at {str(file)!r}.")
        try:
            with opened(file, name) as image:  # an image over PIL's decompression-bomb limit: refused here, named
                image.size  # noqa: B018 - the header is parsed here
        except (UnidentifiedImageError, OSError) as error:
            raise ValueError(f"`{name}`: cannot read the image {str(file)!r} ({error}).") from None


def count_lines(list_file: str) -> int:
    """Lines of an ``--images`` list (its last line may lack a newline)."""
    path = Path(list_file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"`--images`: no file at {list_file!r}; pass a text file, one image path a line.")
    return sum(1 for _ in list_lines(path, "--images"))


def _check_image_list(list_file: Optional[str], rows: int, ids_max: Optional[int], name: str) -> None:
    """Refuse, before any work, an ``--images`` list too short for the input ``name`` it illustrates (``rows``
    samples, dataset ids up to ``ids_max`` when the input stores them)."""
    if list_file is None:
        return
    lines, needed = count_lines(list_file), (rows if ids_max is None else ids_max + 1)
    if lines < needed:
        raise ValueError(
            f"`--images` ({list_file!r}) has {lines} lines but `{name}` has {needed} samples; it must list one image "
            "per sample of " + name + " (line i = sample i)."
        )


def check_images_for(list_file: Optional[str], table: Any) -> None:
    """`_check_image_list` for an opened embedding file (its rows, or its stored dataset ids)."""
    if list_file is None:
        return
    ids_max = None if table.index is None else int(table.index.max()) if table.n else 0
    _check_image_list(list_file, table.n, ids_max, table.name)


def build_encoder(spec: str, weights: Optional[str], batch_size: int = 1) -> tuple[torch.nn.Module, int]:
    """The frozen extractor ``--encoder`` names and the side images are read at (``batch_size`` images are read at
    a time: ``pixels:SIZE`` is refused when a batch of them cannot fit in memory).

    Raises:
        UsageError: an unknown encoder, a bad size, or ``--weights`` with ``pixels``.
        ValueError: a pixel size whose batches of images cannot fit in memory, naming ``--encoder``.
    """
    from lightning_spectral.encoders import ClipImageFeature, PixelImageFeature, TimmImageFeature

    kind, _, name = spec.partition(":")
    if kind == "pixels":
        if weights is not None:
            raise UsageError("`--weights`: the pixels encoder has no weights; use `--encoder clip:ARCH` or timm:ARCH.")
        size = int(name) if name.isdecimal() and name.isascii() else 0 if name else PIXELS_SIZE
        if size < 1:
            raise UsageError(
                f"`--encoder {spec}`: the pixel size must be an integer >= 1 written in digits, got {name!r}; e.g. "
                "pixels:16."
            )
        side = max(PIXELS_READ, size)
        # per image read at `side`: uint8 RGB, its float32 copy, the stacked batch, the float32 grey the encoder pools
        needed = batch_size * side * side * (3 + 12 + 12 + 4)
        check_memory(
            "image inputs", "--encoder", spec, needed, f"{batch_size} images read at {side} x {side} pixels",
            f"use a smaller pixel size, e.g. `--encoder pixels:{PIXELS_SIZE}`, or a smaller `--image-batch-size`",
        )
        return PixelImageFeature(size=size), side
    if kind in ("clip", "timm") and name:
        if weights is not None and not Path(weights).expanduser().is_file():
            raise FileNotFoundError(f"`--weights`: no file at {weights!r}.")
        encoder = ClipImageFeature(name, pretrained=weights) if kind == "clip" else TimmImageFeature(name, weights)
        size = encoder.size or (224, 224)
        return encoder, int(max(size))
    raise UsageError(
        f"`--encoder` must be 'pixels', 'pixels:SIZE', 'clip:ARCH' or 'timm:ARCH', got {spec!r}."
    )


def read_images(files: Sequence[Path], size: int) -> Tensor:
    """Images (N, 3, size, size) in [0, 1]: RGB, shorter side resized to ``size`` (bilinear), centre-cropped."""
    from torchvision.transforms import functional as F

    batch = []
    for file in files:
        try:
            picture = F.center_crop(F.resize(F.pil_to_tensor(open_rgb(file)), size, antialias=True), size)
        except OSError as error:
            raise ValueError(f"cannot decode the image {str(file)!r} ({error}).") from None
        batch.append(picture.float() / 255.0)
    return torch.stack(batch)


def embed(files: Sequence[Path], encoder: torch.nn.Module, size: int, batch_size: int, session: Session,
          label: str) -> Tensor:
    """Embeddings (N, d) float32 of ``files`` in their order: each rank embeds its contiguous share, gathered."""
    from lightning_spectral.cli.reader import shard_rows
    from lightning_spectral.sync.collectives import all_gather_rows

    rows = shard_rows(len(files), session.rank, session.world_size)
    starts = range(rows.start, rows.stop, batch_size)
    bar = None
    if session.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(rows), desc=f"embed {label}", unit="img", file=sys.stderr)
    parts = []
    with session.agreed():
        for start in starts:
            chunk = files[start : min(start + batch_size, rows.stop)]
            parts.append(encoder(read_images(chunk, size).to(session.device)).float().cpu())
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    if not parts:  # a rank with no image (fewer images than ranks) still joins the gather with its width
        width = encoder(torch.zeros(1, 3, size, size, device=session.device)).shape[1]
        parts.append(torch.zeros(0, width))
    return all_gather_rows(torch.cat(parts).to(session.device)).cpu()


def _save(path: Path, embeddings: Tensor, files: Sequence[Path]) -> None:
    from lightning_spectral.io.writing import written

    with written(path, "--save-features") as temporary, open(temporary, "wb") as handle:
        np.save(handle, embeddings.numpy(), allow_pickle=False)
    listing = path.with_suffix(".images.txt")
    with written(listing, "--save-features") as temporary:
        temporary.write_text("".join(f"{file.resolve()}\n" for file in files), encoding="utf-8")


def resolve(args: argparse.Namespace, session: Session) -> dict[str, Any]:
    """Embed every image input of the subcommand and point its argument at the embeddings; returns what was
    embedded (for the JSON output). A no-op for inputs that are embedding files."""
    sources = [
        (attribute, name, getattr(args, attribute))
        for attribute, name in INPUTS.get(args.command, ())
        if is_image_source(getattr(args, attribute, None))
    ]
    if not sources:
        for flag in ("encoder", "weights", "save_features", "encoder_b", "weights_b"):
            if getattr(args, flag, None) is not None:
                raise UsageError(f"`--{flag.replace('_', '-')}` applies to image inputs (a folder or a .txt list).")
        return {}
    if args.encoder is None:
        args.encoder = "pixels"
    with session.agreed():  # every argument checked before the first image is decoded
        listed = {attribute: list_images(source, name) for attribute, name, source in sources}
        gallery = GALLERY_INPUT.get(args.command)
        if args.image_batch_size < 1:
            raise UsageError(f"`--image-batch-size` must be an integer >= 1, got {args.image_batch_size}.")
        if args.images is not None and gallery in listed:
            _check_image_list(args.images, len(listed[gallery]), None, dict((a, n) for a, n, _ in sources)[gallery])
        if args.save_features is not None:
            from lightning_spectral.io.writing import check_writable

            check_writable(args.save_features, "--save-features", folder=True)
        specs = {attribute: _encoder_of(args, attribute) for attribute, _, _ in sources}
        if args.command == "compare":
            _same_images(listed, specs)
        built = {spec: build_encoder(*spec, args.image_batch_size) for spec in dict.fromkeys(specs.values())}
        encoders = {spec: (encoder.to(session.device), size) for spec, (encoder, size) in built.items()}
    folder = Path(args.save_features).expanduser() if args.save_features is not None else None
    scratch = Path(tempfile.mkdtemp(prefix="lightning-spectral-"))
    args._scratch = scratch  # removed by main() at exit
    report: dict[str, Any] = {}
    for attribute, name, source in sources:
        files = listed[attribute]
        encoder, size = encoders[specs[attribute]]
        embeddings = embed(files, encoder, size, args.image_batch_size, session, name)
        target = (folder if folder is not None and session.is_main else scratch) / f"{attribute}.npy"
        if folder is not None and session.is_main:
            _save(target, embeddings, files)
        else:
            np.save(target, embeddings.numpy(), allow_pickle=False)
            (scratch / f"{attribute}.images.txt").write_text("".join(f"{f.resolve()}\n" for f in files), "utf-8")
        args._sources = {**getattr(args, "_sources", {}), attribute: source}  # pictures name the images' source
        args._lists = {**getattr(args, "_lists", {}), attribute: str(target.with_suffix(".images.txt"))}
        setattr(args, attribute, str(target))
        report[attribute] = {"source": source, "images": len(files)}
        if folder is not None and session.is_main:  # the temporary embeddings are deleted at exit: not reported
            report[attribute]["features"] = str(target)
        if attribute == gallery and args.images is None and args.plot_dir is not None:  # galleries of these images
            args.images = str(target.with_suffix(".images.txt"))
    report["encoder"] = args.encoder
    if args.command == "compare":
        report["encoder_b"] = specs["b"][0] if "b" in specs else None
    return report


def _encoder_of(args: argparse.Namespace, attribute: str) -> tuple[str, Optional[str]]:
    """``(--encoder, --weights)`` of an input; ``compare``'s B takes ``--encoder-b`` / ``--weights-b``."""
    if attribute == "b":
        if getattr(args, "encoder_b", None) is None:
            raise UsageError(
                "`B` is images: pass `--encoder-b` (and `--weights-b`), the second embedding SPEC compares with A's "
                "`--encoder`; one encoder would give the same embedding twice."
            )
        return args.encoder_b, args.weights_b
    return args.encoder, args.weights


def _same_images(listed: dict[str, list[Path]], specs: dict[str, tuple[str, Optional[str]]]) -> None:
    """``compare`` on images: A and B are two embeddings of the same images, by two different encoders."""
    if set(listed) != {"a", "b"}:
        raise UsageError("`compare`: give A and B both as images (the same folder or list) or both as embeddings.")
    if [p.resolve() for p in listed["a"]] != [p.resolve() for p in listed["b"]]:
        raise ValueError(
            f"`A` and `B` list different images ({len(listed['a'])} and {len(listed['b'])}); SPEC compares two "
            "embeddings of the SAME images: pass one folder (or list) twice, with `--encoder` and `--encoder-b`."
        )
    if specs["a"] == specs["b"]:
        raise UsageError("`--encoder-b` equals `--encoder` (and its weights): A and B would be the same embedding.")


def source_name(args: argparse.Namespace, attribute: str) -> str:
    """The name of input ``attribute`` as the user gave it (an image folder's name, not its embeddings')."""
    return Path(getattr(args, "_sources", {}).get(attribute, getattr(args, attribute))).name


def remove_scratch(args: argparse.Namespace) -> None:
    """Delete the temporary embeddings of image inputs."""
    import shutil

    scratch = getattr(args, "_scratch", None)
    if scratch is not None and os.path.isdir(scratch):
        shutil.rmtree(scratch, ignore_errors=True)
