"""Stateless tensor functions for each method, and the exact n x n oracles for small inputs."""

from lightning_spectral.functional.conditional import (
    conditional_rke_exact,
    conditional_vendi,
    conditional_vendi_exact,
    prompt_agnostic_eigenvalues_exact,
)
from lightning_spectral.functional.content_groups import content_groups, content_hash, reference_halves
from lightning_spectral.functional.diversity import diversity_guidance, diversity_loss
from lightning_spectral.functional.finc import finc, finc_exact, finc_spectrum, ken_eigenvalues
from lightning_spectral.functional.fkea import fkea_vendi, truncated_vendi, vendi_exact
from lightning_spectral.functional.mmd import MMDTest, fast_mmd, fast_mmd_test, mmd_exact, mmd_exact_test
from lightning_spectral.functional.mode_shares import ModeRow, exact_two_sided_shares, mode_line, two_sided_shares
from lightning_spectral.functional.modes import Modes, mode_scores, top_samples
from lightning_spectral.functional.ood import (
    detection_metrics,
    detection_standard_errors,
    rate_standard_error,
    score_standard_errors,
    threshold_at_tpr,
    threshold_standard_error,
)
from lightning_spectral.functional.running_covariance import RunningCovariance
from lightning_spectral.functional.spec import (
    SPECClusters,
    SPECResult,
    match_bandwidth,
    spec,
    spec_align_loss,
    spec_diff_exact,
)

__all__ = [
    "RunningCovariance",
    "diversity_guidance",
    "diversity_loss",
    "conditional_rke_exact",
    "content_groups",
    "content_hash",
    "reference_halves",
    "detection_metrics",
    "detection_standard_errors",
    "rate_standard_error",
    "score_standard_errors",
    "threshold_at_tpr",
    "threshold_standard_error",
    "conditional_vendi",
    "conditional_vendi_exact",
    "prompt_agnostic_eigenvalues_exact",
    "MMDTest",
    "Modes",
    "mode_line",
    "ModeRow",
    "exact_two_sided_shares",
    "two_sided_shares",
    "SPECClusters",
    "SPECResult",
    "fast_mmd",
    "fast_mmd_test",
    "finc",
    "finc_exact",
    "finc_spectrum",
    "fkea_vendi",
    "ken_eigenvalues",
    "mmd_exact",
    "mmd_exact_test",
    "mode_scores",
    "match_bandwidth",
    "spec",
    "spec_align_loss",
    "spec_diff_exact",
    "top_samples",
    "truncated_vendi",
    "vendi_exact",
]
