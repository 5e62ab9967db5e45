"""Image-caption datamodules: offline handwritten digits, open_clip-style CSV files, and image folders.

Every item is a dict ``{"image": float (3, H, W), "caption": str, "index": int, "label": int}`` plus
``"text"``: the caption's token ids (context_length,) when a tokenizer is given. ``"index"`` is the sample's
position in the whole source (all digits / all CSV rows / all image files), the same in every split, so
precomputed reference features ([`PrecomputedFeatures`][lightning_spectral.encoders.PrecomputedFeatures]) of the whole
source are looked up by it; ``"label"`` is the class (-1 when unknown).

Datamodules share: ``train_dataloader`` (shuffled from ``seed + epoch``), ``val_dataloader`` (also the
out-of-distribution loader when ``ood_in_val=True``, as ``KPCAOODMonitor(ood_val_dataloader_idx=1)`` expects),
``ood_dataloader()``, ``train_dataloader_for_eval()`` (train split, fixed order, evaluation transform) and
``val_dataloader_for_eval()``; ``class_names`` and ``prompts`` (one caption per class, position = label) for
zero-shot classification.

Modules: ``datasets`` (the items), ``transforms`` (image files to tensors), ``sampling`` (seeded splits and
shuffles), ``resumable`` (training loaders that a run resumed mid-epoch continues where it stopped),
``datamodule`` (what the datamodules share), ``digits``, ``csv_captions``, ``image_folder``, ``digit_images``
(8 x 8 digit images for small generative models, with classes dropped mid-run).
"""

from lightning_spectral.data.csv_captions import CsvImageText
from lightning_spectral.data.datasets import ImageTextDataset, Tokenizer, resolve_tokenizer
from lightning_spectral.data.digit_images import DigitsImages, DropClassesSampler, ImageDataset, load_digit_images
from lightning_spectral.data.digits import DigitsImageText, RenderDigit
from lightning_spectral.data.image_folder import IMAGE_EXTENSIONS, ImageFolderText
from lightning_spectral.data.resumable import LoaderPosition, ResumableDataLoader, ResumesMidEpoch
from lightning_spectral.data.sampling import EpochShuffle, stratified_split
from lightning_spectral.data.transforms import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD, LoadImage, default_transform

__all__ = [
    "IMAGE_EXTENSIONS",
    "OPENAI_DATASET_MEAN",
    "OPENAI_DATASET_STD",
    "CsvImageText",
    "DigitsImageText",
    "DigitsImages",
    "DropClassesSampler",
    "EpochShuffle",
    "ImageDataset",
    "ImageFolderText",
    "ImageTextDataset",
    "LoadImage",
    "LoaderPosition",
    "RenderDigit",
    "ResumableDataLoader",
    "ResumesMidEpoch",
    "Tokenizer",
    "default_transform",
    "load_digit_images",
    "resolve_tokenizer",
    "stratified_split",
]
