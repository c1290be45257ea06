"""W-REINFORCE (Zhu et al. 2025, arXiv 2506.01347): REINFORCE with positive samples down-weighted.

    L = λ · PSR + NSR,   PSR = −E_{y correct}[log π(y)],   NSR = −E_{y wrong}[−log π(y)]

Per token: loss_t = −w · r_t with w = λ for a correct response and w = −1 for a wrong one, r_t the
importance ratio (so extra epochs on the same rollouts stay correctly weighted; at r = 1 its
gradient is exactly −w ∇logπ_t). No advantage normalisation and no clip: groups with all-equal
rewards still get gradient, as in the paper. A response is correct when its graded correctness
(`TokenBatch.correct`: the reward without the overlong penalty's shaping) > `correct_above` (0.5 for
0/1 rewards): a correct answer near the length limit, whose shaped reward is below 0.5, is still
reinforced by λ, not pushed down. Quadrant polarity still follows the GRPO advantage sign.
"""

from __future__ import annotations

import torch

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_mean,
)
from quadrants.objectives.batch import fraction as token_fraction
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.surrogate import importance_ratio


def validate_w_reinforce(*, lam: float, correct_above: float, **_: object) -> None:
    check_range("lam", lam, low=0.0)


@register_objective(
    "w_reinforce",
    validate=validate_w_reinforce,
    decomposable=True,
    decomposition="each token's ratio weighted by its row's correctness",
)
def w_reinforce(
    batch: TokenBatch, policy: PolicyOutput, *, lam: float = 0.1, correct_above: float = 0.5
) -> ObjectiveOutput:
    mask = batch.response_mask
    correct = batch.correct > correct_above  # [B]
    weight = torch.where(
        correct, torch.full_like(batch.rewards, lam), torch.full_like(batch.rewards, -1.0)
    )
    ratio = importance_ratio(policy.logp, batch.old_logp)
    metrics = {"positive_frac": token_fraction(correct[:, None].expand_as(mask), mask)}
    return ObjectiveOutput(
        -weight.float()[:, None] * ratio * mask,
        metrics,
        policy_metrics={"ratio_mean": token_mean(ratio, mask)},
    )
