"""Lightning callbacks: SPECAlign (adds the SPEC-align loss), KPCAOODMonitor (kernel PCA OOD monitoring),
EmbeddingMetrics (metrics of validation embeddings), DriftMonitor (the clusters a fine-tuned encoder lost since its
start), GeneratedSamples (metrics of a generative model's samples) and DiversityRegularizer (a diversity loss for
the generator);
StderrProgressBar (progress on stderr: bars on a terminal, quiet lines in a log).

All are built on [`EmbeddingCallback`][lightning_spectral.callbacks.EmbeddingCallback] (the capture lifecycle, loader
sharding, gathering), obtain embeddings through [`EmbeddingSource`][lightning_spectral.callbacks.EmbeddingSource], and
end each metric's epoch in [`report`][lightning_spectral.callbacks.report.report] (one sync, values, galleries,
spectrum, reset).
"""

from lightning_spectral.callbacks.checkpoint_guard import CheckedCheckpointIO
from lightning_spectral.callbacks.diversity_regularizer import DiversityRegularizer, diversity_term
from lightning_spectral.callbacks.drift_monitor import DriftMonitor
from lightning_spectral.callbacks.embedding_callback import EmbeddingCallback
from lightning_spectral.callbacks.embedding_metrics import EmbeddingMetrics
from lightning_spectral.callbacks.embeddings import EmbeddingSource, ReferenceEmbedding
from lightning_spectral.callbacks.galleries import ModeImages
from lightning_spectral.callbacks.generated import GeneratedSamples
from lightning_spectral.callbacks.kpca_monitor import KPCAOODMonitor, OODDriftWarning
from lightning_spectral.callbacks.loaders import shard_loader
from lightning_spectral.callbacks.progress import StderrProgressBar
from lightning_spectral.callbacks.sampling import draw_samples, sample_chunks
from lightning_spectral.callbacks.spec_align import SPECAlign
from lightning_spectral.functional.spec_align_solver import SpecAlignSolver

__all__ = [
    "CheckedCheckpointIO",
    "DiversityRegularizer",
    "DriftMonitor",
    "EmbeddingCallback",
    "EmbeddingMetrics",
    "EmbeddingSource",
    "GeneratedSamples",
    "KPCAOODMonitor",
    "ModeImages",
    "OODDriftWarning",
    "ReferenceEmbedding",
    "SPECAlign",
    "SpecAlignSolver",
    "StderrProgressBar",
    "diversity_term",
    "draw_samples",
    "sample_chunks",
    "shard_loader",
]
