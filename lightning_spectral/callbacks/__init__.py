"""Lightning callbacks: SPECAlign (adds the SPEC-align loss), KPCAOODMonitor (kernel PCA OOD monitoring) and
EmbeddingMetrics (metrics of validation embeddings).

All are built on :class:`~lightning_spectral.callbacks.base.EmbeddingCallback` (the capture lifecycle, loader
sharding, gathering, logging), and obtain embeddings through
:class:`~lightning_spectral.callbacks.embeddings.EmbeddingSource`.
"""

from lightning_spectral.callbacks.base import EmbeddingCallback, shard_loader
from lightning_spectral.callbacks.embedding_metrics import EmbeddingMetrics
from lightning_spectral.callbacks.embeddings import EmbeddingSource, ReferenceEmbedding
from lightning_spectral.callbacks.kpca_monitor import KPCAOODMonitor, OODDriftWarning
from lightning_spectral.callbacks.spec_align import SPECAlign

__all__ = [
    "EmbeddingCallback",
    "EmbeddingMetrics",
    "EmbeddingSource",
    "KPCAOODMonitor",
    "OODDriftWarning",
    "ReferenceEmbedding",
    "SPECAlign",
    "shard_loader",
]
