r"""Conditional-Vendi / Conditional-RKE / Information-Vendi of prompt-conditioned samples, and their exact oracles.

Jalali, Ospanov, Gohari, Farnia, "Conditional Vendi Score" (arXiv 2411.02817): with Gaussian kernels ``K_X`` on the
samples and ``K_T`` on the prompts (``k(z, z) = 1``), the joint kernel is the Hadamard product ``K_X o K_T``, and
the kernel entropy splits as ``H(X) = H(X|T) + I(X;T)`` (abstract) with

    H_a(X|T) = H_a(K_X o K_T / n) - H_a(K_T / n)            (the conditional entropy of the paper)
    I_a(X;T) = H_a(K_X / n) + H_a(K_T / n) - H_a(K_X o K_T / n)
    Conditional-Vendi_a = exp(H_a(X|T)),  Information-Vendi_a = exp(I_a(X;T)),  Conditional-RKE = order 2

``H_a`` the order-``a`` matrix Renyi entropy of the eigenvalues (as the authors' ``conditional_entropy``, which
returns ``H(X,Y) - H(Y)`` and ``H(X) + H(Y) - H(X,Y)``). ``Vendi = Conditional-Vendi x Information-Vendi``.

Random features (the authors' ``joint_cov_rff``): the product of two Gaussian kernels is ONE Gaussian kernel on
``[x / sigma_x, t / sigma_t]``, so with one standard-normal draw ``Z`` split into ``(Z_x, Z_t)`` the joint
features ``[cos, sin](x Z_x / sigma_x + t Z_t / sigma_t) / sqrt(r)`` have the joint covariance ``C_XT`` (2r x 2r),
and the same slices give ``C_X`` and ``C_T``: every entropy above is read from a 2r x 2r covariance whose non-zero
spectrum approximates the kernel matrix's (error ~ 1/sqrt(r)), so the errors of the three entropies correlate.
Order 2 needs no eigendecomposition: ``Conditional-RKE = U_T / U_XT``, each ``U`` the Frobenius norm ``||C||_F^2``
over pairs of distinct samples (``(n ||C||_F^2 - 1) / (n - 1)``, without the plug-in's 1/n bias; the exact oracles
likewise drop the kernel matrices' diagonals). That estimate is
consistent but biased by $O(1/r)$: $\mathbb{E}\,\|C\|_F^2 = \|K/n\|_F^2 + \frac{1}{n^2}\sum_{i \ne j}
\mathrm{Var}\,\hat k_{ij}$ (each squared kernel estimate picks up its variance), so both Frobenius norms run
high, relatively more on the joint side (whose RKE is larger); Conditional-RKE then comes out low, by more when the
joint RKE is large against r (measured: 8.42 against the exact 8.80 at r = 768, on n = 240 synthetic samples with
four recurring noisy one-hot prompts).

Prompt-agnostic modes (Ospanov, Jalali, Farnia, "Scendi", arXiv 2412.18645, abstract: the Schur complement of the
joint image-text kernel covariance): $\Lambda = C_{xx} - C_{xt} (C_{tt} + \varepsilon I)^{-1} C_{tx}$ of the
uncentred second moment of the paired features, the sample variation the prompts do not explain (linearly, in
feature space). The ridge $\varepsilon > 0$ is this library's regularisation: Scendi (and its code) uses the
pseudo-inverse of $C_{tt}$ (its random-feature width 2r < n keeps the value from collapsing), and the value here
depends on $\varepsilon$ (see `prompt_agnostic_covariance`). Its non-zero eigenvalues are those of
$\varepsilon K_X^{1/2} (K_T + n \varepsilon I)^{-1} K_X^{1/2}$ (the kernel oracle below).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_features, check_positive
from lightning_spectral.algebra.eigen import psd_eigenvalues
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, covariance
from lightning_spectral.functional.fkea import (
    Alpha,
    Orders,
    check_orders,
    check_pairs,
    parse_alpha,
    renyi_entropy,
    unbiased_purity,
)
from lightning_spectral.kernels.exact import gaussian_kernel
from lightning_spectral.kernels.joint_gaussian_rff import JointGaussianRFF

#: The names of `conditional_scores`' values.
SCORES = ("conditional", "information", "vendi", "prompt_vendi")


class ConditionalSpectra(NamedTuple):
    """What every score is read from: the joint, sample and prompt spectra (or covariances), each of trace 1."""

    joint: Tensor
    samples: Tensor
    prompts: Tensor


def entropy_of(matrix_or_spectrum: Tensor, alpha: Alpha, n: Optional[float] = None) -> Tensor:
    """``H_alpha`` of a spectrum (1-D) or of a PSD matrix (2-D): order 2 of a matrix without eigendecomposition
    (``-log(||C||_F^2 / tr(C)^2)``), other orders through its eigenvalues. With the sample count ``n``, order 2 from
    pairs of distinct samples, without the plug-in's 1/n bias (`functional.fkea.unbiased_purity`)."""
    order = parse_alpha(alpha)
    values = matrix_or_spectrum.double()
    if order == 2:
        frobenius_sq = values.square().sum()
        if float(frobenius_sq) <= 0:
            raise ValueError("conditional scores: a covariance is zero (no samples accumulated?).")
        total = values.sum() if values.ndim == 1 else values.trace()
        purity = frobenius_sq / total.square()
        return -torch.log(purity if n is None else unbiased_purity(purity, n, values.shape[0]))
    if values.ndim == 1:
        return renyi_entropy(values, order)
    return renyi_entropy(psd_eigenvalues(values), order)


def conditional_scores(spectra: ConditionalSpectra, alpha: Alpha = 1.0, n: Optional[float] = None) -> dict[str, Tensor]:
    """Every score of one order from the three spectra / covariances (module doc), float64 scalars:

    ``conditional`` = exp(H(X,T) - H(T)), ``information`` = exp(H(X) + H(T) - H(X,T)), ``vendi`` = exp(H(X)),
    ``prompt_vendi`` = exp(H(T)); with the sample count ``n``, order 2 without its 1/n bias (`entropy_of`).
    """
    joint, samples, prompts = (entropy_of(part, alpha, n) for part in spectra)
    return {
        "conditional": torch.exp(joint - prompts),
        "information": torch.exp(samples + prompts - joint),
        "vendi": torch.exp(samples),
        "prompt_vendi": torch.exp(prompts),
    }


def _pair(samples: Tensor, prompts: Tensor, owner: str) -> tuple[Tensor, Tensor]:
    samples = check_features(samples, "samples", owner=owner)
    prompts = check_features(prompts, "prompts", owner=owner)
    if samples.shape[0] != prompts.shape[0]:
        raise ValueError(
            f"{owner}: `samples` has {samples.shape[0]} rows and `prompts` {prompts.shape[0]}; row i of both must be "
            "the same sample (one prompt per generated sample)."
        )
    if samples.shape[0] == 0:
        raise ValueError(f"{owner}: `samples` is empty; at least one sample is needed.")
    dtype = torch.promote_types(samples.dtype, prompts.dtype)
    return samples.to(dtype), prompts.to(dtype)


def _by_order(alpha: Orders, score: "callable") -> dict:  # type: ignore[valid-type]
    orders, single = check_orders(alpha)
    values = {order: score(order) for order in orders}
    return values[orders[0]] if single else values


# ---- exact n x n oracles ---------------------------------------------------------------------------------------
def conditional_spectra_exact(
    samples: Tensor, prompts: Tensor, sigma: float, prompt_sigma: float
) -> ConditionalSpectra:
    """The eigenvalues of ``K_X o K_T / n``, ``K_X / n`` and ``K_T / n`` (descending, float64). O(n^2 d + n^3)."""
    samples, prompts = _pair(samples, prompts, "conditional_spectra_exact")
    n = samples.shape[0]
    k_x = gaussian_kernel(samples.double(), sigma=check_positive(sigma, "sigma"))
    k_t = gaussian_kernel(prompts.double(), sigma=check_positive(prompt_sigma, "prompt_sigma"))
    return ConditionalSpectra(psd_eigenvalues(k_x * k_t / n), psd_eigenvalues(k_x / n), psd_eigenvalues(k_t / n))


def conditional_vendi_exact(
    samples: Tensor, prompts: Tensor, sigma: float, prompt_sigma: float, alpha: Orders = 1.0, score: str = "conditional"
) -> object:
    """Exact Conditional-Vendi (``score="conditional"``), Information-Vendi (``"information"``), Vendi of the
    samples (``"vendi"``) or of the prompts (``"prompt_vendi"``), from the n x n kernel matrices.

    Args:
        samples: (N, d_x) sample embeddings; row i generated for prompt i.
        prompts: (N, d_t) prompt embeddings (one-hot labels allowed).
        sigma: Gaussian bandwidth of the samples.
        prompt_sigma: Gaussian bandwidth of the prompts.
        alpha: an order in (0, inf] or a sequence of orders (2 = Conditional-RKE).

    Returns:
        A float64 scalar for one order, a dict keyed by order for several.

    Examples:
        >>> import torch
        >>> x = torch.arange(30.0)[:, None] * 100             # 30 far-apart samples
        >>> t = torch.zeros(30, 1)                           # one prompt: conditional = unconditional
        >>> round(float(conditional_vendi_exact(x, t, sigma=1.0, prompt_sigma=1.0)), 3)
        30.0
    """
    if score not in SCORES:
        raise ValueError(f"conditional_vendi_exact: `score` must be one of {SCORES}, got {score!r}.")
    check_orders(alpha)
    spectra = conditional_spectra_exact(samples, prompts, sigma, prompt_sigma)
    n = float(len(spectra.joint))
    return _by_order(alpha, lambda order: conditional_scores(spectra, order, n)[score])


def conditional_rke_exact(samples: Tensor, prompts: Tensor, sigma: float, prompt_sigma: float) -> Tensor:
    """Exact Conditional-RKE without an eigendecomposition: ``sum_{i != j} K_T^2 / sum_{i != j} (K_X o K_T)^2``
    (over pairs of distinct samples: without the plug-in's 1/n bias, `functional.fkea.unbiased_purity`). O(n^2 d).

    Raises:
        ValueError: fewer than 2 samples.
    """
    samples, prompts = _pair(samples, prompts, "conditional_rke_exact")
    check_pairs(samples.shape[0])
    k_x = gaussian_kernel(samples.double(), sigma=check_positive(sigma, "sigma"))
    k_t = gaussian_kernel(prompts.double(), sigma=check_positive(prompt_sigma, "prompt_sigma"))
    off = ~torch.eye(samples.shape[0], dtype=torch.bool, device=k_x.device)
    return k_t[off].square().sum() / (k_x * k_t)[off].square().sum()


def prompt_agnostic_eigenvalues_exact(
    samples: Tensor, prompts: Tensor, sigma: float, prompt_sigma: float, ridge: float = 1e-3
) -> Tensor:
    """Non-zero eigenvalues of the Schur complement ``C_xx - C_xt (C_tt + ridge I)^-1 C_tx`` from kernel matrices:
    those of ``ridge K_X^1/2 (K_T + n ridge I)^-1 K_X^1/2`` (``I - Phi_t (Phi_t^T Phi_t + n ridge)^-1 Phi_t^T =
    n ridge (K_T + n ridge I)^-1``). Descending, float64. O(n^3)."""
    samples, prompts = _pair(samples, prompts, "prompt_agnostic_eigenvalues_exact")
    ridge = check_positive(ridge, "ridge")
    n = samples.shape[0]
    k_x = gaussian_kernel(samples.double(), sigma=check_positive(sigma, "sigma"))
    k_t = gaussian_kernel(prompts.double(), sigma=check_positive(prompt_sigma, "prompt_sigma"))
    values, vectors = torch.linalg.eigh(k_x)
    root = vectors * values.clamp_min(0).sqrt() @ vectors.T
    inverse = torch.linalg.inv(k_t + n * ridge * torch.eye(n, dtype=torch.float64))
    return psd_eigenvalues(ridge * root @ inverse @ root)


def conditional_covariances(
    samples: Tensor,
    prompts: Tensor,
    sigma: float,
    prompt_sigma: float,
    n_frequencies: int = 2048,
    seed: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> ConditionalSpectra:
    """The joint, sample and prompt RFF covariances (each 2r x 2r, trace 1, float64) of paired embeddings."""
    samples, prompts = _pair(samples, prompts, "conditional_covariances")
    rff = JointGaussianRFF(sigma, prompt_sigma, n_frequencies, seed, (samples.shape[1], prompts.shape[1]))
    rows = torch.cat([samples, prompts], dim=1)
    rff = rff.to(rows.device)
    return ConditionalSpectra(*(
        covariance(rows, lambda chunk, name=name: rff(chunk, name).double(), chunk_size)
        for name in ConditionalSpectra._fields
    ))  # fmt: skip


def conditional_vendi(
    samples: Tensor,
    prompts: Tensor,
    sigma: float,
    prompt_sigma: float,
    n_frequencies: int = 2048,
    alpha: Orders = 1.0,
    seed: int = 0,
    score: str = "conditional",
) -> object:
    """RFF estimate of [`conditional_vendi_exact`][lightning_spectral.functional.conditional_vendi_exact] (same
    arguments, plus ``n_frequencies`` r and ``seed``).

    Examples:
        >>> import torch
        >>> x = torch.cat([torch.zeros(50, 2), torch.full((50, 2), 100.0)])   # two far-apart modes
        >>> t = torch.zeros(100, 1)
        >>> round(float(conditional_vendi(x, t, sigma=1.0, prompt_sigma=1.0, n_frequencies=256, alpha=2)), 2)
        2.02
    """
    if score not in SCORES:
        raise ValueError(f"conditional_vendi: `score` must be one of {SCORES}, got {score!r}.")
    check_orders(alpha)
    covariances = conditional_covariances(samples, prompts, sigma, prompt_sigma, n_frequencies, seed)
    n = float(samples.shape[0])
    return _by_order(alpha, lambda order: conditional_scores(covariances, order, n)[score])


def prompt_agnostic_covariance(joint_xt: Tensor, width_x: int, ridge: float = 1e-3) -> Tensor:
    r"""The Schur complement $\Lambda = C_{xx} - C_{xt} (C_{tt} + \varepsilon I)^{-1} C_{tx}$ (Scendi's, with a
    ridge $\varepsilon$ = ``ridge``) of the paired second moment, (2r, 2r) float64.

    Input convention (Scendi's and its code's): ``joint_xt`` is the uncentred second moment
    $\frac{1}{n}\sum_i [\phi(x_i); \psi(t_i)][\phi(x_i); \psi(t_i)]^\top$ of the concatenated sample and prompt
    features, the first ``width_x`` rows / columns the samples'. Do not centre it: the complement of the uncentred
    moment already removes the mean direction (one constant prompt gives the centred $K_X / n$); a centred
    covariance gives another $\Lambda$. No score is defined here; one read from $\Lambda$ normalises its eigenvalues
    by their sum $\mathrm{tr}\,\Lambda$ (as the authors' code does, and as `renyi_entropy` does).

    The ridge is this library's regularisation, not the paper's: Scendi uses the pseudo-inverse of $C_{tt}$, and its
    random-feature width 2r < n is what keeps its value from collapsing. With $\varepsilon \to 0$, $\Lambda$ is the
    within-prompt scatter when prompts recur (not 0); it collapses to 0 only when every sample has its own prompt and the prompt
    features span $\mathbb{R}^n$ (2r >= n, or the exact-kernel limit), where the value depends strongly on
    $\varepsilon$. Report ``ridge`` with any value read from it."""
    ridge = check_positive(ridge, "ridge")
    joint_xt = joint_xt.double()
    c_xx, c_xt, c_tt = joint_xt[:width_x, :width_x], joint_xt[:width_x, width_x:], joint_xt[width_x:, width_x:]
    eye = torch.eye(c_tt.shape[0], dtype=torch.float64, device=c_tt.device)
    solved = torch.linalg.solve(c_tt + ridge * eye, c_xt.T)
    schur = c_xx - c_xt @ solved
    return (schur + schur.T) / 2


def prompt_agnostic_share_replicates(moment: Tensor, draws: Tensor, width_x: int, ridge: float = 1e-3) -> Tensor:
    r"""First-order replicates (A,) of $\operatorname{tr}\Lambda$ (`prompt_agnostic_covariance`) for the draws
    ``draws`` (A, D, D) of the paired moment ``moment`` (D, D): its derivative in the direction of each draw $E$,

    $$d = \operatorname{tr} E_{xx} - 2 \operatorname{tr}(E_{xt} S) + \operatorname{tr}(S^\top E_{tt} S), \qquad
    S = (C_{tt} + \varepsilon I)^{-1} C_{tx},$$

    from $d(M^{-1}) = -M^{-1}\, dM\, M^{-1}$ (``width_x`` rows / columns the samples', as there)."""
    ridge = check_positive(ridge, "ridge")
    moment, draws = moment.double(), draws.double()
    c_xt, c_tt = moment[:width_x, width_x:], moment[width_x:, width_x:]
    eye = torch.eye(c_tt.shape[0], dtype=torch.float64, device=c_tt.device)
    solved = torch.linalg.solve(c_tt + ridge * eye, c_xt.T)  # S (D_t, D_x)
    e_xx, e_xt, e_tt = draws[:, :width_x, :width_x], draws[:, :width_x, width_x:], draws[:, width_x:, width_x:]
    first = e_xx.diagonal(dim1=1, dim2=2).sum(1)
    cross = (e_xt * solved.T).sum((1, 2))  # tr(E_xt S)
    second = ((e_tt @ solved) * solved).sum((1, 2))  # tr(S^T E_tt S)
    return first - 2 * cross + second
