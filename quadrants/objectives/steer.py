"""STEER (Hao et al. 2025, arXiv 2510.10150, "Rethinking Entropy Interventions in RLVR: An Entropy
Change Perspective"): the clipped surrogate with each token's loss reweighted by its estimated
one-step entropy change.

    Ω_t = (Â / π_old(o_t)) · p_t (1 − p_t) · (log p_t + H_t)     p_t = π_θ(o_t) in [1e-8, 1 − 1e-8]
    w_t = a decreasing map of |Ω_t| onto [w_min, w_max], no gradient
    loss_t = w_t · clipped surrogate_t (ε 0.2 / 0.28, dual clip c = 10)

H_t is the behaviour entropy (the authors' trainer hands the old-log-prob pass's entropy to the
loss). The min and max of |Ω| are taken over the response tokens of each block of `weight_rows`
consecutive rows of the batch the objective is called on (the last block may be shorter): their
function runs once per micro-batch, and run/run_linear.sh sets ppo_micro_batch_size_per_gpu=8 with
verl's fixed-size micro-batches, consecutive rows of the mini-batch; `weight_rows: null` takes one
range over the whole batch. `mapping`:
- `linear`: w = w_max − (|Ω| − min|Ω|)(w_max − w_min)/(max|Ω| − min|Ω|), (w_min + w_max)/2 when all
  |Ω| are equal (the authors' run_linear.sh: 0.8 / 1.2);
- `exponential`: w = clamp(exp(−k|Ω|), w_min, 1) with k = −ln(w_min) / max(max|Ω|, 0.02) (their
  run_exp.sh: w_min 0.8; w_max is unused).
Defaults: the authors' code and scripts (zz-haooo/STEER, verl/trainer/ppo/core_algos.py
compute_token_weights and compute_policy_loss_with_entropy; run/run_linear.sh). Their README runs
both mappings; which one the paper's headline table uses we could not pin down from the code.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
    token_mean,
)
from quadrants.objectives.common import clipped_terms, validate_clip
from quadrants.objectives.registry import check_range, register_objective

MAPPINGS = ("linear", "exponential")
_P_EPS = 1e-8  # the authors' clamp of p and π_old


def entropy_change_weights(
    advantages: Tensor,
    entropy: Tensor,
    old_logp: Tensor,
    logp: Tensor,
    response_mask: Tensor,
    *,
    weight_min: float,
    weight_max: float,
    mapping: str,
    weight_rows: int | None = None,
) -> Tensor:
    """STEER's token weights w_t, [B, T] float, 0 off the response (no gradient); the min and max
    of |Ω| per block of `weight_rows` consecutive rows (None: one block)."""
    with torch.no_grad():
        p = logp.exp().clamp(_P_EPS, 1.0 - _P_EPS)
        old_p = old_logp.exp().clamp(_P_EPS, 1.0)
        omega = (advantages / old_p) * p * (1.0 - p) * (p.log() + entropy)
        omega = torch.where(torch.isfinite(omega), omega, torch.zeros_like(omega)).abs()
        mask = response_mask.bool()
        # min and max over each block's response tokens, [B, 1] (an empty block gives weight 0)
        rows = omega.shape[0]
        size = weight_rows or max(rows, 1)
        blocks = -(-rows // size)
        block = torch.arange(rows, device=omega.device) // size  # [B], each row's block
        row_low = torch.where(mask, omega, torch.inf).amin(-1)  # [B]
        row_high = torch.where(mask, omega, -torch.inf).amax(-1)
        low = row_low.new_full((blocks,), torch.inf).scatter_reduce(0, block, row_low, "amin")
        high = row_high.new_full((blocks,), -torch.inf).scatter_reduce(0, block, row_high, "amax")
        low, high = low[block][:, None], high[block][:, None]
        if mapping == "linear":
            spread = (high - low).clamp_min(torch.finfo(omega.dtype).tiny)
            scale = (weight_max - weight_min) / spread
            weights = torch.where(
                high > low,
                weight_max - (omega - low) * scale,
                torch.full_like(omega, (weight_min + weight_max) / 2),
            ).clamp(weight_min, weight_max)
        else:
            k = -math.log(weight_min) / high.clamp_min(0.02)
            weights = torch.exp(-k * omega).clamp(weight_min, 1.0)
        return weights * mask


def validate_steer(
    *,
    weight_min: float,
    weight_max: float,
    mapping: str,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None,
    weight_rows: int | None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    if weight_rows is not None and (isinstance(weight_rows, bool) or weight_rows < 1):
        raise ValueError(
            f"weight_rows={weight_rows!r} must be a whole number >= 1 (rows per min/max range of "
            "|Omega|; the authors' 8) or null (the whole batch)"
        )
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping={mapping!r} is unknown; choose one of {list(MAPPINGS)}")
    check_range("weight_min", weight_min, low=0.0, low_open=True)
    if mapping == "exponential":
        check_range("weight_min", weight_min, low=0.0, high=1.0, low_open=True)
    if not weight_min <= weight_max:
        raise ValueError(f"weight_min={weight_min} must be <= weight_max={weight_max}")


@register_objective(
    "steer",
    validate=validate_steer,
    zero_advantage_inert=True,
    decomposable=False,
    decomposition=(
        "token weights are scaled by the min and max of |Omega|, from the current log-probs, over"
        " blocks of consecutive mini-batch rows"
    ),
)
def steer(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    weight_min: float = 0.8,
    weight_max: float = 1.2,
    mapping: str = "linear",
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = 10.0,
    weight_rows: int | None = 8,
) -> ObjectiveOutput:
    mask = batch.response_mask
    adv = token_advantages(batch)
    terms, policy_metrics = clipped_terms(
        batch,
        policy,
        adv,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
    )
    weights = entropy_change_weights(
        adv,
        batch.entropy,
        batch.old_logp,
        policy.logp,
        mask,
        weight_min=weight_min,
        weight_max=weight_max,
        mapping=mapping,
        weight_rows=weight_rows,
    )
    policy_metrics["token_weight_mean"] = token_mean(weights, mask)  # from the current log-probs
    return ObjectiveOutput(terms.per_token_loss * weights * mask, {}, policy_metrics=policy_metrics)
