"""One of each picture, built from scikit-learn's 8x8 digits, saved as PNG and sent to a logger.

"Real" images: 500 digits 0-9. "Generated" images: 400 other digits without 7, 8 and 9 (a model that dropped
three classes). Embeddings: pooled pixels (PixelImageFeature, weight-free). Run ``python docs/examples/pictures.py
DIR`` to write the PNGs into DIR (the docs' pictures come from ``docs/assets/pictures``).
"""

import sys
import tempfile
from pathlib import Path

import torch
from lightning.pytorch.loggers import CSVLogger
from torchvision.utils import save_image

from lightning_spectral.data import load_digit_images
from lightning_spectral.encoders import PixelImageFeature
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi, KernelPCAOOD, SPECDivergence
from lightning_spectral.pictures import (
    as_array,
    log_picture,
    mode_gallery,
    plot_signed_spectrum,
    plot_spectrum,
    plot_test_history,
)

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
out.mkdir(parents=True, exist_ok=True)
images, labels = load_digit_images()
order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))  # a random split: one distribution
real_ids, pool = order[:500], order[500:]
gen_ids = pool[labels[pool] < 7][:400]
embed = PixelImageFeature(size=8)
real, gen = embed(images[real_ids]), embed(images[gen_ids])


def batches(rows: torch.Tensor, ids: torch.Tensor):  # (features, dataset ids): the second pass of a gallery
    return [(rows[i : i + 100], ids[i : i + 100]) for i in range(0, len(rows), 100)]


def save(name: str, picture) -> None:
    path = out / f"{name}.png"
    if isinstance(picture, torch.Tensor):
        save_image(picture, path)
    else:
        picture.savefig(path, dpi=100)
    print(f"{name}: {tuple(as_array(picture).shape[:2])} px (height, width)")


def gallery(found, name: str) -> torch.Tensor:
    """A metric's gallery as a picture: rows labelled, the title line, the class under each image."""
    rows = found[name]
    captions = [[f"class {int(labels[i])}" for i in ids] for ids, _ in rows.samples]
    return mode_gallery(rows.samples, lambda i: images[i], labels=rows.labels, title=rows.title, captions=captions)


# FKEA: the modes of the generated images
vendi = FKEAVendi(sigma=3.0, n_frequencies=512)
vendi.update(gen)
save("fkea_modes", gallery(vendi.reading().galleries(batches(gen, gen_ids), k=3, per_mode=6), "modes"))
save("fkea_spectrum", vendi.reading().plot_spectrum(top=30)[0])

# FINC: the modes the generated images miss (real images) and over-represent (generated images)
finc = FINCNovelty(sigma=3.0, n_frequencies=512)
finc.update(real, real=True)
finc.update(gen, real=False)
found = finc.reading().galleries(batches(gen, gen_ids), k=2, per_mode=6, reference_batches=batches(real, real_ids))
save("finc_missing", gallery(found, "missing"))
save("finc_spectrum", finc.reading().plot_spectrum(top=20)[0])

# FastMMD over "epochs": generated sets that lose 7, 8 and 9 step by step
epochs, statistic, p_value = list(range(5)), [], []
for epoch in epochs:
    keep = pool[labels[pool] < 10 - epoch][:400]  # epoch 0: every class; then 9, 8, 7, 6 gone
    mmd = FastMMD(sigma=3.0, n_frequencies=512)
    mmd.update(real, real=True)
    mmd.update(embed(images[keep]), real=False)
    statistic.append(float(mmd.compute()))
    p_value.append(float(mmd.reading().p_value()))
save("mmd_over_epochs", plot_test_history(epochs, {"MMD^2": statistic}, {"p-value": p_value}, title="gen/mmd"))

# Kernel PCA: the spectrum with the cut, and the most out-of-distribution test images with their scores
detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=256, explained_variance=0.9).fit(real)
kept = int(detector.components_.shape[1])
save("ood_spectrum", plot_spectrum(detector.eigenvalues_, title=f"Kernel PCA ({kept} components kept)", cut=kept))
test_ids = pool[:300]
noisy = images[test_ids].clone()
noisy[:10] = torch.rand(10, 1, 8, 8, generator=torch.Generator().manual_seed(0))  # 10 images of noise
scores = detector.score(embed(noisy))
top = scores.topk(8)
captions = [[f"id {int(i)}\n{float(s):.3f}" for i, s in zip(test_ids[top.indices], top.values, strict=True)]]
save("ood_most_ood", mode_gallery([(top.indices, top.values)], noisy, labels=["most OOD first"],
                                  title="the 8 most out-of-distribution test images: id, score", captions=captions))

# SPEC: where two embeddings of the same images disagree, A and B named
spec = SPECDivergence("cosine")
projection = torch.randn(64, 16, generator=torch.Generator().manual_seed(1))
spec.update(real, real @ projection)
save("spec_spectrum", plot_signed_spectrum(spec.reading().spectrum(), names=("pixels", "projected pixels"), top=30))

# Any picture goes to every logger of a Trainer (or to one logger): here CSV, a PNG beside metrics.csv
logger = CSVLogger(out / "logs")
print("logged to:", log_picture(logger, "gen/finc/missing", gallery(found, "missing"), step=0))
