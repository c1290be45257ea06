"""Adaptive entropy control (Skywork-OR1, He et al. 2025, arXiv 2505.22312 §3): an entropy bonus
whose coefficient is steered, step by step, towards a target entropy.

    loss_t = surrogate_t − c_k · 1[e_{k−1} < target] · H_t          (H_t: current policy, with grad)
    after step k, with e_k the step's entropy estimate:
        c_{k+1} = clip(c_k + Δ if e_k < target else c_k − Δ, c_min, c_max)

so the bonus is on only while the entropy is below the target, and its weight grows the longer it
stays there. Defaults: the authors' scripts (SkyworkAI/Skywork-OR1 @ 64e96af,
or1_scripts/train/7b_8k.sh: target 0.2, Δ 1e-4, c in [0, 0.005], c₀ = entropy_coeff 0; the rule is
`EntController` in verl/trainer/ppo/core_algos.py). Their loss is verl's PPO loss with its default
clip 0.2 (their scripts set none): `clip_low`/`clip_high` 0.2; `trainer.rejection_sample=True` drops
the groups whose rewards are all equal before the update (verl/trainer/ppo/ray_trainer.py):
`dynamic_sampling` on.

`entropy_estimate`, the e_k the controller reads:
- `sampled_nll` (the authors'): −mean of the OLD log-probabilities of the sampled tokens over the
  kept groups' response tokens, a fixed quantity of the batch before the update. At their commit
  the trainer feeds the controller `actor/entropy_loss` (ray_trainer.py), which is
  `get_entropy_metric` in verl/workers/actor/dp_actor.py: −masked_mean(old_log_probs,
  response_mask) over the filtered batch of each rank, averaged over ranks. Here: over each
  mini-batch's kept tokens, averaged over the step's mini-batches.
- `full`: the current policy's full-vocabulary entropy over the same tokens (detached; it moves
  with each mini-batch's update), averaged the same way. It reads the policy, but it is the
  controller's input, so it stays over every row of the mini-batch, as the authors' trainer reads
  its whole filtered batch (`EntropyController.reads`; not the rows that carry gradient, which the
  logged policy metrics are over: under quadrant isolation that would change the method). The
  objective is then not decomposable, so every row's current entropy is computed.

The coefficient and the on/off flag are the objective's state (`quadrants/objectives/control.py`):
the loop advances them once per optimizer step from the step's reduced `entropy_estimate` and stores
them in every checkpoint (the authors' trainer does not, so their resumed runs restart from c₀).
Called without a state (a test, one call) the objective uses the initial one.

Three more choices follow the authors' trainer (docs/science.md, recipe table):
- `minibatch_scale`: `nominal` (theirs): each mini-batch's loss over its nominal size,
  `loss = policy_loss * (len(data) / self.config.ppo_mini_batch_size)` (SkyworkAI/Skywork-OR1 @
  64e96af, verl/workers/actor/dp_actor.py `update_policy`), so a mini-batch with dropped groups is
  scaled by kept / nominal rows (objectives/loss.py `nominal_scale`); `kept`: over its kept rows
  (the suite's first choice).
- `skip_unmixed_steps` (with `dynamic_sampling`): a step whose groups are all constant is skipped,
  no optimizer step and no controller update, logged as `train/skipped_step` (their
  verl/trainer/ppo/ray_trainer.py `fit`: "No valid samples remain, skip this batch" and
  `continue`); false steps the optimizer on the empty loss, and the controller, which has no
  input, holds its state.
- A mini-batch that keeps no token gives no estimate (NaN, left out of the step's mean), not a 0.
  Their controller reads `actor/entropy_loss` from the metrics of the first data-parallel worker
  only (`DataProto.concat` keeps `data[0].meta_info`, verl/protocol.py; the estimate is over that
  rank's shard of the filtered batch, `get_entropy_metric` before the mini-batch loop); ours is
  the mean over the step's mini-batches of each whole mini-batch's value, the same on every rank
  (every rank computes the whole mini-batch's loss).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyMetric,
    PolicyOutput,
    TokenBatch,
    token_advantages,
    token_mean,
)
from quadrants.objectives.common import clipped_terms, drop_constant_groups, validate_clip
from quadrants.objectives.registry import check_range, register_objective

ENTROPY_ESTIMATES = ("sampled_nll", "full")
MINIBATCH_SCALES = ("nominal", "kept")  # as Archer's (objectives/archer.py)


class EntropyController:
    """Skywork-OR1's EntController: one step of Δ towards the target entropy, within bounds.

    `reads`: the step metrics the controller reads, logged over every row of each mini-batch
    whatever they read (a method's input is not a diagnostic: objectives/batch.py
    `PolicyMetric`)."""

    reads = ("entropy_estimate",)

    def initial(self, params: Mapping[str, Any]) -> dict[str, float]:
        return {"coef": float(params["coef_init"]), "enabled": 1.0}

    def update(
        self, state: Mapping[str, float], metrics: Mapping[str, float], params: Mapping[str, Any]
    ) -> dict[str, float]:
        estimate = metrics.get("entropy_estimate", float("nan"))
        if math.isnan(estimate):  # no mini-batch kept a token (a skipped step): no update
            return dict(state)
        below = estimate < params["target"]
        coef = state["coef"] + (params["delta"] if below else -params["delta"])
        coef = min(max(coef, params["coef_min"]), params["coef_max"])
        return {"coef": float(coef), "enabled": float(below)}


def validate_adaptive_entropy(
    *,
    target: float,
    delta: float,
    coef_min: float,
    coef_max: float,
    coef_init: float,
    clip_low: float,
    clip_high: float,
    entropy_estimate: str,
    clip_ratio_c: float | None = None,
    minibatch_scale: str = "nominal",
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    if minibatch_scale not in MINIBATCH_SCALES:
        raise ValueError(
            f"minibatch_scale={minibatch_scale!r} is unknown; choose one of "
            f"{list(MINIBATCH_SCALES)}"
        )
    if entropy_estimate not in ENTROPY_ESTIMATES:
        raise ValueError(
            f"entropy_estimate={entropy_estimate!r} is unknown; choose one of "
            f"{list(ENTROPY_ESTIMATES)}"
        )
    check_range("target", target, low=0.0)
    check_range("delta", delta, low=0.0)
    check_range("coef_min", coef_min, low=0.0)
    check_range("coef_max", coef_max, low=coef_min)
    check_range("coef_init", coef_init, low=coef_min, high=coef_max)


@register_objective(
    "adaptive_entropy",
    needs_entropy=True,
    validate=validate_adaptive_entropy,
    batch_denominator=True,
    controller=EntropyController(),
    decomposable=lambda params: params["entropy_estimate"] == "sampled_nll",
    decomposition=(
        "per-token surrogate and entropy bonus; with entropy_estimate=full the controller's input"
        " is the current entropy of every counted row, which a row without gradient would have to"
        " be run for, so that setting keeps the pass"
    ),
    nominal_rows=lambda params: params["minibatch_scale"] == "nominal",
    skips_unmixed_steps=lambda params: (
        bool(params["skip_unmixed_steps"]) and bool(params["dynamic_sampling"])
    ),
)
def adaptive_entropy(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    target: float = 0.2,
    delta: float = 1e-4,
    coef_min: float = 0.0,
    coef_max: float = 0.005,
    coef_init: float = 0.0,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = None,
    dynamic_sampling: bool = True,
    entropy_estimate: str = "sampled_nll",
    minibatch_scale: str = "nominal",
    skip_unmixed_steps: bool = True,
    state: Mapping[str, float] | None = None,
) -> ObjectiveOutput:
    if policy.entropy is None:
        raise ValueError(
            "adaptive_entropy needs the current policy's entropy (PolicyOutput.entropy is None)"
        )
    if state is None:
        state = EntropyController().initial({"coef_init": coef_init})
    coef = state["coef"] * state["enabled"]
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
    metrics = {
        "entropy_coef": terms.ratio.new_tensor(state["coef"]),
        "entropy_bonus_on": terms.ratio.new_tensor(state["enabled"]),
    }
    denominator_mask = drop_constant_groups(batch, dynamic_sampling, metrics)
    estimate = controller_entropy(
        batch, policy, mask if denominator_mask is None else denominator_mask, entropy_estimate
    )
    # the controller's input, over every row whichever estimate (EntropyController.reads); NaN
    # for a mini-batch that keeps no token, which the step's mean leaves out (train/telemetry.py
    # `mean_metrics`) instead of averaging in a 0
    value = estimate.over_rows(None)
    kept = (mask if denominator_mask is None else denominator_mask).bool().any()
    metrics["entropy_estimate"] = torch.where(kept, value, torch.full_like(value, float("nan")))
    return ObjectiveOutput(
        (terms.per_token_loss - coef * policy.entropy) * mask,
        metrics,
        denominator_mask,
        policy_metrics=policy_metrics,
    )


def controller_entropy(
    batch: TokenBatch, policy: PolicyOutput, kept: Tensor, entropy_estimate: str
) -> PolicyMetric:
    """The controller's input over the `kept` tokens ([B, T] bool): −mean old log-prob of the
    sampled tokens (`sampled_nll`, a batch metric) or the mean current full-vocabulary entropy
    (`full`, read from the policy; the controller reads it over every row)."""
    values = -batch.old_logp if entropy_estimate == "sampled_nll" else policy.entropy.detach()
    return token_mean(torch.where(kept, values.float(), 0.0), kept)
