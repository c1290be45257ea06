"""Pieces shared by the objectives, so that no objective imports another: the ranges of the clipped
surrogate's parameters, the clipped surrogate of an advantage with its metrics, and DAPO's dynamic
sampling (constant-reward groups out of the denominator).
"""

from __future__ import annotations

from torch import Tensor

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyMetric,
    PolicyOutput,
    TokenBatch,
    fraction,
)
from quadrants.objectives.metrics import surrogate_metrics
from quadrants.objectives.registry import check_range
from quadrants.ops.surrogate import SurrogateTerms, clipped_surrogate


def validate_clip(
    *, clip_low: float, clip_high: float, clip_ratio_c: float | None = None, **_: object
) -> None:
    """Ranges shared by every clipped objective: 0 <= ε_low < 1, ε_high >= 0, dual clip null or
    c > 1."""
    check_range("clip_low", clip_low, low=0.0, high=1.0, high_open=True)
    check_range("clip_high", clip_high, low=0.0)
    if clip_ratio_c is not None:
        # verl asserts the same: c <= 1 would cap a negative-advantage token below its unclipped
        # loss at r = 1
        check_range("clip_ratio_c", clip_ratio_c, low=1.0, low_open=True)


def drop_constant_groups(
    batch: TokenBatch, enabled: bool, metrics: dict[str, Tensor]
) -> Tensor | None:
    """The denominator mask without constant-reward groups (None when disabled); adds its metrics
    (they read the batch only) to `metrics`.

    Shared by every objective built on the DAPO recipe (dapo, hapo, forking, entroadv, entroreg,
    ktae) and by those whose authors' trainers reject constant groups (archer, adaptive_entropy).
    """
    if not enabled:
        return None
    kept = ~batch.constant_group_mask  # [B], decided on the full rollout batch
    denominator_mask = batch.response_mask & kept[:, None]
    metrics["kept_group_frac"] = kept.float().mean().detach()
    metrics["dynamic_sampling_token_frac"] = fraction(denominator_mask, batch.response_mask)
    return denominator_mask


def clipped_terms(
    batch: TokenBatch,
    policy: PolicyOutput,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None,
) -> tuple[SurrogateTerms, dict[str, PolicyMetric]]:
    """The clipped surrogate of `advantages` ([B, T]) and its metrics over the response tokens
    (they read the policy: `ObjectiveOutput.policy_metrics`).

    For objectives that do more with the terms than mask them (a weight, a clip mask, an entropy
    bonus); the others return `ppo_token_loss` directly.
    """
    terms = clipped_surrogate(
        policy.logp,
        batch.old_logp,
        advantages,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
    )
    return terms, surrogate_metrics(terms, batch.response_mask, dual_clip=clip_ratio_c is not None)


def ppo_token_loss(
    batch: TokenBatch,
    policy: PolicyOutput,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None,
    dynamic_sampling: bool = False,
    metrics: dict[str, Tensor] | None = None,
) -> ObjectiveOutput:
    """The clipped surrogate of `advantages` ([B, T]) on every response token, as an objective's
    output: its metrics (policy metrics), the objective's own `metrics` (which must read the batch
    only), then (with `dynamic_sampling`) the denominator mask without constant-reward groups and
    its metrics.
    """
    terms, policy_metrics = clipped_terms(
        batch,
        policy,
        advantages,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
    )
    out = dict(metrics or {})
    denominator_mask = drop_constant_groups(batch, dynamic_sampling, out)
    return ObjectiveOutput(
        terms.per_token_loss * batch.response_mask,
        out,
        denominator_mask,
        policy_metrics=policy_metrics,
    )
