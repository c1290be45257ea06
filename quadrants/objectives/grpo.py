"""GRPO: the clipped surrogate with one group-normalised advantage broadcast to every token.

loss_t = max(-A r_t, -A clip(r_t, 1 - ε_low, 1 + ε_high))   (Shao et al. 2024, DeepSeekMath §4)

The normaliser is the step's loss aggregation (`objective.loss_agg`); the original GRPO averages per
sequence first ("seq-mean-token-mean"), the paper's runs use token-mean (DAPO). The optional KL to a
reference policy is added by the step for every objective (`objective.kl_coef`, off by default).
"""

from __future__ import annotations

from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch, token_advantages
from quadrants.objectives.metrics import surrogate_metrics
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.surrogate import clipped_surrogate


def validate_clip(*, clip_low: float, clip_high: float, **_: object) -> None:
    """Ranges shared by every clipped objective: 0 <= ε_low < 1, ε_high >= 0."""
    check_range("clip_low", clip_low, low=0.0, high=1.0, high_open=True)
    check_range("clip_high", clip_high, low=0.0)


@register_objective("grpo", validate=validate_clip)
def grpo(batch: TokenBatch, policy: PolicyOutput, *, clip_low: float = 0.2, clip_high: float = 0.2) -> ObjectiveOutput:
    terms = clipped_surrogate(
        policy.logp, batch.old_logp, token_advantages(batch), clip_low=clip_low, clip_high=clip_high
    )
    mask = batch.response_mask
    return ObjectiveOutput(terms.per_token_loss * mask, surrogate_metrics(terms, mask))
