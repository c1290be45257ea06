"""ARCA (Lafuente-Mercado, "Adapter-Residual Credit Assignment When Token Signals Degenerate",
arXiv 2606.00257): GRPO whose token advantages are weighted by where the LoRA adapter changes the
hidden state.

    r_t   = ||h_t^adapted − h_t^base||_2                 (behaviour policy, no grad; the base is the
                                                          same model with its adapters switched off)
    w_t   = r_t / mean_{t' in response} r_t'            (within-trajectory normalisation)
    w'_t  = min((1 − mix) + mix · w_t, max_weight)
    Â_t   = Â · w'_t                                    in the clipped surrogate, as GRPO

The abstract pins r_t and the GRPO setting (Qwen3-1.7B, MATH). Not pinned by what we could read, and
so named here: the layer r_t is read at (`model.lora.residual_layer`, default the final hidden
state), the normalisation (mean weight 1 per response), `mix` and `max_weight`
(ops/adapter_credit.py, docs/science.md). A response with r = 0 everywhere (peft's B = 0 before the
first update) gets w = 1: plain GRPO until the adapter has moved.

Requires `model.lora.enabled=true`, which the objective declares (`needs=("adapter_residual",)`,
checked at compose time by the run plan, quadrants/run_plan/composition.py). A batch without the
residual (`TokenBatch.adapter_residual` None: no adapters) is the r = 0 case.

Metrics: the weights' effective-token ratio and Gini per response, averaged (the paper's
degeneracy diagnostics), and their max.
"""

from __future__ import annotations

from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch, token_advantages
from quadrants.objectives.common import ppo_token_loss, validate_clip
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.adapter_credit import arca_weights, effective_token_ratio, gini


def validate_arca(
    *,
    mix: float,
    max_weight: float | None,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    check_range("mix", mix, low=0.0, high=1.0)
    if max_weight is not None:
        check_range("max_weight", max_weight, low=1.0)


@register_objective(
    "arca",
    validate=validate_arca,
    needs=("adapter_residual",),  # the credit is the LoRA adapter's residual
    zero_advantage_inert=True,
    decomposable=True,
    decomposition="credit weights from each response's own adapter residual (per-row mean)",
)
def arca(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    mix: float = 1.0,
    max_weight: float | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = None,
) -> ObjectiveOutput:
    mask = batch.response_mask
    residual = batch.adapter_residual
    if residual is None:  # no adapters: the residual is 0 on every token
        residual = batch.old_logp.new_zeros(batch.old_logp.shape)
    weights = arca_weights(residual, mask, mix=mix, max_weight=max_weight)  # [B, T]
    rows = mask.any(-1).float()  # responses with tokens; a masked mean (no boolean indexing)
    count = rows.sum().clamp_min(1)
    metrics = {
        "arca_effective_token_ratio": (
            (effective_token_ratio(weights, mask) * rows).sum() / count
        ).detach(),
        "arca_weight_gini": ((gini(weights, mask) * rows).sum() / count).detach(),
        "arca_weight_max": weights.max().detach(),
    }
    return ppo_token_loss(
        batch,
        policy,
        token_advantages(batch) * weights,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
        metrics=metrics,
    )
