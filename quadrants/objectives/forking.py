"""Forking tokens / the 80/20 rule (Wang et al. 2025, arXiv 2506.01939): the DAPO loss on the top ρ
of tokens by entropy only.

Implementations disagree on three choices; each is a named parameter here:
- `scope`: the population the top-ρ is taken over: `rollout_batch` (all response tokens of the step,
  default) or `mini_batch` (the tokens of the current update mini-batch, as
  per-micro-batch code does).
- `entropy_source`: `behaviour` (the rollout policy's entropy, fixed during the update, default) or
  `current` (the updating policy's detached entropy; only with scope=mini_batch).
- `denominator`: `selected_tokens` (token-mean over the selected tokens, as masking the loss mask
  does) or `all_response_tokens` (unselected tokens stay in the normaliser, as quadrant isolation).
Dynamic sampling (default on) drops constant-reward groups from the denominator, as in `dapo`, and
from the population the top ρ is taken over: in DAPO those groups were never in the batch, so the
ρ selected are ρ of the tokens the loss trains on (counting them would move the threshold by their
entropies: all-wrong groups of high entropy could leave the trained groups no token at all).
A token is selected when H_t >= the (1 − ρ) quantile (linear interpolation); ties can select
slightly more than ρ, which `selected_frac` (selected / trained tokens) reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyMetric,
    PolicyOutput,
    TokenBatch,
    fraction,
    token_advantages,
)
from quadrants.objectives.common import clipped_terms, drop_constant_groups, validate_clip
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.quadrants import masked_quantile, quantile_of_sorted

SCOPES = ("rollout_batch", "mini_batch")
ENTROPY_SOURCES = ("behaviour", "current")
DENOMINATORS = ("selected_tokens", "all_response_tokens")


def validate_forking(
    *,
    rho: float,
    scope: str,
    entropy_source: str,
    denominator: str,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    check_range("rho", rho, low=0.0, high=1.0, low_open=True)
    for key, value, allowed in (
        ("scope", scope, SCOPES),
        ("entropy_source", entropy_source, ENTROPY_SOURCES),
        ("denominator", denominator, DENOMINATORS),
    ):
        if value not in allowed:
            raise ValueError(f"{key}={value!r} is unknown; choose one of {list(allowed)}")
    if scope == "rollout_batch" and entropy_source == "current":
        raise ValueError(
            "entropy_source='current' needs scope='mini_batch' (the current entropy of the "
            "whole rollout batch is never computed)"
        )


def _needs_current_entropy(params: Mapping[str, Any]) -> bool:
    return params.get("entropy_source") == "current"


@register_objective(
    "forking",
    needs_entropy=_needs_current_entropy,
    validate=validate_forking,
    batch_denominator=lambda params: not _needs_current_entropy(params),
    zero_advantage_inert=True,
    decomposable=lambda params: params["scope"] == "rollout_batch",
    decomposition=(
        "scope=rollout_batch selects by a threshold from the whole rollout batch's behaviour "
        "entropies; scope=mini_batch takes the quantile over the mini-batch's tokens, a batch "
        "statistic"
    ),
)
def forking(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    rho: float = 0.2,
    scope: str = "rollout_batch",
    entropy_source: str = "behaviour",
    denominator: str = "selected_tokens",
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = None,
    dynamic_sampling: bool = True,
) -> ObjectiveOutput:
    mask = batch.response_mask
    if entropy_source == "current":
        if policy.entropy is None:
            raise ValueError("forking with entropy_source='current' needs PolicyOutput.entropy")
        entropy = policy.entropy.detach()
    else:
        entropy = batch.entropy
    terms, policy_metrics = clipped_terms(
        batch,
        policy,
        token_advantages(batch),
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
    )
    metrics: dict[str, Tensor] = {}
    kept = drop_constant_groups(batch, dynamic_sampling, metrics)
    trained = mask if kept is None else kept  # [B, T], the tokens the loss trains on
    if scope == "rollout_batch":
        population = batch.rollout_entropy_sorted if kept is None else batch.mixed_entropy_sorted
        threshold = quantile_of_sorted(population, 1.0 - rho)
    else:
        threshold = masked_quantile(entropy, trained, 1.0 - rho)
    selected = (entropy >= threshold) & trained  # [B, T]
    # the quantile's share of the trained tokens whatever the entropies: a batch metric
    metrics["selected_frac"] = fraction(selected, trained)
    if entropy_source == "current":  # the threshold is a quantile of the current entropy
        policy_metrics["entropy_threshold"] = PolicyMetric(entropy, trained, 1.0 - rho)
    else:  # of the behaviour entropies
        metrics["entropy_threshold"] = threshold.detach().float()  # a 0-dim tensor
    denominator_mask = selected if denominator == "selected_tokens" else trained
    return ObjectiveOutput(
        terms.per_token_loss * selected, metrics, denominator_mask, policy_metrics=policy_metrics
    )
