"""MINRES for a block of symmetric (possibly indefinite) systems, one operator per column.

torch has no MINRES (and scipy's works on one system on the CPU in float64 NumPy); this one runs a (D, k) block of
columns at once on any device, each column with its own operator, as a mode's direction derivative needs
(`functional.mode_shares.share_gradients`).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor


def minres(apply: Callable[[Tensor], Tensor], b: Tensor, rtol: float = 1e-10, maxiter: Optional[int] = None) -> Tensor:
    """Solve ``A x = b`` for each column of ``b`` (D, k) with ``A`` symmetric (possibly indefinite), given by
    ``apply`` (a (D, k) block of columns at once, each column its own operator), by MINRES (Paige and Saunders 1975,
    SIAM J. Numer. Anal. 12(4)), until ``||b - A x|| <= rtol ||b||`` or ``maxiter`` (default ``2 D``) steps."""
    size = b.shape[0]
    maxiter = 2 * size if maxiter is None else maxiter
    x = torch.zeros_like(b)
    beta1 = b.norm(dim=0)
    active = beta1 > 0
    r1, r2, y = b.clone(), b.clone(), b.clone()
    zeros = torch.zeros_like(beta1)
    old_beta, beta, dbar, epsilon, phibar = zeros, beta1.clone(), zeros, zeros, beta1.clone()
    cs, sn = -torch.ones_like(beta1), zeros
    w, w2 = torch.zeros_like(b), torch.zeros_like(b)
    tiny = torch.finfo(b.dtype).tiny
    for step in range(maxiter):
        safe = torch.where(active & (beta > 0), beta, torch.ones_like(beta))
        v = y / safe
        y = apply(v)
        if step >= 1:
            y = y - (beta / torch.where(old_beta > 0, old_beta, torch.ones_like(old_beta))) * r1
        alpha = (v * y).sum(0)
        y = y - (alpha / safe) * r2
        r1, r2 = r2, y
        old_beta, beta = beta, y.norm(dim=0)
        old_epsilon = epsilon
        delta = cs * dbar + sn * alpha
        gbar = sn * dbar - cs * alpha
        epsilon = sn * beta
        dbar = -cs * beta
        gamma = torch.hypot(gbar, beta).clamp_min(tiny)
        cs, sn = gbar / gamma, beta / gamma
        phi = cs * phibar
        phibar = sn * phibar
        w1, w2 = w2, w
        w = (v - old_epsilon * w1 - delta * w2) / gamma
        x = x + torch.where(active, phi * w, torch.zeros_like(w))
        active = active & (phibar > rtol * beta1)
        if not bool(active.any()):
            break
    return x
