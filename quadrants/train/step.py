"""One GRPO training step: rollouts -> rewards -> TokenBatch -> mini-batch updates -> telemetry.

Everything a step needs lives in `StepContext`, built once by the loop. Each phase is a named
function so the step reads top to bottom.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from quadrants.config import RunConfig
from quadrants.distributed.collectives import reduce_metrics
from quadrants.models.lora import adapters_disabled
from quadrants.objectives.batch import TokenBatch, make_token_batch
from quadrants.ops.mismatch import is_weight_stats, logp_abs_diff, truncated_is_weights
from quadrants.ops.overlong import overlong_penalty
from quadrants.ops.subsample import auto_rows, sample_rows
from quadrants.rewards.grader import Outcome
from quadrants.rollout.engine import Rollouts, SamplingSettings, rollouts_to
from quadrants.tracking import keys
from quadrants.train.accumulate import backward_minibatch
from quadrants.train.behaviour import engine_behaviour_is_exact
from quadrants.train.context import Collected, StepContext
from quadrants.train.distributed_step import collect_blocks, sharded_behaviour_pass
from quadrants.train.micro_batches import row_lengths, token_groups
from quadrants.train.refill import collect_with_refill, correctness, refill_seed
from quadrants.train.signals import token_signals
from quadrants.train.telemetry import mean_metrics, quadrant_telemetry


def step_seed(seed: int, step: int) -> int:
    """A per-step seed, so a resumed run draws the same prompts and samples as
    an uninterrupted one."""
    return (seed * 1_000_003 + step) % (2**31 - 1)


def collect_rollouts(ctx: StepContext, step: int) -> Collected:
    """Sample the step's prompts, generate G responses each, and grade them; with
    `rollout.refill_rounds`, refill the batch with mixed groups from extra rounds
    (train/refill.py)."""
    cfg = ctx.cfg
    if not cfg.rollout.refill_rounds:
        return collect_round(ctx, step, 0)
    return collect_with_refill(
        lambda r: collect_round(ctx, step, r),
        prompts=cfg.train.prompts_per_step,
        max_rounds=cfg.rollout.refill_rounds,
        pad_id=int(ctx.tokenizer.pad_token_id),
    )


def collect_round(ctx: StepContext, step: int, round_index: int) -> Collected:
    """One generation round: `prompts_per_step` prompts drawn and sampled with the round's seed
    (round 0: the step's seed), G responses each, graded; rewards include the overlong penalty when
    it is on."""
    cfg = ctx.cfg
    seed = refill_seed(step_seed(cfg.seed, step), round_index)
    problems = ctx.task.train_batch(cfg.train.prompts_per_step, random.Random(seed))
    sampling = SamplingSettings(
        n=cfg.rollout.group_size,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        max_new_tokens=cfg.rollout.max_new_tokens,
        seed=seed,
    )
    # blocks of prompts dealt to ranks, gathered; one plain process without
    # distributed.prompts_per_generate is one block with the round's seed (block_seed(s, 0) = s)
    collected = collect_blocks(ctx, problems, sampling)
    if not cfg.rollout.overlong_buffer:
        return collected
    penalty = overlong_penalty(
        collected.rollouts.response_mask.sum(-1),
        max_length=cfg.rollout.max_new_tokens,
        buffer=cfg.rollout.overlong_buffer,
        penalty=cfg.rollout.overlong_penalty,
    )
    return replace(
        collected,
        rewards=collected.rewards + penalty.to(collected.rewards.device),
        metrics={**collected.metrics, keys.train("overlong_penalty_mean"): penalty.mean().item()},
    )


def no_grad_pass(
    ctx: StepContext, model: nn.Module, sequences: Tensor, attention_mask: Tensor, length: int
) -> tuple[Tensor, Tensor]:
    """`model`'s log-probs and entropy ([B, T] each) over the last `length` tokens, no grad, with
    the step's PassSettings, the rows spread over the ranks; with `train.forward_tokens`, in calls
    packed by that token budget per rank (train/micro_batches.py)."""
    passes = ctx.passes
    groups = None
    if passes.forward_tokens:
        rows = torch.arange(sequences.shape[0], device=sequences.device)
        lengths = row_lengths(attention_mask, length)
        groups = token_groups(lengths, rows, passes.forward_tokens, ctx.dist.world_size)
    with ctx.precision.autocast(ctx.device):
        return sharded_behaviour_pass(
            ctx.dist,
            model,
            sequences,
            attention_mask,
            length,
            temperature=passes.temperature,
            chunk_size=passes.chunk_size,
            batch_size=passes.batch_size,
            max_buckets=passes.length_buckets,
            groups=groups,
        )


def reference_logprobs(
    ctx: StepContext, sequences: Tensor, attention_mask: Tensor, length: int
) -> Tensor | None:
    """The KL reference's log-probs [B, T] (None without a KL term): the frozen reference model's,
    or under LoRA the policy's own with its adapters switched off (the base it started from;
    models/lora.py `adapters_disabled`), so no second copy of the model is held."""
    if ctx.ref_model is not None:
        return no_grad_pass(ctx, ctx.ref_model, sequences, attention_mask, length)[0]
    if ctx.cfg.objective.kl_coef > 0 and ctx.cfg.model.lora.enabled:
        with adapters_disabled(ctx.model):
            return no_grad_pass(ctx, ctx.model, sequences, attention_mask, length)[0]
    return None


def build_batch(
    ctx: StepContext, rollouts: Rollouts, rewards: Tensor, correct: Tensor | None = None
) -> TokenBatch:
    """Old log-probs and entropy (the engine's where exact, else a trainer-side no-grad
    pass), then the TokenBatch.

    `correct` [B] float (1 = graded correct): with the overlong penalty on, dynamic sampling judges
    a group constant by correctness, as DAPO does, not by the shaped rewards."""
    cfg = ctx.cfg
    sequences = torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1)  # [B, P + T]
    attention_mask = torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1)
    length = rollouts.response_ids.shape[1]
    if engine_behaviour_is_exact(
        cfg, ctx.spec, rollouts
    ):  # train.behaviour_pass=auto (quadrants/train/behaviour.py)
        old_logp, entropy = rollouts.behaviour_logp, rollouts.behaviour_entropy
    else:
        old_logp, entropy = no_grad_pass(ctx, ctx.model, sequences, attention_mask, length)
    ref_logp = reference_logprobs(ctx, sequences, attention_mask, length)
    # attention entropy (quadrant.axis) and the adapter residual (ARCA, LoRA telemetry)
    signals = token_signals(ctx, sequences, attention_mask, length)
    mask = rollouts.response_mask
    return make_token_batch(
        sequences=sequences,
        attention_mask=attention_mask,
        response_mask=mask,
        old_logp=old_logp * mask,
        entropy=entropy * mask,
        rewards=rewards,
        group_ids=rollouts.group_ids,
        normalize_std=cfg.advantage.normalize_std,
        advantage_eps=cfg.advantage.eps,
        quadrant=ctx.quadrant,
        ref_logp=None if ref_logp is None else ref_logp * mask,
        constant_by=correct if cfg.rollout.overlong_buffer else None,
        **signals,
    )


def update_policy(
    ctx: StepContext,
    batch: TokenBatch,
    step: int,
    is_weights: Tensor | None = None,
) -> tuple[dict[str, float], float]:
    """`epochs` passes of shuffled mini-batch updates. Returns (mean metrics, mean grad norm).

    `is_weights` [B, T]: the mismatch correction's per-token weights (None = off),
    sliced with each mini-batch.
    """
    cfg = ctx.cfg
    generator = torch.Generator().manual_seed(step_seed(cfg.seed, step))
    per_update: list[dict[str, Tensor]] = []
    grad_norms: list[float] = []
    ctx.model.train()
    for _ in range(cfg.train.epochs):
        # drawn on the CPU generator (the same order on every device), then moved to the batch
        order = torch.randperm(batch.batch_size, generator=generator).to(batch.sequences.device)
        for start in range(0, batch.batch_size, cfg.train.mini_batch_size):
            index = order[start : start + cfg.train.mini_batch_size]
            ctx.optimizer.zero_grad(set_to_none=True)
            # with several ranks: this rank's rows with grad, the others' spliced in (collectives);
            # with train.micro_batch_size: accumulated over micro-batches (accumulate.py)
            loss, metrics = backward_minibatch(
                ctx,
                batch.select(index),
                None if is_weights is None else is_weights[index],
            )
            grad_norms.append(
                float(
                    torch.nn.utils.clip_grad_norm_(ctx.model.parameters(), cfg.train.max_grad_norm)
                )
            )
            ctx.optimizer.step()
            metrics["loss"] = loss
            per_update.append(metrics)
    # the last update's gradients are not needed again: freed now, not held through the next
    # rollout (the next update's zero_grad would free them only then)
    ctx.optimizer.zero_grad(set_to_none=True)
    ctx.scheduler.step()
    return mean_metrics(per_update), sum(grad_norms) / max(len(grad_norms), 1)


def measure_dlogp(ctx: StepContext, batch: TokenBatch, step: int) -> tuple[Tensor, Tensor, Tensor]:
    """|log π_after − log π_old| per token and the updated policy's entropy after the update, on
    `train.dlogp_rows` sequences drawn with the step's seed (None = ops.subsample.auto_rows, 0 =
    all): one extra no-grad pass over them. ([n, T], [n, T], rows [n] long)."""
    cfg = ctx.cfg
    generator = torch.Generator().manual_seed(step_seed(cfg.seed, step) + 1)
    wanted = cfg.train.dlogp_rows
    if wanted is None:  # auto: 1/16 of the rows, at least 2 and at least one per rank
        wanted = auto_rows(batch.batch_size, minimum=max(2, ctx.dist.world_size))
    rows = sample_rows(batch.batch_size, wanted, generator).to(batch.sequences.device)
    after, entropy = no_grad_pass(
        ctx, ctx.model, batch.sequences[rows], batch.attention_mask[rows], batch.response_length
    )
    return (after - batch.old_logp[rows]).abs() * batch.response_mask[rows], entropy, rows


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


def mismatch_weights(cfg: RunConfig, rollouts: Rollouts, batch: TokenBatch) -> Tensor | None:
    """Truncated IS weights min(π_old/μ_engine, cap) per token or per sequence, [B, T]; None when
    `rollout.mismatch_correction` is none."""
    if cfg.rollout.mismatch_correction == "none":
        return None
    return truncated_is_weights(
        batch.old_logp,
        rollouts.behaviour_logp,
        batch.response_mask,
        level=cfg.rollout.mismatch_correction,
        cap=cfg.rollout.mismatch_cap,  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class StepOutput:
    """A finished step: its flat metrics, and the graded batch (for sample artifacts)."""

    metrics: dict[str, float]
    batch: TokenBatch
    collected: Collected


def train_step(ctx: StepContext, step: int) -> StepOutput:
    """Run one step: its flat metrics (everything the tracker logs for it) and the graded batch."""
    collected = collect_rollouts(ctx, step)  # on the CPU (every engine), moved to the device once
    ctx.engine.release_memory()  # vLLM sleeps until the sync after the update (rollout/vllm.py)
    collected = replace(
        collected,
        rollouts=rollouts_to(collected.rollouts, ctx.device),
        rewards=collected.rewards.to(ctx.device),
    )
    t0 = time.perf_counter()
    batch = build_batch(
        ctx, collected.rollouts, collected.rewards, correctness(collected.outcomes, ctx.device)
    )
    t1 = time.perf_counter()
    is_weights = mismatch_weights(ctx.cfg, collected.rollouts, batch)
    objective_metrics, grad_norm = update_policy(ctx, batch, step, is_weights)
    t2 = time.perf_counter()
    dlogp, entropy_after, dlogp_rows = (
        measure_dlogp(ctx, batch, step) if ctx.cfg.train.measure_dlogp else (None, None, None)
    )
    ctx.engine.sync_weights(ctx.model)
    t3 = time.perf_counter()
    metrics = rollout_metrics(collected.rollouts, collected.rewards, collected.outcomes, batch)
    keep = ctx.loss_settings.quadrant.keep  # the covariance term counts trained tokens only
    trained = None if keep is None else batch.quadrants.union(keep)
    metrics.update(quadrant_telemetry(batch, dlogp, dlogp_rows, entropy_after, trained))
    if is_weights is not None:
        weight_mean, capped_frac = is_weight_stats(
            is_weights, batch.response_mask, cap=ctx.cfg.rollout.mismatch_cap
        )
        metrics[keys.train("engine_is_weight_mean")] = weight_mean.item()
        metrics[keys.train("engine_is_capped_frac")] = capped_frac.item()
    metrics.update(collected.metrics)  # refill rounds and groups, the overlong penalty (when on)
    metrics.update({keys.objective(k): v for k, v in objective_metrics.items()})
    metrics[keys.train("step")] = float(step + 1)
    metrics[keys.train("grad_norm")] = grad_norm
    metrics[keys.train("lr")] = ctx.optimizer.param_groups[0]["lr"]
    metrics[keys.timing("rollout")] = collected.generate_s
    metrics[keys.timing("reward")] = collected.grade_s
    metrics[keys.timing("old_logp")] = t1 - t0
    metrics[keys.timing("update")] = t2 - t1
    metrics[keys.timing("telemetry")] = t3 - t2
    return StepOutput(reduce_metrics(metrics, ctx.dist), batch, collected)
