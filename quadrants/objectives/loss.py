"""From an objective's per-token loss to the scalar the optimizer sees: quadrant isolation, the
optional KL to a reference policy, and the named normaliser.

Quadrant isolation (docs/science.md) is a mask on the objective's per-token loss, so it composes
with every objective (grpo, dapo, hapo, ...): tokens outside the kept quadrants contribute 0. Tokens
outside the denominator (a group dynamic sampling dropped, a token forking did not select under its
`selected_tokens` normaliser) contribute 0 too, for every objective: a token is either in the batch,
counted and weighted, or out of it entirely. The normaliser is a named choice:
- `all_response_tokens` (the paper's default): masked tokens stay in the denominator, 1/Σ|o_i|;
  the four single-quadrant losses then sum exactly to the full loss.
- `kept_tokens`: renormalise over the kept tokens only (a different experiment).

The matched random control (`quadrant=random`, ops/random_control.py) is one more keep set: the
step's draw (`TokenBatch.control_mask`) in place of a union of quadrants, under the same
normaliser; with `quadrant.reweight=ht` each drawn token's loss is multiplied by its
Horvitz–Thompson weight 1/π (`TokenBatch.control_weight`).

An objective that draws at random (Clip-Cov's subset) takes a `generator` parameter beside the batch
and the policy output (`draws_at_random`; not keyword-only, so not a hyper-parameter of the
registry's schema) and draws from it alone: the loss's entry points hand it the `generator` they are
given (the update's: train/update.py `objective_generator`), and torch's default generators are
never touched.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from torch import Tensor

from quadrants.config_ranges import NON_NEGATIVE
from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyMetric,
    PolicyOutput,
    TokenBatch,
    reduce_policy_metrics,
    token_mean,
)
from quadrants.objectives.batch import fraction as token_fraction
from quadrants.objectives.registry import ObjectiveSpec, TokenObjective
from quadrants.ops.aggregation import (
    LOSS_AGGREGATIONS,
    aggregate_loss,
    loss_normaliser,
)
from quadrants.ops.kl import KL_ESTIMATORS, kl_penalty
from quadrants.ops.quadrants import QuadrantSettings

# The loss's own figures, logged with the objective's metrics: the share of response tokens the keep
# set trains and the count the normaliser divides by. They describe the whole mini-batch's loss, as
# the loss itself does, so they are over every row, never reduced over the rows that carry gradient,
# even where the denominator follows the policy (forking on the current entropy selects its
# denominator by it). Every other metric that reads the policy output is a PolicyMetric.
LOSS_FIGURES = ("kept_frac", "denominator_tokens")


@dataclass(frozen=True)
class LossSettings:
    """How per-token losses become one scalar.

    Attributes:
        quadrant: the run's QuadrantSettings; the loss reads its keep set (None = all tokens) and
            its denominator (`all_response_tokens` or `kept_tokens`, only matters with `keep`).
        loss_agg: one of ops.aggregation.LOSS_AGGREGATIONS.
        norm_length: constant length for seq-mean-token-sum-norm (None = T of the batch).
        kl_coef: weight of the per-token KL to the reference policy (0 = off, no reference model).
        kl_estimator: k1, k2 or k3.
    """

    quadrant: QuadrantSettings = field(default_factory=QuadrantSettings)
    loss_agg: str = "token-mean"
    norm_length: int | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"

    def __post_init__(self) -> None:
        if self.loss_agg not in LOSS_AGGREGATIONS:
            raise ValueError(
                f"objective.loss_agg={self.loss_agg!r} is unknown; choose one of "
                f"{list(LOSS_AGGREGATIONS)}"
            )
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"objective.kl_estimator={self.kl_estimator!r} is unknown; choose one "
                f"of {list(KL_ESTIMATORS)}"
            )
        # objective.kl_coef's own range (quadrants/config.py), for settings built without a config
        NON_NEGATIVE.check("objective.kl_coef", self.kl_coef)


def loss_settings(
    objective: Any, quadrant: QuadrantSettings, *, max_new_tokens: int
) -> LossSettings:
    """The LossSettings of a run: the `objective` config section's aggregation and KL (checked by
    `LossSettings`), the run's one QuadrantSettings (`QuadrantSettings.from_config(cfg.quadrant)`),
    and `rollout.max_new_tokens` as seq-mean-token-sum-norm's constant length: Dr. GRPO divides by
    a length that does not change from step to step (TRL: max_completion_length; verl: the padded
    response_length), not by the longest response of the batch. (`objective`: the section, read by
    name; this package does not import the schema.)"""
    return LossSettings(
        quadrant=quadrant,
        loss_agg=objective.loss_agg,
        kl_coef=objective.kl_coef,
        kl_estimator=objective.kl_estimator,
        norm_length=max_new_tokens,
    )


def draws_at_random(spec: ObjectiveSpec) -> bool:
    """True when the objective draws at random (Clip-Cov's subset): its function takes a
    `generator` parameter (module docstring)."""
    return takes_generator(spec.fn)


@cache
def takes_generator(fn: TokenObjective) -> bool:
    """True when `fn` has a parameter named `generator` (read once per function)."""
    return "generator" in inspect.signature(fn).parameters


def objective_output(
    spec: ObjectiveSpec,
    params: Mapping[str, Any],
    batch: TokenBatch,
    policy: PolicyOutput,
    generator: torch.Generator | None,
) -> ObjectiveOutput:
    """The objective's output on (batch, policy): `spec.fn(batch, policy, **params)`, with
    `generator` handed to an objective that draws at random (`draws_at_random`), which refuses
    None; the others never see it."""
    if draws_at_random(spec):
        return spec.fn(batch, policy, generator=generator, **params)
    return spec.fn(batch, policy, **params)


def behaviour_output(
    spec: ObjectiveSpec, params: Mapping[str, Any], batch: TokenBatch
) -> ObjectiveOutput:
    """The objective run without grad on the behaviour values (old log-probs, behaviour entropy),
    for what it decides from the batch alone (its denominator mask). Its drawn values are read by
    no one (Clip-Cov, the one objective that draws, has no denominator mask): an objective that
    draws is handed a fresh generator, so that the run's streams and torch's default generators
    are left as they were."""
    standin = PolicyOutput(batch.old_logp, batch.entropy if spec.wants_entropy(params) else None)
    device = batch.sequences.device
    draws = torch.Generator(device=device) if draws_at_random(spec) else None
    with torch.no_grad():
        return objective_output(spec, params, batch, standin, draws)


def compute_loss(
    spec: ObjectiveSpec,
    params: Mapping[str, Any],
    batch: TokenBatch,
    policy: PolicyOutput,
    settings: LossSettings,
    is_weights: Tensor | None = None,
    normaliser: Tensor | None = None,
    rows: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The scalar loss of one (mini-)batch and its detached metrics.

    The metrics that read the batch only (kept_frac, denominator_tokens, kept_group_frac, ...) are
    over every row; those that read the policy output (the objective's PolicyMetrics: clip
    fractions, ratio_mean, current_entropy, ...; and kl_ref) over `rows` only: the rows that carry
    gradient (train/gradless_rows.py `rows_with_gradient`), so that they describe the tokens the
    update trains and do not depend on the values a path gives the other rows.

    Args:
        is_weights: [B, T] float, detached truncated importance weights for the train–inference
            mismatch (ops.mismatch), multiplying the objective's per-token loss (not the KL term);
            None = no correction. Weights of exactly 1 leave the loss bit-for-bit unchanged.
        normaliser: [] float, the normaliser of the mini-batch these rows are part of
            (`loss_normaliser`), for an objective whose loss decomposes over rows
            (ObjectiveSpec.decomposable): the loss is then these rows' share of the mini-batch's,
            and the metrics are these rows' own. None = this batch's own normaliser.
        rows: [B] bool, the rows the policy metrics are over; None = every row.
        generator: what an objective that draws at random draws from (`objective_output`; None
            is refused by such an objective, ignored by the others). A loss computed again over
            the same mini-batch draws the same tokens from a generator in the same state.

    Returns:
        (loss [] float with grad, metrics name -> detached [] tensor).
    """
    per_token, denominator, metrics, policy_metrics = loss_terms(
        spec, params, batch, policy, settings, is_weights, generator
    )
    if normaliser is None and spec.scales_by_nominal_rows(params):
        normaliser = loss_normaliser(
            denominator,
            settings.loss_agg,  # type: ignore[arg-type]
            settings.norm_length,
            per_token.dtype,
        ) * nominal_scale(spec, params, batch)
    loss = aggregate_loss(
        per_token,
        denominator,
        settings.loss_agg,  # type: ignore[arg-type]
        settings.norm_length,
        normaliser,
    )
    return loss, {**metrics, **reduce_policy_metrics(policy_metrics, rows)}


def loss_terms(
    spec: ObjectiveSpec,
    params: Mapping[str, Any],
    batch: TokenBatch,
    policy: PolicyOutput,
    settings: LossSettings,
    is_weights: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, dict[str, Tensor], dict[str, PolicyMetric]]:
    """`compute_loss` before the aggregation: (per-token loss [B, T], 0 off the kept tokens of the
    denominator; the denominator mask [B, T] bool, the tokens the normaliser counts; the metrics
    that read the batch only, detached scalars; those that read the policy output, not yet
    reduced: the objective's and the KL's `kl_ref`). `generator`: as `compute_loss`'s."""
    out = objective_output(spec, params, batch, policy, generator)
    mask = batch.response_mask
    per_token = out.per_token_loss  # [B, T]
    if is_weights is not None:
        per_token = (
            per_token * is_weights
        )  # before isolation: the quadrant losses still sum to the full one
    metrics, policy_metrics = dict(out.metrics), dict(out.policy_metrics)
    if metrics.keys() & policy_metrics.keys():
        raise ValueError(
            f"objective {spec.name!r} reports {sorted(metrics.keys() & policy_metrics.keys())} "
            "both as a batch metric and as a policy metric (ObjectiveOutput)"
        )
    denominator = mask if out.denominator_mask is None else out.denominator_mask & mask
    if settings.kl_coef > 0:
        if batch.ref_logp is None:
            raise ValueError(
                "objective.kl_coef > 0 needs reference log-probs (TokenBatch.ref_logp is None)"
            )
        # only on the tokens the objective counts: a group DAPO dropped, or a token forking did not
        # select, is out of the batch for the KL too
        kl = kl_penalty(policy.logp, batch.ref_logp, settings.kl_estimator) * denominator  # [B, T]
        if out.kl_weight is not None:  # the objective's own per-token KL weights (Archer)
            kl = kl * out.kl_weight
        per_token = per_token + settings.kl_coef * kl
        policy_metrics["kl_ref"] = token_mean(kl, denominator)
    keep_mask, denominator = counted_tokens(batch, denominator, settings)
    if batch.control_weight is not None:  # Horvitz–Thompson: the drawn tokens' loss times 1/π
        per_token = per_token * batch.control_weight
    # A token outside the denominator is out of the batch: it carries no loss and no gradient,
    # whatever the objective put there (EntroReg's entropy bonus on a group dynamic sampling
    # dropped, say). Multiplying by a bool mask leaves every counted term bit-for-bit unchanged.
    kept_frac, denominator_tokens = LOSS_FIGURES
    metrics[kept_frac] = token_fraction(keep_mask, mask)
    metrics[denominator_tokens] = denominator.sum().detach().float()
    return per_token * (keep_mask & denominator), denominator, metrics, policy_metrics


def applied_weights(
    spec: ObjectiveSpec,
    params: Mapping[str, Any],
    batch: TokenBatch,
    settings: LossSettings,
    is_weights: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Each token's applied weight w_t = −|D| · ∂loss/∂log π_t at the behaviour policy (ratio 1),
    and the loss's denominator D: the per-token weight the update's gradient actually carries.

    For a policy-gradient loss, ∂loss/∂θ = Σ_t (∂loss/∂log π_t) ∇ log π_t, so −∂loss/∂log π_t is
    the coefficient the update puts on token t: the group advantage A_t / |D| for GRPO/DAPO under
    token-mean (so w_t = A_t), the reshaped advantage for HAPO, EntroAdv, KTAE, STEER's weighted
    one, 0 on tokens quadrant isolation leaves out or an objective does not train. Taken over the
    whole rollout batch (the update's mini-batches normalise over their own rows; batch-level
    statistics an objective computes, STEER's range or KL-Cov's selection, are then the whole
    batch's), with the current log-probs replaced by the behaviour ones, a leaf the gradient is
    taken against; the entropy, where the objective reads it, is the behaviour entropy, held
    fixed (an entropy bonus's own gradient is not a weight on log π of the sampled token).
    `generator`: as `compute_loss`'s (the step hands a fresh one of its `update` stream).

    Returns:
        (w [B, T] float32, 0 off D; D [B, T] bool).
    """
    logp = batch.old_logp.detach().float().clone().requires_grad_(True)
    entropy = batch.entropy.detach().float() if spec.wants_entropy(params) else None
    with torch.enable_grad():
        per_token, denominator, _, _ = loss_terms(
            spec, params, batch, PolicyOutput(logp, entropy), settings, is_weights, generator
        )
        loss = aggregate_loss(per_token, denominator, settings.loss_agg, settings.norm_length)
        (grad,) = torch.autograd.grad(loss, logp, allow_unused=True)
    if grad is None:  # a loss that does not depend on log π: no token carries a weight
        grad = torch.zeros_like(logp)
    count = denominator.sum().clamp_min(1).float()
    return (-grad.detach() * count) * denominator, denominator


def counted_tokens(
    batch: TokenBatch, denominator: Tensor, settings: LossSettings
) -> tuple[Tensor, Tensor]:
    """([B, T] bool each) the tokens the loss keeps (trains), and the tokens its normaliser
    counts: the objective's `denominator` ([B, T] bool, within the response), narrowed to the kept
    ones under `quadrant.denominator=kept_tokens`."""
    kept = kept_tokens(batch, settings.quadrant)
    keep_mask = batch.response_mask if kept is None else kept & batch.response_mask
    if settings.quadrant.denominator == "kept_tokens":
        denominator = denominator & keep_mask
    return keep_mask, denominator


def mini_batch_normaliser(
    spec: ObjectiveSpec, params: Mapping[str, Any], batch: TokenBatch, settings: LossSettings
) -> Tensor:
    """[] float32, the normaliser of `batch`'s loss for an objective whose denominator is the
    batch's alone (ObjectiveSpec.decomposable): read from the objective run on the behaviour
    values (old log-probs, behaviour entropy) before any forward, as train/gradless_rows.py reads
    its denominator. Handed to `compute_loss` for each micro-batch of the batch."""
    out = behaviour_output(spec, params, batch)
    mask = batch.response_mask
    denominator = mask if out.denominator_mask is None else out.denominator_mask & mask
    _, denominator = counted_tokens(batch, denominator, settings)
    normaliser = loss_normaliser(
        denominator,
        settings.loss_agg,  # type: ignore[arg-type]
        settings.norm_length,
        batch.old_logp.dtype,
    )
    if spec.scales_by_nominal_rows(params):
        normaliser = normaliser * nominal_scale(spec, params, batch)
    return normaliser


def nominal_scale(spec: ObjectiveSpec, params: Mapping[str, Any], batch: TokenBatch) -> Tensor:
    """[] float, rows / kept rows of the mini-batch `batch`: the factor that turns a normaliser
    over the kept rows into the authors' over the nominal mini-batch (`ObjectiveSpec.nominal_rows`).

    Archer's and Skywork-OR1's verl actors split the filtered batch into mini-batches of the
    nominal `ppo_mini_batch_size` rows and scale each micro-batch's loss by a fixed count:
    `loss = policy_loss / self.gradient_accumulation` with gradient_accumulation =
    ppo_mini_batch_size // ppo_micro_batch_size_per_gpu (wizard-III/ArcherCodeR @ 8a1785b,
    verl/workers/actor/dp_actor.py `update_policy`), `loss = policy_loss * (len(data) /
    self.config.ppo_mini_batch_size)` under use_dynamic_bsz (SkyworkAI/Skywork-OR1 @ 64e96af,
    verl/workers/actor/dp_actor.py `update_policy`). A mini-batch holding fewer kept rows than
    its nominal size is then scaled by kept / nominal. Here a mini-batch holds `train.
    mini_batch_size` rows, the dropped ones too (out of the loss): its nominal size is its row
    count, and its kept rows those with a token in the objective's denominator (read from the
    objective on the behaviour values, as `mini_batch_normaliser`). 1 when no row is kept (the
    loss is then 0 whatever the normaliser)."""
    out = behaviour_output(spec, params, batch)
    mask = batch.response_mask.bool()
    denominator = mask if out.denominator_mask is None else out.denominator_mask.bool() & mask
    kept = denominator.any(dim=1).sum()
    rows = torch.tensor(float(batch.batch_size), device=kept.device)
    return torch.where(kept > 0, rows / kept.clamp_min(1).float(), torch.ones_like(rows))


def kept_tokens(batch: TokenBatch, quadrant: QuadrantSettings) -> Tensor | None:
    """[B, T] bool, the tokens the loss keeps (trains): the union of the kept quadrants, or the
    random control's draw; None = every response token (no isolation).

    Raises ValueError when the settings ask for the control and the batch holds no draw (the step
    draws it, train/matched_control.py `draw_control`)."""
    if quadrant.control is not None:
        if batch.control_mask is None:
            raise ValueError(
                "quadrant=random needs the step's draw, but TokenBatch.control_mask is None "
                "(train/matched_control.py draw_control sets it)"
            )
        return batch.control_mask
    return None if quadrant.keep is None else batch.quadrants.union(quadrant.keep)


def gradient_tokens(spec: ObjectiveSpec, params: Mapping[str, Any], batch: TokenBatch) -> Tensor:
    """[B, T] bool, the response tokens that carry gradient under the full objective: inside the
    loss's denominator and with a non-zero advantage. The count the matched random control matches
    (train/matched_control.py `draw_control`) and the telemetry logs.

    The denominator is the objective's own (`ObjectiveOutput.denominator_mask`), read from the
    objective run on the behaviour values (old log-probs, behaviour entropy), as
    `mini_batch_normaliser` reads it: DAPO's token-mean drops the constant-reward groups (decided
    on the full rollout batch, so the same in every mini-batch) and, with overlong filtering, the
    truncated responses; GRPO's seq-mean keeps every response token in its denominator, and its
    constant groups' tokens are left out here by their zero advantage. A token of zero advantage
    still carries the gradient of an additive term (a KL penalty, an entropy bonus) where one is
    on: it is not counted, since the quadrants' question is about the policy-gradient term.
    `advantages` is the sequence's group advantage (an objective that reshapes it per token, HAPO,
    EntroAdv, keeps its sign and zeros)."""
    out = behaviour_output(spec, params, batch)
    mask = batch.response_mask.bool()
    denominator = mask if out.denominator_mask is None else out.denominator_mask.bool() & mask
    return denominator & (batch.advantages != 0)[:, None]
