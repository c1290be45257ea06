"""ARCA's token credit from the adapter residual, and the concentration diagnostics of credit
weights (pure tensor math).

ARCA ("Adapter-Residual Credit Assignment When Token Signals Degenerate", Lafuente-Mercado, arXiv
2606.00257) scores response token t by the norm of what the LoRA adapter changes in the hidden
state, r_t = ||h_t^adapted − h_t^base||_2 (the base: the same model with its adapters switched
off). The abstract pins r_t; how r_t becomes a weight on the advantage is not in the material we
could read, so `arca_weights` states the reading used here and names its knobs (docs/science.md):

    w_t  = r_t / mean_{t' in response} r_t'       (within-trajectory normalisation: mean weight 1)
    w'_t = (1 − mix) + mix · w_t                   (mix = 1: pure ARCA; 0: plain GRPO)
    w'_t = min(w'_t, max_weight)                   (optional cap; the mean may then fall below 1)

A response whose residual is 0 on every token (no adapter, or peft's B = 0 at initialisation: the
adapter changes nothing yet) carries no salience, and gets w = 1 everywhere.

The paper measures degeneracy with the weight Gini coefficient and the effective-token ratio; both
are here, per response, for any per-token weights (ARCA's, or normalised entropy).
"""

from __future__ import annotations

import torch
from torch import Tensor


def residual_norm(adapted: Tensor, base: Tensor) -> Tensor:
    """||h^adapted − h^base||_2 over the hidden dimension: [B, T, d] x2 -> [B, T] float32."""
    return torch.linalg.vector_norm(adapted.float() - base.float(), dim=-1)


def arca_weights(
    residual: Tensor,
    mask: Tensor,
    *,
    mix: float = 1.0,
    max_weight: float | None = None,
    eps: float = 1e-12,
) -> Tensor:
    """Per-token credit weights from the adapter residual (module docstring): [B, T] -> [B, T],
    0 outside `mask` ([B, T] bool, the response tokens)."""
    r = residual.float() * mask
    count = mask.sum(-1, keepdim=True).clamp_min(1)  # [B, 1]
    mean = r.sum(-1, keepdim=True) / count  # [B, 1]
    informative = mean > eps
    w = torch.where(informative, r / mean.clamp_min(eps), torch.ones_like(r))
    w = (1.0 - mix) + mix * w
    if max_weight is not None:
        w = w.clamp_max(max_weight)
    return w * mask


def effective_token_ratio(weights: Tensor, mask: Tensor) -> Tensor:
    """Per response, (Σ w)² / (n Σ w²): 1 for uniform weights, 1/n when one token holds all the
    weight; 0 for an empty or all-zero response. [B, T] -> [B]."""
    w = weights.float() * mask
    n = mask.sum(-1).float()
    square_sum = (w * w).sum(-1)
    ratio = w.sum(-1) ** 2 / (n * square_sum).clamp_min(1e-30)
    return torch.where(square_sum > 0, ratio, torch.zeros_like(ratio))


def gini(weights: Tensor, mask: Tensor) -> Tensor:
    """Per response, the Gini coefficient of its (non-negative) token weights: with the n weights
    sorted ascending x_(1) <= ... <= x_(n), G = Σ_i (2i − n − 1) x_(i) / (n Σ_i x_i); 0 for uniform
    weights, (n − 1)/n when one token holds all of it; 0 for an empty or all-zero response.
    [B, T] -> [B]."""
    w = weights.float()
    n = mask.sum(-1, keepdim=True)  # [B, 1]
    # padding sorts last (+inf), so the first n sorted entries are the response's weights
    ordered, _ = torch.sort(torch.where(mask, w, torch.full_like(w, float("inf"))), dim=-1)
    rank = torch.arange(1, w.shape[-1] + 1, device=w.device)[None]  # [1, T]
    inside = rank <= n
    ordered = torch.where(inside, ordered, torch.zeros_like(ordered))
    numerator = ((2 * rank - n - 1) * ordered).sum(-1)
    total = ordered.sum(-1)
    g = numerator / (n.squeeze(-1) * total).clamp_min(1e-30)
    return torch.where(total > 0, g, torch.zeros_like(g))
