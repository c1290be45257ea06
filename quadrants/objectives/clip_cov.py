"""Clip-Cov (Cui et al. 2025, arXiv 2505.22617 §4): detach a few high-covariance tokens.

cov_t = (A_t − mean A)(logπ_t − mean logπ) over the mini-batch's response tokens. Among the tokens
with lb < cov_t < ub that the ordinary ratio clip has not already clipped, k =
max(floor(fraction · N), 1) tokens (N = response tokens in the mini-batch; fewer if fewer qualify)
are drawn uniformly at random and get zero gradient. Everything else is the clipped surrogate.
`fraction` is a fraction (2e-4), not a percent; fraction = 0 turns the detaching off
(plain clipped surrogate). Scope: the mini-batch, as in the reference implementation
(it runs per micro-batch). The draw comes from the `generator` the loss is given
(objectives/loss.py `compute_loss`), never from torch's default generators: the update hands it a
generator of the step's `update` stream (quadrants/seeds.py; train/update.py
`objective_generator`), so every rank draws the same tokens of the whole mini-batch, as one process
and a resumed run do. verl's Clip-Cov (verl/trainer/ppo/core_algos.py
`compute_policy_loss_clip_cov`) draws from the global generator, over the rank's own micro-batch.
"""

from __future__ import annotations

import torch

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
    token_share,
)
from quadrants.objectives.common import clipped_terms, validate_clip
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.covariance import random_subset_mask, selection_count, token_covariance


def validate_clip_cov(
    *,
    fraction: float,
    cov_lb: float,
    cov_ub: float,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    check_range("fraction", fraction, low=0.0, high=1.0)
    if not cov_lb < cov_ub:
        raise ValueError(f"cov_lb={cov_lb} must be < cov_ub={cov_ub}")


@register_objective(
    "clip_cov",
    validate=validate_clip_cov,
    zero_advantage_inert=True,
    decomposable=False,
    decomposition=(
        "the covariance is centred on the mini-batch's means, and k of its candidates are drawn "
        "from the whole mini-batch"
    ),
)
def clip_cov(
    batch: TokenBatch,
    policy: PolicyOutput,
    generator: torch.Generator | None = None,
    *,
    fraction: float = 2e-4,
    cov_lb: float = 1.0,
    cov_ub: float = 5.0,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = None,
) -> ObjectiveOutput:
    """`generator`: where the random subset is drawn from (not a hyper-parameter: the registry's
    keys are the keyword-only parameters); required."""
    if generator is None:
        raise ValueError(
            "clip_cov draws its subset from the generator it is given: call it through "
            "objectives/loss.py compute_loss(..., generator=torch.Generator(device).manual_seed(s))"
            " (the update hands it the step's `update` stream: train/update.py objective_generator)"
        )
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
    cov = token_covariance(adv, policy.logp, mask)  # [B, T]
    candidates = mask & ~terms.clipped_mask & (cov > cov_lb) & (cov < cov_ub)
    k = selection_count(fraction, int(mask.sum()))
    detached = random_subset_mask(candidates, k, generator)  # [B, T]
    # both follow the current log-probs (the covariance, the clipped tokens)
    policy_metrics["selected_frac"] = token_share(detached, mask)
    policy_metrics["candidate_frac"] = token_share(candidates, mask)
    return ObjectiveOutput(
        terms.per_token_loss * (mask & ~detached), {}, policy_metrics=policy_metrics
    )
