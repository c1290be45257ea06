"""GSPO (Zheng et al. 2025, arXiv 2507.18071): one length-normalised importance ratio per response.

    s_i = exp( (1/|o_i|) Σ_t (logπ_t − logπ_old,t) )                 (Eq. 7, a geometric mean)
    loss_i = max( −Â_i s_i, −Â_i clip(s_i, 1 − ε_low, 1 + ε_high) )   defaults ε 3e-4 / 4e-4 (§5.1)

Written per token in the paper's GSPO-token form (Eq. 13), which verl registers as `gspo`:
s_i,t = sg(s_i) · π_θ(o_t) / sg(π_θ(o_t)), so every token of a response has the value s_i and the
gradient s_i ∇logπ_t. With one advantage per response (GRPO's) this is GSPO itself, value and
gradient; written per token, quadrant isolation masks tokens as for every other objective (a kept
token's gradient is still scaled by its whole response's ratio s_i, which the masked tokens help
set). The paper's aggregation is a mean over responses of the per-response mean: `loss_agg:
seq-mean-token-mean` in `sweeps/objective/gspo.yaml`, which verl hard-codes.

`max_log_ratio` (10) caps log s_i,t before the exponential, as verl does for numerical safety (not
in the paper). No dual clip: neither the paper nor verl's loss has one.
"""

from __future__ import annotations

import torch

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
    token_mean,
    token_share,
)
from quadrants.objectives.common import validate_clip
from quadrants.objectives.registry import check_range, register_objective


def validate_gspo(*, clip_low: float, clip_high: float, max_log_ratio: float, **_: object) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high)
    check_range("max_log_ratio", max_log_ratio, low=0.0, low_open=True)


@register_objective(
    "gspo",
    validate=validate_gspo,
    zero_advantage_inert=True,
    decomposable=True,
    decomposition="each row's sequence ratio from its own tokens; micro-batches hold whole rows",
)
def gspo(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    max_log_ratio: float = 10.0,
) -> ObjectiveOutput:
    mask = batch.response_mask
    m = mask.to(policy.logp.dtype)
    log_ratio = (policy.logp - batch.old_logp) * m  # [B, T]
    seq_log_ratio = log_ratio.sum(-1) / m.sum(-1).clamp_min(1.0)  # [B], (1/|o_i|) Σ_t
    token_log_ratio = policy.logp - policy.logp.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(token_log_ratio.clamp(max=max_log_ratio))  # [B, T], value s_i
    adv = token_advantages(batch)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    policy_metrics = {
        # verl's pg_clipfrac: tokens whose clipped branch is the larger loss
        "clip_frac": token_share(clipped > unclipped, mask),
        "seq_ratio_mean": token_mean(ratio, mask),
        # one value per row, every row counted
        "seq_log_ratio_abs_mean": token_mean(
            seq_log_ratio.abs(), torch.ones_like(seq_log_ratio, dtype=torch.bool)
        ),
    }
    return ObjectiveOutput(per_token * mask, {}, policy_metrics=policy_metrics)
