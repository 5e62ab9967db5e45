"""Encoders and reference features, loaded offline and without unpickling arbitrary objects.

- [`create_clip`][lightning_spectral.encoders.create_clip] (``encoders.clip``): an open_clip model with its transforms
  and tokenizer; ``pretrained``
  is an open_clip tag (needs the hub, or its cache) or a local checkpoint file.
- [`ImageTower`][lightning_spectral.encoders.ImageTower] / [`TextTower`][lightning_spectral.encoders.TextTower]
  (``encoders.towers``): one tower of an open_clip model as a module
  ``x -> (N, d)``.
- [`create_timm_encoder`][lightning_spectral.encoders.create_timm_encoder] /
  [`TimmReference`][lightning_spectral.encoders.TimmReference] (``encoders.timm_encoder``): a frozen timm feature
  extractor (e.g. DINOv2, the SPEC paper's reference) with weights from a local file, and its evaluation
  transform; [`InputAdapter`][lightning_spectral.encoders.InputAdapter] (``encoders.input_adapter``) converts the
  normalisation of its input.
- [`PixelEncoder`][lightning_spectral.encoders.PixelEncoder] (``encoders.pixels``): a weight-free reference for the
  offline recipe.
- [`ClipImageFeature`][lightning_spectral.encoders.ClipImageFeature] /
  [`TimmImageFeature`][lightning_spectral.encoders.TimmImageFeature] /
  [`PixelImageFeature`][lightning_spectral.encoders.PixelImageFeature] (``encoders.extractors``):
  frozen image feature extractors for the metrics' ``feature=``: float images in [0, 1] in, the model's own
  preprocessing (resize, grey -> RGB, mean / std), (N, d) out.
- [`PrecomputedFeatures`][lightning_spectral.encoders.PrecomputedFeatures] /
  [`save_features`][lightning_spectral.encoders.save_features] (``encoders.precomputed``): a table of reference features
  keyed by dataset index (.npy memory-mapped, .pt, .safetensors).
- [`load_weights`][lightning_spectral.encoders.load_weights] (``encoders.weights``): a state_dict from a local file.

Every file is read with ``safetensors``, ``torch.load(..., weights_only=True)`` or ``numpy.load(...,
allow_pickle=False)``: a file that needs arbitrary pickled objects is refused with an error saying how to
re-save it. Nothing here downloads anything unless an open_clip tag is asked for.
"""

from lightning_spectral.encoders.clip import ClipBundle, create_clip, load_clip_checkpoint
from lightning_spectral.encoders.extractors import (
    ClipImageFeature,
    ImageFeature,
    PixelImageFeature,
    TimmImageFeature,
    resize_center_crop,
)
from lightning_spectral.encoders.input_adapter import InputAdapter
from lightning_spectral.encoders.pixels import PixelEncoder
from lightning_spectral.encoders.precomputed import PrecomputedFeatures, save_features
from lightning_spectral.encoders.timm_encoder import TimmEncoder, TimmReference, create_timm_encoder
from lightning_spectral.encoders.towers import ImageTower, TextTower
from lightning_spectral.encoders.weights import WEIGHT_SUFFIXES, load_weights

__all__ = [
    "WEIGHT_SUFFIXES",
    "ClipBundle",
    "ClipImageFeature",
    "ImageFeature",
    "ImageTower",
    "InputAdapter",
    "PixelEncoder",
    "PixelImageFeature",
    "PrecomputedFeatures",
    "TextTower",
    "TimmEncoder",
    "TimmImageFeature",
    "TimmReference",
    "create_clip",
    "create_timm_encoder",
    "load_clip_checkpoint",
    "load_weights",
    "resize_center_crop",
    "save_features",
]
