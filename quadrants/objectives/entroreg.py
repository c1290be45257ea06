"""EntroReg: the clipped surrogate minus an entropy bonus, loss_t = surrogate_t − β · H_t.

H_t is the *current* policy's full-vocabulary entropy with gradient (the step computes it in the
same chunked pass as the log-probs). Aggregated with the rest of the loss, so under token-mean the
bonus is exactly −β · (mean token entropy). β = 0.001 is common; β is a free parameter. Built on the
DAPO recipe (clip-higher, dynamic sampling as in `dapo`); dropped groups lose their bonus too.
"""

from __future__ import annotations

from torch import Tensor

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
    token_mean,
)
from quadrants.objectives.common import clipped_terms, drop_constant_groups, validate_clip
from quadrants.objectives.registry import check_range, register_objective


def validate_entroreg(
    *,
    beta: float,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    check_range("beta", beta, low=0.0)


@register_objective(
    "entroreg",
    needs_entropy=True,
    validate=validate_entroreg,
    batch_denominator=True,
    decomposable=True,
    decomposition="the per-token surrogate minus beta times the token's own current entropy",
)
def entroreg(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    beta: float = 0.001,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = None,
    dynamic_sampling: bool = True,
) -> ObjectiveOutput:
    if policy.entropy is None:
        raise ValueError(
            "entroreg needs the current policy's entropy (PolicyOutput.entropy is None)"
        )
    mask = batch.response_mask
    terms, policy_metrics = clipped_terms(
        batch,
        policy,
        token_advantages(batch),
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
    )
    policy_metrics["current_entropy"] = token_mean(policy.entropy, mask)
    metrics: dict[str, Tensor] = {}
    denominator_mask = drop_constant_groups(batch, dynamic_sampling, metrics)
    return ObjectiveOutput(
        (terms.per_token_loss - beta * policy.entropy) * mask,
        metrics,
        denominator_mask,
        policy_metrics=policy_metrics,
    )
