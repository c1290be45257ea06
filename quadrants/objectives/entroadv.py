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
from quadrants.objectives.common import ppo_token_loss, validate_clip
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.aggregation import masked_mean


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


@register_objective(
    "entroadv",
    validate=validate_entroadv,
    batch_denominator=True,
    decomposable=True,
    decomposition=(
        "the surrogate of each token's advantage plus a bonus from its own behaviour entropy"
    ),
)
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
    return ppo_token_loss(
        batch,
        policy,
        adv + bonus,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
        dynamic_sampling=dynamic_sampling,
        metrics={"bonus_mean": masked_mean(bonus, mask).detach()},
    )
