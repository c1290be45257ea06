"""Archer (Wang et al. 2025, arXiv 2507.15778, "Stabilizing Knowledge, Promoting Reasoning:
Dual-Token Constraints for RLVR"): one update, two constraints by token entropy.

Within each response, tokens whose entropy is above its `quantile` (0.8) are high-entropy (the
reasoning "forks"), the rest low-entropy (knowledge). Both stay in the update; none is masked out:

    low-entropy  t:  PPO clip [1 − 0.2, 1 + 0.2] and a KL to the reference, objective.kl_coef 0.001
    high-entropy t:  PPO clip [1 − 0.5, 1 + 0.5] and no KL (`high_entropy_kl_scale` 0)
    dual clip c = 10 on negative advantages

Defaults are the authors' training script (wizard-III/ArcherCodeR @ 8a1785b,
scripts/train/run_archer_qwen2.5_1.5b_code.sh: token_entropy_quantile 0.8, low 0.2/0.2, high
0.5/0.5, kl_loss_coef 0.001 low_var_kl (our k3), high_entropy_kl_loss_scale_coef 0,
clip_ratio_c 10). Their loss is verl's token-mean of ONE sequence (ppo_micro_batch_size_per_gpu=1,
use_dynamic_bsz=False), divided by the gradient-accumulation count: a mean within each response,
averaged over responses, which is `objective.loss_agg: seq-mean-token-mean` in
`sweeps/objective/archer.yaml`; `+trainer.rejection_sample=True` drops the groups whose rewards are
all 0 or all 1 (dapo/dapo_ray_trainer.py): `dynamic_sampling` on. The KL coefficient is the step's
`objective.kl_coef` (0.001 in the YAML, so the reference model is loaded); this objective only
weights it per token (`ObjectiveOutput.kl_weight`).

Open choices, each named:
- `scope`: `response` (a quantile per response, torch.nanquantile over its tokens, as the authors'
  dp_actor.py) or `mini_batch` (one quantile over the batch's response tokens).
- `entropy_source`: `current` (the updating policy's entropy, detached, recomputed each pass: the
  authors' code) or `behaviour` (the rollout policy's, fixed for the step).
- `kl_normaliser`: how the KL of an entropy group (low or high) is averaged. The authors write
  agg_loss(kld, low_mask) + agg_loss(kld, high_mask) per micro-batch of one sequence, so each
  response's low-entropy KL is averaged over that response's own low-entropy tokens.
  `response` (theirs): a low token of response i weighs |o_i| / |low_i| (high: |o_i| / |high_i|),
  exact under seq-mean-token-mean, whose 1/|o_i| it cancels; `entropy_group`: one average per
  group over the batch this objective is called on (weight |tokens| / |low|, exact under
  token-mean: the authors' formula on a many-sequence micro-batch); `response_tokens`: one KL
  averaged over all response tokens, as every other objective's.
- `dynamic_sampling`: drop the constant-reward groups from the batch (the authors' rejection
  sampling; their rule is all-0 or all-1 rewards, which is all-equal for 0/1 rewards).
- `high_entropy_kl_scale`: the high-entropy tokens' KL weight relative to objective.kl_coef (the
  authors' is an absolute coefficient; both are 0 in their recipe).
- `minibatch_scale`: `nominal` (the authors'): each mini-batch's loss is divided by its nominal
  size, so a mini-batch with dropped groups is scaled by kept / nominal rows (their dp_actor.py
  `loss = policy_loss / self.gradient_accumulation`, a fixed count; objectives/loss.py
  `nominal_scale`); `kept`: over the kept rows only (the suite's first choice).
A token exactly at the quantile is low-entropy (the authors' `<=`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
)
from quadrants.objectives.batch import fraction as token_fraction
from quadrants.objectives.common import drop_constant_groups, validate_clip
from quadrants.objectives.metrics import surrogate_metrics
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.quadrants import masked_quantile
from quadrants.ops.surrogate import clipped_surrogate

SCOPES = ("response", "mini_batch")
ENTROPY_SOURCES = ("current", "behaviour")
KL_NORMALISERS = ("response", "entropy_group", "response_tokens")
# `nominal` (the authors'): each mini-batch's loss over its nominal row count, so a mini-batch
# whose constant groups were dropped is scaled by kept / nominal rows; `kept`: over the rows it
# keeps (the suite's first choice). objectives/loss.py `nominal_scale`
MINIBATCH_SCALES = ("nominal", "kept")


def validate_archer(
    *,
    quantile: float,
    scope: str,
    entropy_source: str,
    kl_normaliser: str,
    high_entropy_kl_scale: float,
    low_clip_low: float,
    low_clip_high: float,
    high_clip_low: float,
    high_clip_high: float,
    clip_ratio_c: float | None,
    minibatch_scale: str = "nominal",
    **_: object,
) -> None:
    check_range("quantile", quantile, low=0.0, high=1.0)
    for key, value, allowed in (
        ("minibatch_scale", minibatch_scale, MINIBATCH_SCALES),
        ("scope", scope, SCOPES),
        ("entropy_source", entropy_source, ENTROPY_SOURCES),
        ("kl_normaliser", kl_normaliser, KL_NORMALISERS),
    ):
        if value not in allowed:
            raise ValueError(f"{key}={value!r} is unknown; choose one of {list(allowed)}")
    check_range("high_entropy_kl_scale", high_entropy_kl_scale, low=0.0)
    for prefix, low, high in (
        ("low", low_clip_low, low_clip_high),
        ("high", high_clip_low, high_clip_high),
    ):
        check_range(f"{prefix}_clip_low", low, low=0.0, high=1.0, high_open=True)
        check_range(f"{prefix}_clip_high", high, low=0.0)
    validate_clip(clip_low=0.0, clip_high=0.0, clip_ratio_c=clip_ratio_c)


def _needs_current_entropy(params: Mapping[str, Any]) -> bool:
    return params.get("entropy_source") == "current"


def high_entropy_mask(
    entropy: Tensor, response_mask: Tensor, *, quantile: float, scope: str
) -> Tensor:
    """[B, T] bool: response tokens whose entropy is above the `quantile` of their response
    (scope="response") or of the batch's response tokens (scope="mini_batch")."""
    if scope == "response":
        masked = torch.where(response_mask, entropy.float(), torch.nan)
        threshold = torch.nanquantile(masked, quantile, dim=-1, keepdim=True)  # [B, 1]
    else:
        threshold = masked_quantile(entropy, response_mask, quantile)
    return (entropy > threshold) & response_mask


@register_objective(
    "archer",
    needs_entropy=_needs_current_entropy,
    validate=validate_archer,
    batch_denominator=lambda params: bool(params["dynamic_sampling"]),
    zero_advantage_inert=True,
    decomposable=lambda params: (
        params["scope"] == "response" and params["kl_normaliser"] != "entropy_group"
    ),
    decomposition=(
        "scope=response takes each row's own entropy quantile; scope=mini_batch takes a quantile "
        "over the mini-batch's tokens and kl_normaliser=entropy_group the mini-batch's token "
        "counts, both batch statistics"
    ),
    nominal_rows=lambda params: params["minibatch_scale"] == "nominal",
)
def archer(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    quantile: float = 0.8,
    scope: str = "response",
    entropy_source: str = "current",
    low_clip_low: float = 0.2,
    low_clip_high: float = 0.2,
    high_clip_low: float = 0.5,
    high_clip_high: float = 0.5,
    clip_ratio_c: float | None = 10.0,
    high_entropy_kl_scale: float = 0.0,
    kl_normaliser: str = "response",
    dynamic_sampling: bool = True,
    minibatch_scale: str = "nominal",
) -> ObjectiveOutput:
    mask = batch.response_mask
    if entropy_source == "current":
        if policy.entropy is None:
            raise ValueError("archer with entropy_source='current' needs PolicyOutput.entropy")
        entropy = policy.entropy.detach()
    else:
        entropy = batch.entropy
    high = high_entropy_mask(entropy, mask, quantile=quantile, scope=scope)  # [B, T]
    low = mask & ~high
    adv = token_advantages(batch)
    kwargs = {"clip_ratio_c": clip_ratio_c}
    low_terms = clipped_surrogate(
        policy.logp, batch.old_logp, adv, clip_low=low_clip_low, clip_high=low_clip_high, **kwargs
    )
    high_terms = clipped_surrogate(
        policy.logp, batch.old_logp, adv, clip_low=high_clip_low, clip_high=high_clip_high, **kwargs
    )
    per_token = torch.where(high, high_terms.per_token_loss, low_terms.per_token_loss)
    policy_metrics = {
        f"{side}_entropy/{k}": v
        for side, terms, over in (("low", low_terms, low), ("high", high_terms, high))
        for k, v in surrogate_metrics(terms, over, dual_clip=clip_ratio_c is not None).items()
    }
    # a quantile's share of each response (or of the mini-batch) whatever the entropies: a batch
    # metric even when the split reads the current entropy
    metrics = {"high_entropy_frac": token_fraction(high, mask)}
    denominator_mask = drop_constant_groups(batch, dynamic_sampling, metrics)
    kl_weight = entropy_group_kl_weights(
        high, low, kl_normaliser=kl_normaliser, high_scale=high_entropy_kl_scale
    )
    return ObjectiveOutput(
        per_token * mask, metrics, denominator_mask, kl_weight.detach(), policy_metrics
    )


def entropy_group_kl_weights(
    high: Tensor, low: Tensor, *, kl_normaliser: str, high_scale: float
) -> Tensor:
    """[B, T] float: each token's weight on the step's KL (0 off the response), so that the loss's
    aggregation of weight * KL is each entropy group's own KL average (`kl_normaliser`).

    `response`: a low token of response i weighs |o_i| / |low_i| and a high one high_scale ·
    |o_i| / |high_i|, so seq-mean-token-mean's Σ_t / |o_i| gives mean_{low_i} KL + high_scale ·
    mean_{high_i} KL per response. `entropy_group`: the same with the batch's counts, for
    token-mean. `response_tokens`: 1 and high_scale.
    """
    low, high = low.float(), high.float()
    if kl_normaliser == "response":  # counts per response, [B, 1]
        tokens = (low + high).sum(-1, keepdim=True)
        low_count = low.sum(-1, keepdim=True)
        high_count = high.sum(-1, keepdim=True)
    elif kl_normaliser == "entropy_group":  # counts over the batch, []
        tokens, low_count, high_count = (low + high).sum(), low.sum(), high.sum()
    else:
        return low + high_scale * high
    low_w = tokens / low_count.clamp_min(1.0)
    high_w = high_scale * tokens / high_count.clamp_min(1.0)
    return low * low_w + high * high_w
