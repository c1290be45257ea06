"""DAPO (Yu et al. 2025): GRPO + clip-higher (ε_low 0.2, ε_high 0.28),
token-mean loss, dynamic sampling.

Dynamic sampling drops groups whose rewards are all equal: they have zero advantage, and keeping
them only dilutes the token-mean normaliser. Here they are removed from the denominator (equivalent
to dropping them from the batch); DAPO also over-samples to refill the batch, which the loop does
not do (the effective batch shrinks instead; `kept_group_frac` reports by how much). Token-mean is
the `objective.loss_agg` of `sweeps/objective/dapo.yaml`; overlong reward shaping is not
implemented.
"""

from __future__ import annotations

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
)
from quadrants.objectives.common import ppo_token_loss, validate_clip
from quadrants.objectives.registry import register_objective


@register_objective(
    "dapo",
    validate=validate_clip,
    batch_denominator=True,
    zero_advantage_inert=True,
    decomposable=True,
    decomposition=(
        "GRPO's per-token surrogate; the denominator drops constant groups, a rollout-level flag "
        "on each row"
    ),
)
def dapo(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = None,
    dynamic_sampling: bool = True,
) -> ObjectiveOutput:
    return ppo_token_loss(
        batch,
        policy,
        token_advantages(batch),
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
        dynamic_sampling=dynamic_sampling,
    )
