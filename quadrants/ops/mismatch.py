"""Train–inference mismatch: how far the engine's log-probs are from the trainer's, and truncated
importance sampling (TIS) to correct for it.

An inference engine (vLLM: other kernels, other batching, possibly lower precision) samples from μ,
a slightly different distribution than the trainer's π_old for the very same weights. The policy
gradient is then off-policy. TIS ("Your efficient RL framework secretly brings you off-policy RL
training", Yao et al. 2025; verl's `tis_imp_ratio_cap`) reweights each token's loss by the
truncated ratio, detached:

    token level:     w_t = min(exp(log π_old(y_t) − log μ(y_t)), C)
    sequence level:  w   = min(exp(Σ_t [log π_old(y_t) − log μ(y_t)]), C)   (same w on every token)

computed in log space (min(Δ, log C) then exp), so a long sequence's product never overflows.
Outside the response mask the log-ratio is set to 0, so padding gets weight exactly 1, and identical
log-probs give weights of exactly 1 (exp(0) = 1 in floating point): the loss is then unchanged.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

MismatchCorrection = Literal["none", "token", "sequence"]
MISMATCH_CORRECTIONS: tuple[str, ...] = get_args(MismatchCorrection)


def logp_abs_diff(
    engine_logp: Tensor, trainer_logp: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """Mean and max |log μ − log π_old| over response tokens.

    Args:
        engine_logp: [B, T] float, the engine's log-prob of each sampled token.
        trainer_logp: [B, T] float, the trainer's recompute of the same.
        response_mask: [B, T] bool.

    Returns:
        (mean [] float, max [] float); both 0 when the mask is empty.
    """
    diff = (engine_logp.float() - trainer_logp.float()).abs() * response_mask  # [B, T]
    mean = diff.sum() / response_mask.sum().clamp_min(1)
    return mean, diff.max() if diff.numel() else diff.new_zeros(())


def truncated_is_weights(
    trainer_logp: Tensor,
    engine_logp: Tensor,
    response_mask: Tensor,
    *,
    level: MismatchCorrection,
    cap: float,
) -> Tensor:
    """Detached TIS weights that multiply the per-token loss.

    Args:
        trainer_logp: [B, T] float, log π_old(y_t) recomputed by the trainer.
        engine_logp: [B, T] float, log μ(y_t) from the engine that sampled y_t.
        response_mask: [B, T] bool.
        level: "none" (all ones), "token" or "sequence".
        cap: C >= 1, the truncation (a weight never exceeds C; weights below 1 are kept).

    Returns:
        [B, T] float weights; 1 outside the response mask.
    """
    if level not in MISMATCH_CORRECTIONS:
        raise ValueError(
            f"mismatch correction {level!r} is unknown; choose one of {list(MISMATCH_CORRECTIONS)}"
        )
    if not cap >= 1.0:
        raise ValueError(f"mismatch cap {cap} is out of range; allowed: [1, inf)")
    if level == "none":
        return torch.ones_like(trainer_logp, dtype=torch.float32)
    log_ratio = (
        (trainer_logp.float() - engine_logp.float()) * response_mask
    ).detach()  # [B, T], 0 off-mask
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)  # [B, 1] -> [B, T]
    weights = torch.exp(log_ratio.clamp_max(math.log(cap)))
    return torch.where(response_mask.bool(), weights, torch.ones_like(weights))


def is_weight_stats(weights: Tensor, response_mask: Tensor, *, cap: float) -> tuple[Tensor, Tensor]:
    """Mean TIS weight over response tokens, and the fraction of them truncated at the cap.

    Args:
        weights: [B, T] float from `truncated_is_weights`.
        response_mask: [B, T] bool.
        cap: the cap the weights were truncated at.

    Returns:
        (mean [] float, capped_frac [] float); 0 and 0 for an empty mask.
    """
    count = response_mask.sum().clamp_min(1)
    mean = (weights * response_mask).sum() / count
    # exp(log C) can land an ulp away from C: count anything within float32 rounding as capped
    capped = (weights >= cap * (1 - 1e-6)) & response_mask.bool()
    return mean, capped.sum() / count
