"""Encoders and reference features, loaded offline and without unpickling arbitrary objects.

- :func:`create_clip` (``encoders.clip``): an open_clip model with its transforms and tokenizer; ``pretrained``
  is an open_clip tag (needs the hub, or its cache) or a local checkpoint file.
- :class:`ImageTower` / :class:`TextTower` (``encoders.towers``): one tower of an open_clip model as a module
  ``x -> (N, d)``.
- :func:`create_timm_encoder` / :class:`TimmReference` (``encoders.timm_encoder``): a frozen timm feature
  extractor (e.g. DINOv2, the SPEC paper's reference) with weights from a local file, and its evaluation
  transform; :class:`InputAdapter` (``encoders.input_adapter``) converts the normalisation of its input.
- :class:`PixelEncoder` (``encoders.pixels``): a weight-free reference for the offline recipe.
- :class:`ClipImageFeature` / :class:`TimmImageFeature` / :class:`PixelImageFeature` (``encoders.extractors``):
  frozen image feature extractors for the metrics' ``feature=``: float images in [0, 1] in, the model's own
  preprocessing (resize, grey -> RGB, mean / std), (N, d) out.
- :class:`PrecomputedFeatures` / :func:`save_features` (``encoders.precomputed``): a table of reference features
  keyed by dataset index (.npy memory-mapped, .pt, .safetensors).
- :func:`load_weights` (``encoders.weights``): a state_dict from a local file.

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
