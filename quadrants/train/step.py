"""One training step, read top to bottom: collect -> score -> update -> telemetry.

`train_step` calls three phases, each given only the parts and the settings it reads (small frozen
dataclasses of train/context.py, built once from the config by run/settings.py `build_step`):

1. **collect** (`collect_rollouts`, `CollectSettings`): draw the step's prompts, generate G
   responses each in blocks dealt to the ranks, grade them, optionally refill with mixed groups
   and shape the rewards with DAPO's overlong penalty.
2. **score** (`build_batch`, `ScoreSettings`): old log-probs and entropy (the engine's where exact,
   else a no-grad behaviour pass), the KL reference's log-probs, advantages and quadrants: the
   `TokenBatch` (objectives/batch.py); under `quadrant=random` the matched control's draw
   (`draw_control`); then the mismatch correction's weights.
3. **update** (`update_policy`, `UpdateSettings`): `epochs` passes of shuffled mini-batches
   (`train.minibatch_grouping`: rows at random, whole prompts, or reward-balanced), each
   mini-batch's loss back-propagated in one piece or accumulated over micro-batches
   (`backward_minibatch`), clipped, one optimizer step each.

Then telemetry (|Δ log-prob|, flips and cancellation per quadrant on a seeded subsample) and the
weight sync to the engine.

Every forward goes through `no_grad_pass` or `policy_output`, which run this rank's share of the
rows and gather them through the step's `Placement` (train/placement.py): in one process every
share is all rows and every gather returns its input, so this file is the single-process step.

Shape legend: **B** sequences · **P** prompt tokens · **T** response tokens.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from quadrants import seeds
from quadrants.models.lora import adapters_disabled
from quadrants.models.policy import behaviour_pass, response_logprobs
from quadrants.objectives.batch import PolicyOutput, TokenBatch, make_token_batch
from quadrants.objectives.loss import (
    applied_weights,
    compute_loss,
    gradient_tokens,
    kept_tokens,
    mini_batch_normaliser,
)
from quadrants.ops.balance import balanced_order
from quadrants.ops.groups import grouped_order
from quadrants.ops.length_buckets import response_spans
from quadrants.ops.mismatch import is_weight_stats, logp_abs_diff, truncated_is_weights
from quadrants.ops.overlong import overlong_penalty
from quadrants.ops.quadrants import QuadrantSettings, RandomControl
from quadrants.ops.random_control import (
    DECILES,
    control_generator,
    control_strata,
    draw_by_labels,
    draw_matched,
    entropy_deciles,
    ht_relative_noise,
    matched_counts,
)
from quadrants.ops.subsample import auto_rows, sample_rows
from quadrants.rewards.confound import training_rewards
from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, Rollouts, SamplingSettings, rollouts_to
from quadrants.rollout.identity import push_figures
from quadrants.tasks.base import Task
from quadrants.tracking import keys
from quadrants.train.blocks import concat_rollouts
from quadrants.train.context import (
    Collected,
    CollectSettings,
    Forwards,
    Objective,
    ScoreSettings,
    StepContext,
    UpdateSettings,
)
from quadrants.train.gradless_rows import equal_shares, rows_with_gradient, splice_rows
from quadrants.train.micro_batches import row_lengths, token_groups
from quadrants.train.placement import Placement
from quadrants.train.refill import collect_with_refill, hits
from quadrants.train.signals import token_signals
from quadrants.train.telemetry import (
    gradient_figures,
    mean_metrics,
    minibatch_count_gap,
    quadrant_telemetry,
)


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
    # over the loss's denominator, computed under the update's seed (an objective's own draws,
    # Clip-Cov's subset, leave torch's generators as they were)
    trained = kept_tokens(batch, objective.quadrant)
    with seeded(seeds.update(ctx.update.seed, step), batch.sequences.device):
        weights, denominator = applied_weights(
            objective.spec, objective.params, batch, objective.loss, is_weights
        )
    metrics.update(
        quadrant_telemetry(batch, dlogp, dlogp_rows, entropy_after, trained, weights, denominator)
    )
    metrics.update(control_telemetry(objective, ctx.update, batch, carrying, trained, step))
    if objective.quadrant.control is not None and objective.quadrant.control.reweight == "ht":
        with seeded(seeds.update(ctx.update.seed, step), batch.sequences.device):
            metrics[keys.train("control/ht_relative_noise")] = ht_noise(
                objective, batch, carrying, is_weights
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


# --- 1. collect ------------------------------------------------------------------------------


def collect_rollouts(
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    placement: Placement,
    settings: CollectSettings,
    step: int,
    *,
    pad_id: int,
) -> Collected:
    """Sample the step's prompts, generate G responses each, and grade them; with
    `rollout.refill_rounds`, refill the batch with mixed groups from extra rounds
    (train/refill.py)."""

    def round_(index: int) -> Collected:
        return collect_round(engine, grader, task, placement, settings, step, index, pad_id)

    if not settings.refill_rounds:
        return round_(0)
    return collect_with_refill(
        round_,
        prompts=settings.prompts_per_step,
        max_rounds=settings.refill_rounds,
        pad_id=pad_id,
    )


def collect_round(
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    placement: Placement,
    settings: CollectSettings,
    step: int,
    round_index: int,
    pad_id: int,
) -> Collected:
    """One generation round: `prompts_per_step` prompts drawn with the round's seed (stream
    `prompts` of (step, round), quadrants/seeds.py), G responses each, graded; rewards are the
    verifier's, or a confound reward's (`reward.name`, rewards/confound.py; reward=random draws
    from stream `reward` of (step, round) over the whole gathered round), and include the overlong
    penalty when it is on. A resumed run draws the same prompts and samples as an
    uninterrupted one: every seed is a function of the run seed, the step, the round and the block.

    The prompts go in blocks (`prompts_per_generate`, default prompts_per_step / W), block b
    generated and graded by rank b % W with its own seed (stream `rollout` of (step, round, b)),
    all blocks gathered in block order on every rank: the same blocks, seeds and order for any W.
    One process without the block setting is one block, block 0."""
    problems = task.train_batch(
        settings.prompts_per_step, random.Random(seeds.prompts(settings.seed, step, round_index))
    )
    sampling = SamplingSettings(
        n=settings.group_size,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
    )
    size = settings.prompts_per_generate or settings.prompts_per_step // placement.world_size
    blocks = [problems[i : i + size] for i in range(0, len(problems), size)]
    mine: list[tuple[int, tuple[Rollouts, list[float], list[str]]]] = []
    generate_s = grade_s = 0.0
    for index in placement.deal(len(blocks)):
        block = blocks[index]
        t0 = time.perf_counter()
        seeded = replace(sampling, seed=seeds.rollout(settings.seed, step, round_index, index))
        rollouts = engine.generate([p.prompt for p in block], seeded)
        t1 = time.perf_counter()
        graded = grader.grade(rollouts.texts, [block[int(g)].answer for g in rollouts.group_ids])
        grade_s += time.perf_counter() - t1
        generate_s += t1 - t0
        mine.append((index, (rollouts, list(graded.rewards), [o.value for o in graded.outcomes])))
    everything = placement.gather_in_order(mine)  # timings stay per rank
    rewards = torch.tensor([r for item in everything for r in item[1]], dtype=torch.float32)
    outcomes = [Outcome(o) for item in everything for o in item[2]]
    confound = None
    if settings.reward != "verifier":  # drawn from the gathered round, the same on every rank
        rng = random.Random(seeds.reward(settings.seed, step, round_index))
        confound = torch.tensor(
            training_rewards(
                settings.reward,
                outcomes,
                probability=settings.reward_probability,
                rng=rng,
                texts=[text for item in everything for text in item[0].texts],
            ),
            dtype=torch.float32,
        )
        rewards = confound
    collected = Collected(
        concat_rollouts([item[0] for item in everything], pad_id),
        rewards,
        outcomes,
        generate_s,
        grade_s,
        hits=confound,
    )
    if not settings.overlong_buffer:
        return collected
    penalty = overlong_penalty(
        collected.rollouts.response_mask.sum(-1),
        max_length=settings.max_new_tokens,
        buffer=settings.overlong_buffer,
        penalty=settings.overlong_penalty,
    )
    return replace(
        collected,
        rewards=collected.rewards + penalty.to(collected.rewards.device),
        metrics={**collected.metrics, keys.train("overlong_penalty_mean"): penalty.mean().item()},
    )


# --- 2. score --------------------------------------------------------------------------------


def build_batch(
    model: nn.Module,
    ref_model: nn.Module | None,
    forwards: Forwards,
    settings: ScoreSettings,
    quadrant: QuadrantSettings,
    rollouts: Rollouts,
    rewards: Tensor,
    correct: Tensor | None = None,
) -> TokenBatch:
    """Old log-probs and entropy (the engine's where exact, else a trainer-side no-grad
    pass), then the TokenBatch.

    `correct` [B] float (1 = graded correct): with the overlong penalty on, dynamic sampling judges
    a group constant by correctness, as DAPO does, not by the shaped rewards."""
    sequences = torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1)  # [B, P + T]
    attention_mask = torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1)
    length = rollouts.response_ids.shape[1]
    # train.behaviour_pass=auto: the engine's numbers where they equal the pass's
    # (run/settings.py `engine_numbers_may_stand_in`)
    if engine_numbers_used(settings, rollouts):
        old_logp, entropy = rollouts.behaviour_logp, rollouts.behaviour_entropy
    else:
        old_logp, entropy = no_grad_pass(forwards, model, sequences, attention_mask, length)
    ref_logp = reference_logprobs(
        model, ref_model, forwards, settings, sequences, attention_mask, length
    )
    # the attention entropy (quadrant.axis) and the LoRA adapter residual (ARCA, its telemetry)
    signals = token_signals(model, forwards, settings.signals, sequences, attention_mask, length)
    mask = rollouts.response_mask
    return make_token_batch(
        sequences=sequences,
        attention_mask=attention_mask,
        response_mask=mask,
        old_logp=old_logp * mask,
        entropy=entropy * mask,
        rewards=rewards,
        group_ids=rollouts.group_ids,
        normalize_std=settings.normalize_std,
        advantage_eps=settings.advantage_eps,
        quadrant=quadrant,
        ref_logp=None if ref_logp is None else ref_logp * mask,
        constant_by=correct if settings.constant_by_correctness else None,
        **signals,
    )


def engine_numbers_used(settings: ScoreSettings, rollouts: Rollouts) -> bool:
    """True when the batch's old log-probs and entropy are the engine's recorded numbers (the
    behaviour pass skipped: `train.behaviour_pass=auto` allows it and the engine recorded them)."""
    return settings.engine_numbers_stand_in and rollouts.behaviour_entropy is not None


def trainer_numbers(settings: ScoreSettings, rollouts: Rollouts) -> bool:
    """True when the batch's old log-probs are the trainer's own before the update: the behaviour
    pass computed them, or the engine that stood in for it computes with the trainer's module in
    the trainer's precision (`ScoreSettings.engine_is_trainer`: the HF engine)."""
    return not engine_numbers_used(settings, rollouts) or settings.engine_is_trainer


def reference_logprobs(
    model: nn.Module,
    ref_model: nn.Module | None,
    forwards: Forwards,
    settings: ScoreSettings,
    sequences: Tensor,
    attention_mask: Tensor,
    length: int,
) -> Tensor | None:
    """The KL reference's log-probs [B, T] (None without a KL term): the frozen reference model's,
    or under LoRA the policy's own with its adapters switched off (the base it started from;
    models/lora.py `adapters_disabled`), so no second copy of the model is held."""
    if ref_model is not None:
        return no_grad_pass(forwards, ref_model, sequences, attention_mask, length)[0]
    if settings.reference_from_adapters:
        with adapters_disabled(model):
            return no_grad_pass(forwards, model, sequences, attention_mask, length)[0]
    return None


def draw_control(
    batch: TokenBatch,
    quadrant: QuadrantSettings,
    seed: int,
    step: int,
    *,
    carrying: Tensor | None = None,
    update: UpdateSettings | None = None,
) -> TokenBatch:
    """The batch with the matched random control's draw for `step` (`quadrant=random`,
    ops/random_control.py), from the control's own seed stream, and with `reweight=ht` its
    Horvitz–Thompson weights; the batch unchanged for any other arm. Drawn on the full rollout
    batch, the same on every rank.

    `quadrant.within` (docs/science.md):
    - `minibatch`: in each mini-batch of the update's first epoch (the rows `epoch_minibatches`
      cuts after the step's shuffle, from `update`; without it the whole batch is one), as many of
      its gradient-carrying tokens (`carrying` [B, T] bool, objectives/loss.py `gradient_tokens`;
      without it the response tokens of non-zero advantage) as the matched arm has there, per
      advantage sign with `match_sign`. Every mini-batch of the control then trains exactly the
      arm's count of gradient-carrying tokens of each sign. (With `train.epochs` > 1 the later
      epochs cut the rows again: the step's and each row's counts stay the arm's, a later
      mini-batch's only in expectation.)
    - `row`: in each row, the arm's count of that row's gradient-carrying tokens.
    - `nominal`: the first design: the arm's nominal count (every kept response token) over the
      step, drawn among all response tokens (per sign with `match_sign`; `draw_matched`).
    `stratify=entropy` splits every stratum further by the decile of the step's gradient-carrying
    tokens' entropy (`entropy_deciles`); `match_fraction` f draws the share f of each stratum in
    place of the arm's count."""
    control = quadrant.control
    if control is None:
        return batch
    if control.within == "nominal":
        draw = draw_matched(
            batch.quadrants.union(control.match) & batch.response_mask,
            control_strata(batch.response_mask, batch.advantages, by_sign=control.match_sign),
            control_generator(seed, step),
        )
    else:
        if carrying is None:
            carrying = batch.response_mask.bool() & (batch.advantages != 0)[:, None]
        labels, strata = control_labels(batch, control, carrying, update, step)
        reference = batch.quadrants.union(control.match) & carrying
        wanted = matched_counts(labels, reference, strata, control.match_fraction)
        draw = draw_by_labels(labels, wanted, control_generator(seed, step))
    weight = draw.weight if control.reweight == "ht" else None
    return replace(batch, control_mask=draw.mask, control_weight=weight)


def control_labels(
    batch: TokenBatch,
    control: RandomControl,
    carrying: Tensor,
    update: UpdateSettings | None,
    step: int,
) -> tuple[Tensor, int]:
    """([B, T] long, S): each gradient-carrying token's stratum of the control's draw (-1 off
    them) and the number of strata: (mini-batch or row) x (advantage sign, with match_sign) x
    (entropy decile, with stratify=entropy)."""
    rows = batch.batch_size
    device = batch.sequences.device
    if control.within == "row":
        unit, units = torch.arange(rows, device=device), rows
    else:
        unit = torch.zeros(rows, dtype=torch.long, device=device)
        parts = first_epoch_minibatches(batch, update, step) if update is not None else []
        for index, part in enumerate(parts):
            unit[part] = index
        units = max(len(parts), 1)
    signs = 2 if control.match_sign and control.within != "row" else 1
    sign = (batch.advantages < 0).long() if signs == 2 else torch.zeros_like(unit)
    bins = 1
    label = (unit * signs + sign)[:, None].expand_as(carrying)  # [B, T]
    if control.stratify == "entropy":
        values = batch.entropy if batch.attention_entropy is None else batch.attention_entropy
        bins = DECILES
        label = label * bins + entropy_deciles(values, carrying).clamp_min(0)
    return torch.where(carrying.bool(), label, -1), units * signs * bins


def first_epoch_minibatches(batch: TokenBatch, settings: UpdateSettings, step: int) -> list[Tensor]:
    """The rows of each mini-batch of `step`'s first epoch: the order `step_minibatches` draws
    (a fresh generator of the step's shuffle seed), cut the same way."""
    generator = torch.Generator().manual_seed(seeds.shuffle(settings.seed, step))
    return epoch_minibatches(batch, settings, generator)


def control_telemetry(
    objective: Objective,
    settings: UpdateSettings,
    batch: TokenBatch,
    carrying: Tensor,
    trained: Tensor | None,
    step: int,
) -> dict[str, float]:
    """What the run's keep set trains (train/telemetry.py `gradient_figures`: gradient-carrying
    tokens per sign, rows, Σ|A|), and under `quadrant=random` the same for the arm it matches on
    this batch (`train/matched/...`) and, matched per mini-batch, the largest count difference over
    the first epoch's mini-batches (`train/control/minibatch_count_gap`, 0 when exact)."""
    out = gradient_figures(trained, carrying, batch.advantages, "")
    control = objective.quadrant.control
    if control is None or not control.match:
        return out
    arm = batch.quadrants.union(control.match) & carrying
    out.update(gradient_figures(arm, carrying, batch.advantages, "matched/"))
    if control.within == "minibatch" and control.match_fraction is None and trained is not None:
        out[keys.train("control/minibatch_count_gap")] = minibatch_count_gap(
            trained & carrying,
            arm,
            batch.advantages,
            first_epoch_minibatches(batch, settings, step),
            by_sign=control.match_sign,
        )
    return out


def ht_noise(
    objective: Objective, batch: TokenBatch, carrying: Tensor, is_weights: Tensor | None
) -> float:
    """The Horvitz–Thompson control's relative gradient noise E‖g_HT − g_full‖² / ‖g_full‖² on
    this batch, in the per-token log-prob coordinates (ops/random_control.py
    `ht_relative_noise`): c_t the full objective's applied weight on each gradient-carrying token
    (objectives/loss.py `applied_weights`, the keep set and the HT weights removed), π_t the
    draw's inclusion probability k_s / n_s, the inverse of the batch's HT weight."""
    weight = batch.control_weight
    assert weight is not None  # reweight=ht
    quadrant = replace(objective.quadrant, control=None)
    full = replace(batch, control_mask=None, control_weight=None)
    coefficients, _ = applied_weights(
        objective.spec, objective.params, full, replace(objective.loss, quadrant=quadrant),
        is_weights,
    )  # fmt: skip
    reachable = weight > 0
    inclusion = torch.where(reachable, 1.0 / weight.clamp_min(1e-30), 0.0)
    return float(ht_relative_noise(coefficients * carrying, inclusion, reachable))


def mismatch_weights(
    settings: ScoreSettings, rollouts: Rollouts, batch: TokenBatch
) -> Tensor | None:
    """Truncated IS weights min(π_old/μ_engine, cap) per token or per sequence, [B, T]; None when
    `rollout.mismatch_correction` is none."""
    if settings.mismatch_correction == "none":
        return None
    return truncated_is_weights(
        batch.old_logp,
        rollouts.behaviour_logp,
        batch.response_mask,
        level=settings.mismatch_correction,  # type: ignore[arg-type]
        cap=settings.mismatch_cap,
    )


# --- 3. update -------------------------------------------------------------------------------


def update_policy(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    objective: Objective,
    forwards: Forwards,
    settings: UpdateSettings,
    batch: TokenBatch,
    step: int,
    is_weights: Tensor | None = None,
) -> tuple[dict[str, float], float]:
    """`epochs` passes of shuffled mini-batch updates. Returns (mean metrics, mean grad norm).

    `is_weights` [B, T]: the mismatch correction's per-token weights (None = off),
    sliced with each mini-batch.
    """
    per_update: list[dict[str, Tensor]] = []
    grad_norms: list[float] = []
    model.train()
    for mini, mini_weights in step_minibatches(batch, settings, step, is_weights):
        optimizer.zero_grad(set_to_none=True)
        loss, metrics = backward_minibatch(model, objective, forwards, settings, mini, mini_weights)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        grad_norms.append(float(norm))
        optimizer.step()
        metrics["loss"] = loss
        per_update.append(metrics)
    # the last update's gradients are not needed again: freed now, not held through the next
    # rollout (the next update's zero_grad would free them only then)
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return mean_metrics(per_update), sum(grad_norms) / max(len(grad_norms), 1)


def step_minibatches(
    batch: TokenBatch, settings: UpdateSettings, step: int, is_weights: Tensor | None
) -> Iterator[tuple[TokenBatch, Tensor | None]]:
    """The mini-batches of `step`'s update, every epoch's in order, each with its rows' slice of
    `is_weights`; the caller's work on each runs under the step's seeded draws.

    The update's own draws (Clip-Cov's random subset, objectives/clip_cov.py) come from torch's
    default generators, seeded here for the step: every rank computes the whole mini-batch's loss
    and must draw the same tokens as the others and as one process, whatever its engine drew
    before (the HF engine reseeds per generation block, and the ranks generate other blocks). The
    generators are restored when the last mini-batch is done (or the loop is left)."""
    generator = torch.Generator().manual_seed(seeds.shuffle(settings.seed, step))
    with seeded(seeds.update(settings.seed, step), batch.sequences.device):
        for _ in range(settings.epochs):
            for index in epoch_minibatches(batch, settings, generator):
                yield batch.select(index), None if is_weights is None else is_weights[index]


def epoch_minibatches(
    batch: TokenBatch, settings: UpdateSettings, generator: torch.Generator
) -> list[Tensor]:
    """One epoch's mini-batches, row indices on the batch's device: a shuffled order of the rows
    (`train.minibatch_grouping=query`: each prompt's responses together; `balanced`: the batch's
    positive/negative proportion in each mini-batch), drawn on the CPU `generator` (the same
    order on every device), cut every `mini_batch_size` rows."""
    if settings.minibatch_grouping == "query":  # each prompt's responses together
        order = grouped_order(batch.group_ids, generator)
    elif settings.minibatch_grouping == "balanced":  # the batch's +/- proportion in each
        order = balanced_order(batch.advantages, settings.mini_batch_size, generator)
    else:
        order = torch.randperm(batch.batch_size, generator=generator)
    order = order.to(batch.sequences.device)
    size = settings.mini_batch_size
    return [order[start : start + size] for start in range(0, batch.batch_size, size)]


def update_gradient(
    model: nn.Module,
    objective: Objective,
    forwards: Forwards,
    settings: UpdateSettings,
    batch: TokenBatch,
    step: int,
    is_weights: Tensor | None = None,
) -> None:
    """The gradients of every mini-batch `update_policy` would step on at `step` (the same epochs,
    order and draws), all taken at the current weights and summed into the parameters' `.grad`;
    no clipping, no optimizer step, the weights unchanged. To first order in the learning rate lr,
    plain SGD through those mini-batches moves the weights by −lr times this sum (each later
    mini-batch's gradient differs from its value here by O(lr)): the direction whose effect
    quadrants/run/counterfactual.py reports as the first-order effect of an arm."""
    model.train()
    for parameter in model.parameters():
        parameter.grad = None
    for mini, mini_weights in step_minibatches(batch, settings, step, is_weights):
        backward_minibatch(model, objective, forwards, settings, mini, mini_weights)


def gradient_cosine(
    model: nn.Module,
    objective: Objective,
    forwards: Forwards,
    settings: UpdateSettings,
    batch: TokenBatch,
    step: int,
    is_weights: Tensor | None = None,
) -> dict[str, float]:
    """The arm's gradient against the full objective's on the same batch, at the current weights
    before the update (`quadrant.gradient_cosine_every`): `train/gradient/cosine` =
    ⟨g_arm, g_full⟩ / (‖g_arm‖ ‖g_full‖) and `train/gradient/norm_ratio` = ‖g_arm‖ / ‖g_full‖,
    each g the sum of the update's mini-batch gradients (`update_gradient`: the same epochs, order
    and draws, no clipping, no step), g_full with no keep set and no control. The parameters'
    `.grad` is left None, as update_policy's zero_grad would. Sharded, each rank holds its rows'
    part of the gradient: the figures are then the rank's (the diagnostic is meant for one
    process)."""
    params = [p for p in model.parameters() if p.requires_grad]
    update_gradient(model, objective, forwards, settings, batch, step, is_weights)
    arm = [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]
    quadrant = replace(objective.quadrant, keep=None, control=None)
    full = replace(objective, loss=replace(objective.loss, quadrant=quadrant))
    plain = replace(batch, control_mask=None, control_weight=None)
    update_gradient(model, full, forwards, settings, plain, step, is_weights)
    dot = arm_sq = full_sq = 0.0
    for p, a in zip(params, arm, strict=True):
        g = torch.zeros_like(p) if p.grad is None else p.grad.detach()
        dot += float((a.double() * g.double()).sum())
        arm_sq += float((a.double() ** 2).sum())
        full_sq += float((g.double() ** 2).sum())
        p.grad = None
    return cosine_and_ratio(dot, arm_sq, full_sq)


def cosine_and_ratio(dot: float, arm_sq: float, full_sq: float) -> dict[str, float]:
    """`train/gradient/cosine` ⟨a, f⟩ / (‖a‖ ‖f‖) and `train/gradient/norm_ratio` ‖a‖ / ‖f‖ from
    ⟨a, f⟩, ‖a‖² and ‖f‖² (NaN where a norm is 0)."""
    nan = float("nan")
    scale = (arm_sq * full_sq) ** 0.5
    return {
        keys.train("gradient/cosine"): dot / scale if scale > 0 else nan,
        keys.train("gradient/norm_ratio"): (arm_sq / full_sq) ** 0.5 if full_sq > 0 else nan,
    }


def backward_minibatch(
    model: nn.Module,
    objective: Objective,
    forwards: Forwards,
    settings: UpdateSettings,
    mini: TokenBatch,
    is_weights: Tensor | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Back-propagate the mini-batch's loss (gradients accumulate into the parameters' .grad).
    Returns (loss [] detached, objective metrics).

    The loss is the mini-batch's: its normaliser (token-mean over the whole mini-batch, the
    constant groups DAPO drops, a forking or KL-Cov selection, batch statistics) is computed over
    every row of the mini-batch, never over a micro-batch. With micro-batches
    (`micro_batch_tokens`: rows packed by a token budget, train/micro_batches.py; or
    `micro_batch_size` rows), accumulation keeps that exactly:
    1. one no-grad pass gives the current policy's log-probs (and entropy) for the whole
       mini-batch, a micro-batch at a time;
    2. for each micro-batch, its rows run again with grad and are spliced into those detached
       values, and the whole mini-batch's loss is back-propagated: its gradient is the
       micro-batch's share, so the micro-batches' gradients add up to the unsplit one (float
       rounding aside; tests/unit/train/test_accumulate.py).
    Peak activation memory follows the micro-batch; the price is the extra no-grad forward. Rows
    are dealt to micro-batches in order of response length (each micro-batch's forward is cut
    after its own longest row, models/policy.py), a function of the mini-batch alone, the same on
    every rank. The logged loss and metrics are the last micro-batch's, whose value is the
    mini-batch's. The metrics that read the current policy are over the rows that carry gradient
    (objectives/loss.py `compute_loss` with `rows`), in every path.

    The same splice serves rows that carry no gradient (train/gradless_rows.py): they run once
    without grad, for their values, and only the other rows run with grad. Sharded ranks add idle
    rows to the grad pass until both passes split evenly (`equal_shares`).

    An objective whose loss decomposes over rows (ObjectiveSpec.decomposable: no mini-batch
    statistic in its per-token loss) needs none of that: each micro-batch back-propagates its own
    rows' loss over the mini-batch's normaliser, and no row runs without grad
    (`backward_by_rows`)."""
    spec, params, loss_settings = objective.spec, objective.params, objective.loss
    with_entropy = spec.wants_entropy(params)
    world = forwards.placement.world_size
    micro = settings.micro_batch_size
    micro = micro if micro and micro < mini.batch_size and not settings.micro_batch_tokens else 0
    carried = rows_with_gradient(mini, loss_settings, spec, params)
    needed = carried  # before the idle rows a sharded grad pass adds; the policy metrics' rows
    if carried is not None and forwards.placement.sharded:
        carried = equal_shares(carried, world)
    if carried is not None and bool(carried.all()):
        carried = None
    by_length = torch.argsort(response_spans(mini.response_mask), stable=True)  # [B]
    valued: list[Tensor] = []
    graded = by_length if carried is None else by_length[carried[by_length]]
    if settings.micro_batch_tokens:  # micro-batches by token budget (train/micro_batches.py)
        packed = forwards.passes.packed  # the budgets count real tokens (train/micro_batches.py)
        lengths = row_lengths(mini.attention_mask, mini.response_length, packed=packed)
        with_grad = token_groups(lengths, graded, settings.micro_batch_tokens, world, packed=packed)
        split = len(with_grad) > 1
        every_row = torch.arange(mini.batch_size, device=graded.device)
        first = every_row if split or carried is None else torch.nonzero(~carried).squeeze(1)
        budget = settings.forward_tokens or settings.micro_batch_tokens
        valued = token_groups(lengths, first, budget, world, packed=packed) if first.numel() else []
    else:
        split = bool(micro)
        size = micro or mini.batch_size
        with_grad = [graded[s : s + size] for s in range(0, graded.shape[0], size)]
        if micro:  # every row's values without grad, a micro-batch at a time
            valued = [by_length[s : s + micro] for s in range(0, mini.batch_size, micro)]
        elif carried is not None:  # the idle rows' values only: the rows with gradient get
            valued = [torch.nonzero(~carried).squeeze(1)]  # theirs from the grad pass

    def loss_of(policy: PolicyOutput) -> tuple[Tensor, dict[str, Tensor]]:
        return compute_loss(
            spec, params, mini, policy, loss_settings, is_weights=is_weights, rows=needed
        )

    if not split and carried is None:  # the plain update: one forward with grad, one backward
        loss, metrics = loss_of(policy_output(forwards, model, mini, with_entropy))
        loss.backward()
        return loss.detach(), metrics
    if spec.decomposes(params):
        return backward_by_rows(model, objective, forwards, mini, with_grad, needed, is_weights)
    logp, entropy = detached_values(forwards, model, mini, valued, with_entropy)
    loss, metrics, draws = None, {}, None
    for index in with_grad:
        part = policy_output(forwards, model, mini.select(index), with_entropy)
        policy = PolicyOutput(
            splice_rows(logp, part.logp, index),
            None if entropy is None else splice_rows(entropy, part.entropy, index),
        )  # type: ignore[arg-type]
        if draws is None:  # the first pass draws as the unsplit update's one call would
            draws = generator_state(logp.device)
            same_draws = contextlib.nullcontext()
        else:  # the later ones draw the same numbers again (Clip-Cov's random subset)
            same_draws = replaying(draws, logp.device)
        with same_draws:
            loss, metrics = loss_of(policy)
        loss.backward()
    if loss is None:  # no row carries gradient: the loss is a constant and every gradient zero
        loss, metrics = loss_of(PolicyOutput(logp, entropy))
        for parameter in model.parameters():
            if parameter.requires_grad and parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
    return loss.detach(), metrics


def backward_by_rows(
    model: nn.Module,
    objective: Objective,
    forwards: Forwards,
    mini: TokenBatch,
    with_grad: list[Tensor],
    carried: Tensor | None,
    is_weights: Tensor | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """`backward_minibatch` for an objective whose loss decomposes over rows: each group of
    `with_grad` runs once with grad and back-propagates its own rows' loss over the mini-batch's
    normaliser (objectives/loss.py `mini_batch_normaliser`), so the groups' gradients add up to
    the mini-batch's, and no row runs without grad. Returns (loss [] detached, metrics).

    The logged loss and metrics are `compute_loss` of the whole mini-batch on the values the grad
    passes computed, the rows that carry no gradient (`carried` False; None: every row carries
    some) entering with their behaviour values (log-prob = old log-prob, entropy = behaviour
    entropy), which nothing logged reads: their loss terms are masked to exactly 0 whatever the
    values (train/gradless_rows.py), so the loss is the mini-batch's, and so is every metric that
    reads the batch only (kept_frac, denominator_tokens, kept_group_frac, ...); a metric that
    reads the current policy (the objective's PolicyMetrics: ratio_mean, the clip fractions,
    current_entropy, ...; kl_ref) is over the rows that carry gradient (`carried`), as in the
    path with the no-grad pass, so both log the same values on every mini-batch."""
    spec, params, loss_settings = objective.spec, objective.params, objective.loss
    with_entropy = spec.wants_entropy(params)
    normaliser = mini_batch_normaliser(spec, params, mini, loss_settings)
    logp, entropy = mini.old_logp, mini.entropy if with_entropy else None
    ran = False
    for index in with_grad:
        if index.numel() == 0:
            continue
        rows = mini.select(index)
        part = policy_output(forwards, model, rows, with_entropy)
        weights = None if is_weights is None else is_weights[index]
        loss, _ = compute_loss(
            spec, params, rows, part, loss_settings, is_weights=weights, normaliser=normaliser
        )
        loss.backward()
        ran = True
        logp = splice_rows(logp, part.logp.detach(), index)
        if entropy is not None:
            entropy = splice_rows(entropy, part.entropy.detach(), index)  # type: ignore[union-attr]
    if carried is not None:  # idle rows a sharded grad pass ran: their behaviour values too
        logp = torch.where(carried[:, None], logp, mini.old_logp)
        if entropy is not None:
            entropy = torch.where(carried[:, None], entropy, mini.entropy)
    if not ran:  # no row carries gradient: the loss is a constant and every gradient zero
        for parameter in model.parameters():
            if parameter.requires_grad and parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
    with torch.no_grad():
        loss, metrics = compute_loss(
            spec,
            params,
            mini,
            PolicyOutput(logp, entropy),
            loss_settings,
            is_weights=is_weights,
            rows=carried,
        )
    return loss, metrics


def detached_values(
    forwards: Forwards, model: nn.Module, mini: TokenBatch, groups: list[Tensor], with_entropy: bool
) -> tuple[Tensor, Tensor | None]:
    """The current policy's log-probs (and entropy) of the rows in `groups`, one no-grad pass per
    group, in the mini-batch's row order ([B, T] each; rows in no group are left unset)."""
    logp, entropy = torch.empty_like(mini.old_logp), None
    if with_entropy:
        entropy = torch.empty_like(mini.old_logp)
    with torch.no_grad():
        for rows in groups:
            if rows.numel() == 0:
                continue
            part = policy_output(forwards, model, mini.select(rows), with_entropy)
            logp = splice_rows(logp, part.logp, rows)
            if entropy is not None:
                entropy = splice_rows(entropy, part.entropy, rows)  # type: ignore[arg-type]
    return logp, entropy


def generator_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    """The default generators' states: the CPU one's and, on CUDA, `device`'s."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


@contextlib.contextmanager
def replaying(state: tuple[Tensor, Tensor | None], device: torch.device) -> Iterator[None]:
    """Run the block from the generator `state`, then put the generators back as they were.

    A split update computes the mini-batch's loss once per grad pass, each time over the whole
    mini-batch. An objective that draws at random (Clip-Cov's subset of its candidates) must draw
    the same tokens every time, as the unsplit update's single call does; otherwise each pass
    detaches its rows by another draw and the passes' gradients do not add up to the mini-batch's
    (0.73 of the largest entry apart, measured). The generators are restored afterwards, so the
    forwards between the passes (dropout, where a model has it) still draw fresh numbers."""
    with torch.random.fork_rng(devices=[device] if state[1] is not None else []):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Run the block with torch's default generators (the CPU one's and, on CUDA, `device`'s)
    seeded with `seed`, then put them back as they were.

    The update runs in it (`update_policy`). Sharded, every rank computes the loss of the whole
    mini-batch (distributed/collectives.py), so an objective that draws at random (Clip-Cov) must
    draw the same tokens on every rank; the default generators' states otherwise differ between
    ranks, each left by the generation blocks its engine sampled (rollout/hf.py seeds torch per
    call). verl's Clip-Cov (verl/trainer/ppo/core_algos.py `compute_policy_loss_clip_cov`) draws
    from the global generator too, but over the rank's own micro-batch only, so its ranks need not
    agree. Seeded from the step, the draws are also those of one process and of a resumed run."""
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else []):
        torch.random.default_generator.manual_seed(seed)
        if cuda:  # not run here: no GPU on these machines
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


# --- telemetry -------------------------------------------------------------------------------


def telemetry_rows(
    forwards: Forwards, settings: UpdateSettings, batch: TokenBatch, step: int
) -> Tensor:
    """The rows [n] long of the |Δ log-prob| and flip telemetry at `step`: `dlogp_rows` sequences
    drawn with the step's `telemetry` seed (None = ops.subsample.auto_rows, 0 = all; sharded:
    rounded up to a multiple of the ranks)."""
    generator = torch.Generator().manual_seed(seeds.telemetry(settings.seed, step))
    world = forwards.placement.world_size
    wanted = settings.dlogp_rows
    if wanted is None:  # auto: 1/16 of the rows, at least 2 and at least one per rank
        wanted = auto_rows(batch.batch_size, minimum=max(2, world))
    # each rank runs an equal share of the pass's rows (placement.share; the token packing needs
    # whole units of W rows): a count that does not split over the ranks is rounded up to one that
    # does, at most every row (B splits: check_layout)
    wanted = min(-(-wanted // world) * world, batch.batch_size)
    return sample_rows(batch.batch_size, wanted, generator).to(batch.sequences.device)


@dataclass(frozen=True)
class Before:
    """The telemetry's baseline, taken before the update: the measured `rows` [n] long and the
    trainer's own log-probs `logp` [n, T] on them."""

    rows: Tensor
    logp: Tensor


def trainer_logp_before(
    model: nn.Module,
    forwards: Forwards,
    settings: UpdateSettings,
    batch: TokenBatch,
    step: int,
    *,
    reuse: bool,
) -> Before:
    """The measured rows (`telemetry_rows`) and the trainer's log-probs on them before the update.

    `reuse` (train_step passes `trainer_numbers`): the batch's old log-probs are the trainer's own
    (its behaviour pass, or the HF engine's numbers from the trainer's module in its precision,
    equal to the pass's within float32 summation order), so they are taken as they are and nothing
    changes. Otherwise (an engine whose numbers stood in but are not the trainer's: its kernels or
    precision differ by 0.01-0.2 nats under vLLM in bf16, which the diagnostic would count as
    moves and flips) one no-grad pass over just the measured rows gives the trainer's own."""
    rows = telemetry_rows(forwards, settings, batch, step)
    if reuse:
        return Before(rows, batch.old_logp[rows])
    logp, _ = no_grad_pass(
        forwards, model, batch.sequences[rows], batch.attention_mask[rows], batch.response_length
    )
    return Before(rows, logp * batch.response_mask[rows])


def measure_dlogp(
    model: nn.Module, forwards: Forwards, batch: TokenBatch, before: Before
) -> tuple[Tensor, Tensor, Tensor]:
    """log π_after − log π_before per token on the rows of `before` (signed; the telemetry takes
    |Δ| and the flips from it), π_before the trainer's own before the update
    (`trainer_logp_before`), and the updated policy's entropy: one extra no-grad pass over those
    rows after the update. ([n, T], [n, T], rows [n] long)."""
    rows = before.rows
    after, entropy = no_grad_pass(
        forwards, model, batch.sequences[rows], batch.attention_mask[rows], batch.response_length
    )
    return (after - before.logp) * batch.response_mask[rows], entropy, rows


def rollout_metrics(
    rollouts: Rollouts, rewards: Tensor, outcomes: list[Outcome], batch: TokenBatch
) -> dict[str, float]:
    """Reward, solve rates, lengths, entropy and grading outcome fractions of one rollout batch."""
    groups = rollouts.group_ids
    correct = torch.tensor(
        [o == Outcome.correct for o in outcomes], dtype=torch.float32, device=groups.device
    )
    num_groups = int(groups.max()) + 1 if groups.numel() else 0
    per_group = torch.zeros(num_groups, device=groups.device).index_add_(0, groups, correct)
    sizes = torch.zeros(num_groups, device=groups.device).index_add_(
        0, groups, torch.ones_like(correct)
    )
    mask = batch.response_mask
    out = {
        keys.train("reward_mean"): rewards.mean().item(),
        keys.train("solve_rate"): correct.mean().item(),
        keys.train("prompt_solve_rate"): (per_group > 0).float().mean().item(),
        keys.train("groups_all_correct_frac"): (per_group == sizes).float().mean().item(),
        keys.train("groups_all_wrong_frac"): (per_group == 0).float().mean().item(),
        keys.train("response_length"): mask.sum(-1).float().mean().item(),
        keys.train("truncated_frac"): (~rollouts.finished).float().mean().item(),
        keys.train("entropy"): ((batch.entropy * mask).sum() / mask.sum().clamp_min(1)).item(),
    }
    # train–inference mismatch, always logged: |log μ_engine − log π_old| over response tokens
    diff_mean, diff_max = logp_abs_diff(rollouts.behaviour_logp, batch.old_logp, mask)
    out[keys.train("engine_logp_abs_diff")] = diff_mean.item()
    out[keys.train("engine_logp_abs_diff_max")] = diff_max.item()
    for outcome in Outcome:
        out[keys.train(f"outcome/{outcome.value}_frac")] = sum(
            o == outcome for o in outcomes
        ) / max(len(outcomes), 1)
    return out


# --- the forwards: this rank's share of the rows, gathered through the placement --------------


def no_grad_pass(
    forwards: Forwards, model: nn.Module, sequences: Tensor, attention_mask: Tensor, length: int
) -> tuple[Tensor, Tensor]:
    """`model`'s log-probs and entropy ([B, T] each) over the last `length` tokens, no grad, each
    rank running its share of the rows; with `forward_tokens`, in calls packed by that token budget
    per rank (train/micro_batches.py: the groups come from the whole batch, so are the same on
    every rank, and each rank runs its share of each group in one call)."""
    passes, placement = forwards.passes, forwards.placement
    options = placement.forward_options(
        dict(
            temperature=passes.temperature,
            chunk_size=passes.chunk_size,
            batch_size=passes.batch_size,
            max_buckets=passes.length_buckets,
        )
    )
    options["layout"] = passes.layout
    with forwards.precision.autocast(forwards.device):
        if not passes.forward_tokens:
            share = placement.share(sequences.shape[0])
            logp, entropy = behaviour_pass(
                model, sequences[share], attention_mask[share], length, **options
            )
            return placement.gather_rows(logp), placement.gather_rows(entropy)
        rows = torch.arange(sequences.shape[0], device=sequences.device)
        lengths = row_lengths(attention_mask, length, packed=passes.packed)
        groups = token_groups(
            lengths, rows, passes.forward_tokens, placement.world_size, packed=passes.packed
        )
        logp = torch.zeros(sequences.shape[0], length, device=sequences.device)
        entropy = torch.zeros(sequences.shape[0], length, device=sequences.device)
        for group in groups:
            own = group[placement.share(group.shape[0])]
            part_logp, part_entropy = behaviour_pass(
                model,
                sequences[own],
                attention_mask[own],
                length,
                **{**options, "batch_size": max(own.shape[0], 1)},
            )
            logp[group] = placement.gather_rows(part_logp)
            entropy[group] = placement.gather_rows(part_entropy)
        return logp, entropy


def policy_output(
    forwards: Forwards, model: nn.Module, mini: TokenBatch, with_entropy: bool
) -> PolicyOutput:
    """The policy's log-probs (and entropy) over the whole mini-batch, differentiable on this rank's
    rows only: the loss computed from it is the global loss and its gradient is this rank's part."""
    passes, placement = forwards.passes, forwards.placement
    share = placement.share(mini.batch_size)
    options = placement.forward_options(dict(max_buckets=passes.length_buckets))
    with forwards.precision.autocast(forwards.device):
        logp, entropy = response_logprobs(
            model,
            mini.sequences[share],
            mini.attention_mask[share],
            mini.response_length,
            temperature=passes.temperature,
            chunk_size=passes.chunk_size,
            with_entropy=with_entropy,
            layout=passes.layout,
            **options,
        )
    return PolicyOutput(
        placement.splice(logp), None if entropy is None else placement.splice(entropy)
    )
