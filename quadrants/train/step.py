"""One training step, read top to bottom: collect -> score -> update -> telemetry.

`train_step` calls three phases, each given only the parts and the settings it reads (small frozen
dataclasses of train/context.py, built once from the config by run/settings.py `build_step`):

1. **collect** (train/collect.py `collect_rollouts`, `CollectSettings`): draw the step's prompts,
   generate G responses each in blocks dealt to the ranks, grade them, optionally refill with
   mixed groups and shape the rewards with DAPO's overlong penalty.
2. **score** (train/score.py `build_batch`, `ScoreSettings`): old log-probs and entropy (the
   engine's where exact, else a no-grad behaviour pass), the KL reference's log-probs, advantages
   and quadrants: the `TokenBatch` (objectives/batch.py); under `quadrant=random` the matched
   control's draw (`draw_control`); then the mismatch correction's weights.
3. **update** (train/update.py `update_policy`, `UpdateSettings`): `epochs` passes of shuffled
   mini-batches, each mini-batch's loss back-propagated in one piece or accumulated over
   micro-batches (`backward_minibatch`), clipped, one optimizer step each.

Then telemetry (train/telemetry.py: |Δ log-prob|, flips and cancellation per quadrant on a
subsample of rows drawn from stream `telemetry`) and the weight sync to the engine.

Every forward goes through train/forwards.py (`no_grad_pass`, `policy_output`), which runs this
rank's share of the rows and gathers them through the step's `Placement` (train/placement.py): in
one process every share is all rows and every gather returns its input, so these modules are the
single-process step. Every draw is a named stream of quadrants/seeds.py, from a generator of its
own; nothing in the step draws from torch's default generators.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from quadrants.objectives.batch import TokenBatch
from quadrants.objectives.loss import applied_weights, gradient_tokens, kept_tokens
from quadrants.ops.mismatch import is_weight_stats
from quadrants.rollout.engine import rollouts_to
from quadrants.rollout.identity_guard import push_figures
from quadrants.tracking import keys
from quadrants.train.collect import collect_rollouts
from quadrants.train.context import Collected, StepContext
from quadrants.train.refill import hits
from quadrants.train.score import build_batch, draw_control, mismatch_weights, trainer_numbers
from quadrants.train.telemetry import (
    control_telemetry,
    ht_noise,
    measure_dlogp,
    quadrant_telemetry,
    rollout_metrics,
    trainer_logp_before,
)
from quadrants.train.update import gradient_cosine, objective_generator, update_policy


@dataclass(frozen=True)
class StepOutput:
    """A finished step: its flat metrics, and the graded batch (for sample artifacts)."""

    metrics: dict[str, float]
    batch: TokenBatch
    collected: Collected


def train_step(ctx: StepContext, step: int) -> StepOutput:
    """Run one step: its flat metrics (everything the tracker logs for it) and the graded batch."""
    forwards, objective = ctx.forwards, ctx.objective
    # 1. collect: on the CPU (every engine), moved to the device once
    collected = collect_rollouts(
        ctx.engine, ctx.grader, ctx.task, forwards.placement, ctx.collect, step,
        pad_id=int(ctx.tokenizer.pad_token_id),
    )  # fmt: skip
    ctx.engine.release_memory()  # vLLM sleeps until the sync after the update (rollout/vllm.py)
    collected = replace(
        collected,
        rollouts=rollouts_to(collected.rollouts, forwards.device),
        rewards=collected.rewards.to(forwards.device),
    )
    # 2. score: old (and reference) log-probs, advantages, quadrants -> TokenBatch
    t0 = time.perf_counter()
    correct = hits(collected, forwards.device)  # the 0/1 training reward (a confound's, if any)
    batch = build_batch(
        ctx.model, ctx.ref_model, forwards, ctx.score, objective.quadrant,
        collected.rollouts, collected.rewards, correct,
    )  # fmt: skip
    carrying = gradient_tokens(objective.spec, objective.params, batch)  # [B, T] bool
    batch = draw_control(
        batch, objective.quadrant, ctx.update.seed, step, carrying=carrying, update=ctx.update
    )
    # the flip diagnostics' baseline: the trainer's own log-probs on the measured rows before the
    # update (the engine's where they are the trainer's, else one no-grad pass over those rows)
    before = (
        trainer_logp_before(
            ctx.model, forwards, ctx.update, batch, step,
            reuse=trainer_numbers(ctx.score, collected.rollouts),
        )
        if ctx.update.measure_dlogp
        else None
    )  # fmt: skip
    t1 = time.perf_counter()
    is_weights = mismatch_weights(ctx.score, collected.rollouts, batch)
    every = ctx.update.gradient_cosine_every
    cosine = (
        gradient_cosine(ctx.model, objective, forwards, ctx.update, batch, step, is_weights)
        if every and step % every == 0
        else {}
    )
    # 3. update: mini-batches, micro-batches, optimizer steps; an objective that skips a step
    # without a mixed group (adaptive_entropy, as Skywork-OR1's trainer) takes no optimizer or
    # scheduler step, and its controller, given no input, holds (objectives/control.py)
    skipped = objective.spec.skips_unmixed(objective.params) and bool(
        batch.constant_group_mask.all()
    )
    objective_metrics, grad_norm = (
        ({}, 0.0)
        if skipped
        else update_policy(
            ctx.model, ctx.optimizer, ctx.scheduler, objective, forwards, ctx.update, batch, step,
            is_weights,
        )
    )  # fmt: skip
    t2 = time.perf_counter()
    # telemetry, then the engine samples the next step from the updated weights
    dlogp, entropy_after, dlogp_rows = (
        measure_dlogp(ctx.model, forwards, batch, before)
        if before is not None
        else (None, None, None)
    )
    ctx.engine.sync_weights(ctx.model)
    t3 = time.perf_counter()
    metrics = rollout_metrics(collected.rollouts, collected.rewards, collected.outcomes, batch)
    # the flips count trained tokens only; the covariance terms take each token's applied weight
    # over the loss's denominator, an objective's own draws (Clip-Cov's subset) from a fresh
    # generator of the update's stream
    trained = kept_tokens(batch, objective.quadrant)
    device = batch.sequences.device
    weights, denominator = applied_weights(
        objective.spec, objective.params, batch, objective.loss, is_weights,
        objective_generator(ctx.update, step, device),
    )  # fmt: skip
    metrics.update(
        quadrant_telemetry(batch, dlogp, dlogp_rows, entropy_after, trained, weights, denominator)
    )
    metrics.update(control_telemetry(objective, ctx.update, batch, carrying, trained, step))
    if objective.quadrant.control is not None and objective.quadrant.control.reweight == "ht":
        metrics[keys.train("control/ht_relative_noise")] = ht_noise(
            objective, batch, carrying, is_weights, objective_generator(ctx.update, step, device)
        )
    if is_weights is not None:
        weight_mean, capped_frac = is_weight_stats(
            is_weights, batch.response_mask, cap=ctx.score.mismatch_cap
        )
        metrics[keys.train("engine_is_weight_mean")] = weight_mean.item()
        metrics[keys.train("engine_is_capped_frac")] = capped_frac.item()
    metrics.update(cosine)
    metrics.update(collected.metrics)  # refill rounds and groups, the overlong penalty (when on)
    metrics.update(push_figures(ctx.engine))  # the identity check of this step's weight push
    metrics.update({keys.objective(k): v for k, v in objective_metrics.items()})
    metrics[keys.train("step")] = float(step + 1)
    metrics[keys.train("grad_norm")] = grad_norm
    if objective.spec.skips_unmixed(objective.params):
        metrics[keys.train("skipped_step")] = float(skipped)
    metrics[keys.train("lr")] = ctx.optimizer.param_groups[0]["lr"]
    metrics[keys.timing("rollout")] = collected.generate_s
    metrics[keys.timing("reward")] = collected.grade_s
    metrics[keys.timing("old_logp")] = t1 - t0
    metrics[keys.timing("update")] = t2 - t1
    metrics[keys.timing("telemetry")] = t3 - t2
    return StepOutput(forwards.placement.reduce_metrics(metrics), batch, collected)
