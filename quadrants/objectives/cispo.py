"""CISPO (MiniMax 2025, MiniMax-M1, arXiv 2506.13585 §3.1): REINFORCE with clipped, detached
importance-sampling weights, so no token loses its gradient to the clip.

    r̂_t = clip(r_t, 1 − ε_low, 1 + ε_high)
    loss_t = −sg(r̂_t) · Â · logπ_θ(o_t)            normalised by Σ_i |o_i| (token-mean)

The gradient of a token is −r̂_t Â ∇logπ_t whether or not its ratio is clipped (PPO's clip would
give it none). The loss *value* is the paper's, −r̂ Â logπ (as in verl's `cispo`), so it is not on
the scale of the ratio-based objectives' losses; only its gradient is comparable.

Defaults: the paper imposes no lower bound on r̂ ("set ε_low^IS to a large value"): `clip_low: null`
here. ε_high: the paper tunes it but does not state the value used; 0.2 is verl's CISPO example
(examples/cispo_trainer/run_cispo_qwen2_5_0_5b_gsm8k.sh: clip_ratio_low=10, clip_ratio_high=0.2).
"""

from __future__ import annotations

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
    token_mean,
    token_share,
)
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.surrogate import importance_ratio


def validate_cispo(*, clip_low: float | None, clip_high: float, **_: object) -> None:
    if clip_low is not None:
        check_range("clip_low", clip_low, low=0.0)
    check_range("clip_high", clip_high, low=0.0)


@register_objective(
    "cispo",
    validate=validate_cispo,
    zero_advantage_inert=True,
    decomposable=True,
    decomposition="each token's clipped, detached ratio times its advantage and log-prob",
)
def cispo(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    clip_low: float | None = None,
    clip_high: float = 0.2,
) -> ObjectiveOutput:
    mask = batch.response_mask
    ratio = importance_ratio(policy.logp, batch.old_logp).detach()  # [B, T]
    weight = ratio.clamp(None if clip_low is None else 1.0 - clip_low, 1.0 + clip_high)
    adv = token_advantages(batch)
    per_token = -weight * adv * policy.logp
    policy_metrics = {
        "clip_frac": token_share(weight != ratio, mask),
        "clip_frac_high": token_share(ratio > 1.0 + clip_high, mask),
        "ratio_mean": token_mean(ratio, mask),
        "is_weight_mean": token_mean(weight, mask),
    }
    return ObjectiveOutput(per_token * mask, {}, policy_metrics=policy_metrics)
