"""GRPO: the clipped surrogate with one group-normalised advantage broadcast to every token.

loss_t = max(-A r_t, -A clip(r_t, 1 - ε_low, 1 + ε_high))   (Shao et al. 2024, DeepSeekMath §4)

`clip_ratio_c` (every clipped objective has it; null = off) adds verl's dual clip for A < 0:
loss_t = min(loss_t, -A c) (ops.surrogate).

The normaliser is the step's loss aggregation (`objective.loss_agg`); the original GRPO averages per
sequence first ("seq-mean-token-mean"), the paper's runs use token-mean (DAPO). The optional KL to a
reference policy is added by the step for every objective (`objective.kl_coef`, off by default).
"""

from __future__ import annotations

from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch, token_advantages
from quadrants.objectives.common import ppo_token_loss, validate_clip
from quadrants.objectives.registry import register_objective


@register_objective(
    "grpo",
    validate=validate_clip,
    zero_advantage_inert=True,
    decomposable=True,
    decomposition="the clipped surrogate of each token's own ratio and its row's advantage",
)
def grpo(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = None,
) -> ObjectiveOutput:
    return ppo_token_loss(
        batch,
        policy,
        token_advantages(batch),
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
    )
