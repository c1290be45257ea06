"""EntroAdv (Cheng et al. 2025, arXiv 2506.14758): an entropy-based advantage bonus.

    A'_t = A + min(α · stopgrad(H_t), |A| / κ)          defaults α = 0.4, κ = 2 (their GRPO setting)

The bonus is added whatever the sign of A; the |A|/κ cap keeps it from reversing a negative
advantage (A' ∈ [A, A + |A|/κ]). H_t is the behaviour policy's entropy, fixed during the update
(identical to the detached current entropy on the first mini-batch of a step, which is what the
original computes). Built on the DAPO recipe: clip-higher and dynamic sampling as in `dapo`.
"""

from __future__ import annotations

import torch

from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch, token_advantages
from quadrants.objectives.common import drop_constant_groups, validate_clip
from quadrants.objectives.metrics import surrogate_metrics
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.aggregation import masked_mean
from quadrants.ops.surrogate import clipped_surrogate


def validate_entroadv(
    *,
    alpha: float,
    kappa: float,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    check_range("alpha", alpha, low=0.0)
    check_range("kappa", kappa, low=0.0, low_open=True)


@register_objective("entroadv", validate=validate_entroadv, batch_denominator=True)
def entroadv(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    alpha: float = 0.4,
    kappa: float = 2.0,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = None,
    dynamic_sampling: bool = True,
) -> ObjectiveOutput:
    mask = batch.response_mask
    adv = token_advantages(batch)  # [B, T]
    bonus = torch.minimum(alpha * batch.entropy.detach(), adv.abs() / kappa)  # [B, T]
    terms = clipped_surrogate(
        policy.logp,
        batch.old_logp,
        adv + bonus,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
    )
    metrics = surrogate_metrics(terms, mask, dual_clip=clip_ratio_c is not None)
    metrics["bonus_mean"] = masked_mean(bonus, mask).detach()
    denominator_mask = drop_constant_groups(batch, dynamic_sampling, metrics)
    return ObjectiveOutput(terms.per_token_loss * mask, metrics, denominator_mask)
