"""Lightning callbacks: SPECAlign (adds the SPEC-align loss) and KPCAOODMonitor (kernel PCA OOD monitoring).

Both obtain embeddings through :class:`~lightning_spectral.callbacks.embeddings.EmbeddingSource`.
"""

from lightning_spectral.callbacks.embeddings import EmbeddingSource
from lightning_spectral.callbacks.spec_align import SPECAlign

__all__ = ["EmbeddingSource", "SPECAlign"]
