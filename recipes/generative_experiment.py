# ruff: noqa: E402 - os.environ is set before the imports that load torch
"""Which modes does a generative model drop? A VAE on 8x8 digits, measured with FKEA, FINC, FastMMD and KID.

Two runs per seed, identical except for the training stream:

- ``normal``: a ``DigitsVAE`` (``digits_vae.py`` beside this script) trained on every digit;
- ``collapse``: the same, but the digits ``--drop`` leave the training stream from epoch ``--drop-after`` on,
  so the model forgets them.

After training, ``--n-generated`` samples of each model go through a frozen, weight-free extractor (the
pixels: ``PixelEncoder(size=8)``) and are compared with the training split (every digit) as reference:

- FKEA Vendi-1 and RKE of the samples: how many modes they hold;
- FINC at ``--rho``: the significant missing modes (``C_ref - rho C_gen``) and novel modes
  (``C_gen - rho C_ref``), which digits the top real samples of each missing mode show, and the *purity*: the
  share of the top ``--per-mode`` real samples of the ``len(--drop)`` top missing modes that are dropped digits;
  the counts at rho = 1 are printed beside them;
- the FastMMD two-sample test against the held-out digits (the p-value);
- torchmetrics' KID with the same extractor against the training split: one number (mean and std).

Bandwidth: ``sigma = --sigma-factor x`` the median pairwise distance of the training split's embeddings
(0.5 as in ``recipes/digits_diversity.py``, where Vendi grows with every added digit class). ``rho = 2``: a
mode counts when the model makes it more than twice as often as the data (novel) or less than half as often
(missing); at rho = 1 FINC also flags the few per cent of blurred digits that every VAE tried here makes
in excess (docs/benchmarks/generative-recipe.md, "Why rho = 2").

    python recipes/generative_experiment.py [--seeds 0 1 2] [--epochs 100] [--drop 3 7] [--drop-after 30]

Results and the reasons for the defaults: docs/benchmarks/generative-recipe.md.
"""

from __future__ import annotations

import os

# OpenMP threads that wait passively: with active waiting (OpenMP's default) a run sharing its cores with other
# processes ran 10x slower (the generative recipe: 14 s instead of 1 s an epoch, 2 cores). Set before torch loads
# OpenMP; an OMP_WAIT_POLICY of your own wins. The Makefile does the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import time
from collections.abc import Sequence
from typing import Any, Optional

import lightning as L
import torch
from digits_vae import DigitsVAE
from torch import Tensor
from torch.utils.data import DataLoader
from torchmetrics.image.kid import KernelInceptionDistance

from lightning_spectral.callbacks import StderrProgressBar
from lightning_spectral.data import DigitsImages
from lightning_spectral.encoders import PixelEncoder
from lightning_spectral.kernels import median_bandwidth
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi


def train(args: argparse.Namespace, seed: int, drop: Sequence[int]) -> tuple[DigitsVAE, DigitsImages]:
    """A VAE trained for ``args.epochs`` epochs on the digits, without ``drop`` from ``args.drop_after`` on."""
    L.seed_everything(seed, verbose=False)
    data = DigitsImages(batch_size=args.batch_size, seed=seed, drop_classes=drop, drop_after_epoch=args.drop_after)
    model = DigitsVAE(hidden=args.hidden, n_components=args.n_components, beta=args.beta)
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        deterministic=True,
        logger=False,
        enable_checkpointing=False,
        callbacks=[StderrProgressBar()],  # progress on stderr; stdout keeps the table
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=data)
    return model.eval(), data


def images_of(loader: DataLoader) -> tuple[Tensor, Tensor, Tensor]:
    """Images, dataset indices and labels of every batch of ``loader``, concatenated."""
    batches = list(loader)
    return tuple(torch.cat([batch[key] for batch in batches]) for key in ("image", "index", "label"))


def finc(sigma: float, rho: float, real: Tensor, generated: Tensor, args: argparse.Namespace, seed: int) -> FINCNovelty:
    """FINC of ``generated`` against the reference ``real`` (embeddings)."""
    metric = FINCNovelty(sigma, args.n_frequencies, rho=rho, seed=seed, min_eigenvalue=args.min_eigenvalue)
    metric.update(real, real=True)
    metric.update(generated, real=False)
    return metric


def measure(model: DigitsVAE, data: DigitsImages, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Every number of one row of the table, for one trained model."""
    encoder = PixelEncoder(size=8)
    real_images, real_ids, real_labels = images_of(data.reference_dataloader())
    held_out_images, _, _ = images_of(data.val_dataloader())
    images = model.sample(args.n_generated, generator=torch.Generator().manual_seed(seed))
    real, generated = encoder(real_images), encoder(images)
    sigma = args.sigma_factor * median_bandwidth(real, seed=seed)

    vendi = FKEAVendi(sigma, args.n_frequencies, alpha=[1, 2], seed=seed)
    vendi.update(generated)
    scores = vendi.compute()

    novelty = finc(sigma, args.rho, real, generated, args, seed)
    missing, novel = novelty.reading().missing_modes(args.k), novelty.reading().novel_modes(args.k)
    batches = [(real[i : i + 256], real_ids[i : i + 256]) for i in range(0, len(real), 256)]
    top = novelty.reading().top_samples(batches, k=args.k, per_mode=args.per_mode, missing=True)
    label_of = dict(zip(real_ids.tolist(), real_labels.tolist()))
    top_labels = [torch.tensor([label_of[i] for i in ids.tolist()]) for ids, _ in top]
    n_top = max(len(args.drop), 1)
    purity = torch.isin(torch.cat(top_labels[:n_top]), torch.tensor(args.drop)).float().mean()
    named = [majority(labels) for labels, significant in zip(top_labels, missing.significant) if significant]
    at_one = finc(sigma, 1.0, real, generated, args, seed)

    mmd = FastMMD(sigma, args.n_frequencies, seed=seed)
    mmd.update(encoder(held_out_images), real=True)
    mmd.update(generated, real=False)

    torch.manual_seed(seed)  # KID draws its subsets from the global generator
    kid = KernelInceptionDistance(feature=encoder, subsets=args.kid_subsets, subset_size=args.kid_subset_size)
    kid.update(real_images, real=True)  # a custom `feature` module receives the images as they are
    kid.update(images, real=False)
    kid_mean, kid_std = kid.compute()
    return {
        "vendi": float(scores[1]),
        "rke": float(scores[2]),
        "missing": int(missing.significant.sum()),
        "novel": int(novel.significant.sum()),
        "top_missing_significant": bool(missing.significant[:n_top].all()),
        "top_missing": float(missing.eigenvalues[0]),
        "top_novel": float(novel.eigenvalues[0]),
        "thresholds": (novelty.reading().threshold(missing=True), novelty.reading().threshold()),
        "named": named,
        "purity": float(purity),
        "rho1": tuple(int(modes(args.k).significant.sum()) for modes in (at_one.reading().missing_modes, at_one.reading().novel_modes)),
        "mmd_p": float(mmd.reading().test().p_value),
        "kid": (float(kid_mean), float(kid_std)),
        "sigma": sigma,
    }


def majority(labels: Tensor) -> str:
    """``"3 (19/20)"``: the most frequent digit among a mode's top samples."""
    counts = torch.bincount(labels, minlength=10)
    return f"{int(counts.argmax())} ({int(counts.max())}/{len(labels)})"


HEADER = (
    f"{'seed':>4} {'config':<8} | {'Vendi-1':>7} {'RKE':>6} | {'miss':>4} {'novel':>5} {'top miss/thr':>13} "
    f"{'top nov/thr':>13} {'purity':>6}  {'missing modes show':<22} | {'rho=1 m/n':>9} | {'MMD p':>8} | "
    f"{'KID mean':>9} {'KID std':>8} | {'train s':>7} {'eval s':>6} {'cpu s':>6}"
)


def row_text(seed: int, name: str, row: dict[str, Any], times: tuple[float, float, float]) -> str:
    named = ", ".join(row["named"][:3]) + (" ..." if len(row["named"]) > 3 else "")
    purity = f"{row['purity']:>6.2f}" if name == "collapse" else f"{'-':>6}"
    return (
        f"{seed:>4} {name:<8} | {row['vendi']:>7.2f} {row['rke']:>6.2f} | {row['missing']:>4} {row['novel']:>5} "
        f"{row['top_missing']:.4f}/{row['thresholds'][0]:.4f} {row['top_novel']:.4f}/{row['thresholds'][1]:.4f} "
        f"{purity}  {named:<22} | {row['rho1'][0]:>4}/{row['rho1'][1]:<4} | {row['mmd_p']:>8.1e} | "
        f"{row['kid'][0]:>9.5f} {row['kid'][1]:>8.5f} | {times[0]:>7.1f} {times[1]:>6.1f} {times[2]:>6.1f}"
    )


def checks(normal: dict[str, Any], collapse: dict[str, Any]) -> dict[str, bool]:
    """The acceptance check of one seed (docs/benchmarks/generative-recipe.md, "Setting")."""
    return {
        "normal: no significant missing or novel mode": normal["missing"] == 0 and normal["novel"] == 0,
        "collapse: top missing modes significant": collapse["top_missing_significant"],
        "collapse: purity >= 0.9": collapse["purity"] >= 0.9,
        "collapse: Vendi-1 below normal": collapse["vendi"] < normal["vendi"],
    }


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--drop", type=int, nargs="+", default=[3, 7], help="digits the collapse run loses")
    parser.add_argument("--drop-after", type=int, default=30, help="first epoch without them")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--n-components", type=int, default=50, help="Gaussians in the VAE's prior")
    parser.add_argument("--beta", type=float, default=0.05)
    parser.add_argument("--n-generated", type=int, default=1500)
    parser.add_argument("--sigma-factor", type=float, default=0.5, help="sigma = factor x median distance")
    parser.add_argument("--n-frequencies", type=int, default=512)
    parser.add_argument("--rho", type=float, default=2.0)
    parser.add_argument("--min-eigenvalue", type=float, default=0.01,
                        help="smallest eigenvalue reported as a mode (~1 %% of the mass, as the recipe configs)")
    parser.add_argument("--k", type=int, default=10, help="modes examined")
    parser.add_argument("--per-mode", type=int, default=20, help="top real samples per missing mode")
    parser.add_argument("--kid-subsets", type=int, default=100)
    parser.add_argument("--kid-subset-size", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> dict[int, dict[str, dict[str, Any]]]:
    """Run the experiment, print the table and the checks; returns the rows by seed and run."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print(HEADER)
    results, verdicts = {}, []
    for seed in args.seeds:
        rows = {}
        for name, drop in (("normal", ()), ("collapse", tuple(args.drop))):
            start, cpu = time.perf_counter(), time.process_time()
            model, data = train(args, seed, drop)
            trained = time.perf_counter()
            rows[name] = measure(model, data, args, seed)
            times = (trained - start, time.perf_counter() - trained, time.process_time() - cpu)
            print(row_text(seed, name, rows[name], times), flush=True)
        results[seed] = rows
        passed = checks(rows["normal"], rows["collapse"])
        text = "; ".join(f"{check}: {'yes' if ok else 'NO'}" for check, ok in passed.items())
        verdicts.append(f"seed {seed} (sigma {rows['normal']['sigma']:.3f}): {text}")
    print("\n" + "\n".join(verdicts))
    return results


if __name__ == "__main__":
    main()
