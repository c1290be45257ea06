"""The PPO/GRPO clipped surrogate, per token, with asymmetric clipping (DAPO's clip-higher) and the
optional dual clip.

loss_t = max(-A_t * r_t, -A_t * clip(r_t, 1 - clip_low, 1 + clip_high)), r_t =
exp(logp_t - old_logp_t)

Dual clip (Ye et al. 2020, arXiv 1912.09729; verl's `clip_ratio_c`, 3 by default there): for a token
with A_t < 0 the loss is also capped at -A_t * c, loss_t = min(loss_t, -A_t * c), so a ratio that
ran far above 1 on a bad token cannot make the loss (and its gradient) unbounded. Tokens with A_t >=
0 are untouched. `clip_ratio_c=None` turns it off (the plain clipped surrogate, bit for bit).

Shape legend: **B** sequences · **T** response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# exp() of a log-ratio beyond this overflows float32 gradients long before it means anything; the
# clamp only bites on tokens whose ratio is already e^±20 (clipped anyway
# unless A has the wrong sign).
_MAX_LOG_RATIO = 20.0


@dataclass(frozen=True)
class SurrogateTerms:
    """Per-token pieces of the clipped surrogate.

    Attributes:
        per_token_loss: [B, T] float, the clipped surrogate loss (differentiable).
        ratio: [B, T] float, importance ratio r_t (differentiable).
        clipped_mask: [B, T] bool, tokens where the clipped branch is active (no gradient).
        clipped_low_mask / clipped_high_mask: [B, T] bool, which side clipped.
        dual_clipped_mask: [B, T] bool, tokens with A < 0 whose loss the dual clip capped at -A * c
            (no gradient; all False when the dual clip is off). verl's `pg_clipfrac_lower`.
    """

    per_token_loss: Tensor
    ratio: Tensor
    clipped_mask: Tensor
    clipped_low_mask: Tensor
    clipped_high_mask: Tensor
    dual_clipped_mask: Tensor


def importance_ratio(logp: Tensor, old_logp: Tensor) -> Tensor:
    """r_t = exp(logp_t - old_logp_t), log-ratio clamped to ±20 for numerical safety. [B, T]."""
    return torch.exp((logp - old_logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
) -> SurrogateTerms:
    """Clipped surrogate loss per token.

    Args:
        logp: [B, T] float, current-policy log-probs (with grad).
        old_logp: [B, T] float, behaviour log-probs (no grad).
        advantages: [B, T] (or broadcastable, e.g. [B, 1]) float token advantages.
        clip_low: ε_low, the ratio is clipped below at 1 - clip_low (0 <= clip_low < 1).
        clip_high: ε_high, the ratio is clipped above at 1 + clip_high (>= 0).
        clip_ratio_c: the dual-clip constant c (> 1), or None for no dual clip.

    Returns:
        SurrogateTerms.
    """
    ratio = importance_ratio(logp, old_logp)
    unclipped = -advantages * ratio
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = -advantages * clipped_ratio
    per_token_loss = torch.maximum(unclipped, clipped)
    clipped_mask = clipped > unclipped
    if clip_ratio_c is None:
        dual_clipped_mask = torch.zeros_like(clipped_mask)
    else:
        # as verl's compute_policy_loss: min(-A c, max(...)) where A < 0, the plain max elsewhere
        negative = advantages < 0
        cap = -advantages * clip_ratio_c
        dual_clipped_mask = (per_token_loss > cap) & negative  # [B, T]
        per_token_loss = torch.where(negative, torch.minimum(cap, per_token_loss), per_token_loss)
    ratio_d = ratio.detach()
    return SurrogateTerms(
        per_token_loss=per_token_loss,
        ratio=ratio,
        clipped_mask=clipped_mask,
        clipped_low_mask=clipped_mask & (ratio_d < 1.0 - clip_low),
        clipped_high_mask=clipped_mask & (ratio_d > 1.0 + clip_high),
        dual_clipped_mask=dual_clipped_mask.detach(),
    )
