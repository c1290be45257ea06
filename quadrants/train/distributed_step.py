"""The step's phases when rows are spread over ranks (the rule: distributed/collectives.py).

- `collect_blocks`: prompts in blocks, block b generated and graded by rank b % W, all blocks
  gathered in block order on every rank (world-size invariant: the same blocks, seeds and global
  order for any W, which is what lets a 2-process run reproduce a 1-process run). It is the one
  collect path: a single process without `distributed.prompts_per_generate` is one block, generated
  with the round's own seed.
- `sharded_behaviour_pass`: each rank's 1/W of the rows through the no-grad pass, gathered.
- `sharded_policy_output`: each rank's share of a mini-batch through the policy with grad, the other
  shares' detached values spliced around it.
With one process and no block setting every function is the plain single-process call.

Shape legend: **B** sequences · **P** prompt tokens · **T** response tokens.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from quadrants.distributed.collectives import (
    DistEnv,
    all_gather_rows,
    check_layout,
    dealt,
    fill_from_rank0,
    fill_replica,
    gather_objects,
    generation_block,
    in_call_order,
    on_meta,
    rollout_replica,
    row_share,
    shard_model,
    splice,
)
from quadrants.models.policy import behaviour_pass, response_logprobs
from quadrants.objectives.batch import PolicyOutput, TokenBatch
from quadrants.ops.precision import resolve_precision
from quadrants.rewards.grader import Outcome
from quadrants.rollout.engine import RolloutEngine, Rollouts, SamplingSettings
from quadrants.rollout.registry import get_engine

if TYPE_CHECKING:
    from quadrants.config import RunConfig
    from quadrants.train.context import Collected, StepContext


def block_seed(step_seed: int, block: int) -> int:
    """Block 0 keeps the step's seed (one block = the single-process stream); others are offset."""
    return (step_seed + 7919 * block) % (2**31 - 1)


def _pad(tensor: Tensor, width: int, value: float | int | bool, *, left: bool) -> Tensor:
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    fill = torch.full((tensor.shape[0], missing), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([fill, tensor] if left else [tensor, fill], dim=1)


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """One Rollouts from blocks in order: prompts re-left-padded to the largest P, responses
    re-right-padded to the largest T, group ids offset so they stay unique.
    [sum B, max P / max T]."""
    if len(parts) == 1:
        return parts[0]
    width_p = max(p.prompt_ids.shape[1] for p in parts)
    width_t = max(p.response_ids.shape[1] for p in parts)
    offsets, total = [], 0
    for p in parts:
        offsets.append(total)
        total += int(p.group_ids.max()) + 1 if p.group_ids.numel() else 0
    return Rollouts(
        prompt_ids=torch.cat([_pad(p.prompt_ids, width_p, pad_id, left=True) for p in parts]),
        prompt_mask=torch.cat([_pad(p.prompt_mask, width_p, False, left=True) for p in parts]),
        response_ids=torch.cat([_pad(p.response_ids, width_t, pad_id, left=False) for p in parts]),
        response_mask=torch.cat([_pad(p.response_mask, width_t, False, left=False) for p in parts]),
        behaviour_logp=torch.cat([_pad(p.behaviour_logp, width_t, 0.0, left=False) for p in parts]),
        texts=[t for p in parts for t in p.texts],
        group_ids=torch.cat([p.group_ids + o for p, o in zip(parts, offsets)]),
        finished=torch.cat([p.finished for p in parts]),
        behaviour_entropy=None
        if any(p.behaviour_entropy is None for p in parts)
        else torch.cat([_pad(p.behaviour_entropy, width_t, 0.0, left=False) for p in parts]),
    )


def collect_blocks(ctx: StepContext, problems: list[Any], sampling: SamplingSettings) -> Collected:
    """Generate and grade this rank's blocks of `problems`, then gather every block on every rank.

    With one process and no `distributed.prompts_per_generate` there is one block (every problem),
    seeded with `sampling.seed` itself, and the gather returns it unchanged."""
    from quadrants.train.context import Collected

    env: DistEnv = ctx.dist
    size = generation_block(ctx.cfg, env.world_size)
    blocks = [problems[i : i + size] for i in range(0, len(problems), size)]
    mine: list[tuple[int, tuple[Rollouts, list[float], list[str]]]] = []
    generate_s = grade_s = 0.0
    for index in dealt(len(blocks), env):
        block = blocks[index]
        t0 = time.perf_counter()
        seeded = replace(
            sampling, seed=None if sampling.seed is None else block_seed(sampling.seed, index)
        )
        rollouts = ctx.engine.generate([p.prompt for p in block], seeded)
        t1 = time.perf_counter()
        graded = ctx.grader.grade(
            rollouts.texts, [block[int(g)].answer for g in rollouts.group_ids]
        )
        grade_s += time.perf_counter() - t1
        generate_s += t1 - t0
        mine.append((index, (rollouts, list(graded.rewards), [o.value for o in graded.outcomes])))
    everything = in_call_order(gather_objects(mine, env))  # timings stay per rank, so not run_dealt
    rollouts = concat_rollouts([item[0] for item in everything], int(ctx.tokenizer.pad_token_id))
    rewards = torch.tensor([r for item in everything for r in item[1]], dtype=torch.float32)
    outcomes = [Outcome(o) for item in everything for o in item[2]]
    return Collected(rollouts, rewards, outcomes, generate_s, grade_s)


def sharded_behaviour_pass(
    env: DistEnv,
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    groups: list[Tensor] | None = None,
    **passes: Any,
) -> tuple[Tensor, Tensor]:
    """`behaviour_pass` over this rank's share of the rows, gathered: (logp [B,
    T], entropy [B, T]).

    `groups` (train.forward_tokens; train/micro_batches.py): the rows in calls packed by a token
    budget, each group a multiple of the world size, computed from the whole batch and so the same
    on every rank; each rank runs its contiguous share of each group in one call. None: this rank's
    share of every row, `batch_size` rows per call."""
    if groups is not None:
        return _grouped_behaviour_pass(
            env, model, sequences, attention_mask, response_length, groups, **passes
        )
    if not env.sharded:
        return behaviour_pass(model, sequences, attention_mask, response_length, **passes)
    share = row_share(sequences.shape[0], env)
    # "always" and one bucket: every rank makes the same FSDP forward calls, whatever its rows
    logp, entropy = behaviour_pass(
        model,
        sequences[share],
        attention_mask[share],
        response_length,
        **{**passes, "share_prompts": "always", "max_buckets": 1},
    )
    return torch.cat(all_gather_rows(logp, env)), torch.cat(all_gather_rows(entropy, env))


def _grouped_behaviour_pass(
    env: DistEnv,
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    groups: list[Tensor],
    **passes: Any,
) -> tuple[Tensor, Tensor]:
    """`sharded_behaviour_pass` one call per group of rows (see there)."""
    if env.sharded:  # the same FSDP forward calls on every rank, whatever its rows
        passes = {**passes, "share_prompts": "always", "max_buckets": 1}
    rows_total, width = sequences.shape[0], response_length
    logp = torch.zeros(rows_total, width, device=sequences.device)
    entropy = torch.zeros(rows_total, width, device=sequences.device)
    for rows in groups:
        own = rows[row_share(rows.shape[0], env)]
        part_logp, part_entropy = behaviour_pass(
            model,
            sequences[own],
            attention_mask[own],
            response_length,
            **{**passes, "batch_size": max(own.shape[0], 1)},
        )
        logp[rows] = torch.cat(all_gather_rows(part_logp, env))
        entropy[rows] = torch.cat(all_gather_rows(part_entropy, env))
    return logp, entropy


def sharded_policy_output(
    env: DistEnv,
    model: nn.Module,
    mini: TokenBatch,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool,
    max_buckets: int = 1,
) -> PolicyOutput:
    """The policy's log-probs (and entropy) over the whole mini-batch, differentiable on this rank's
    rows only; the loss computed from it is the global loss and its gradient is this rank's part."""
    if not env.sharded:
        logp, entropy = response_logprobs(
            model,
            mini.sequences,
            mini.attention_mask,
            mini.response_length,
            temperature=temperature,
            chunk_size=chunk_size,
            with_entropy=with_entropy,
            max_buckets=max_buckets,
        )
        return PolicyOutput(logp, entropy)
    share = row_share(mini.batch_size, env)
    logp, entropy = response_logprobs(
        model,
        mini.sequences[share],
        mini.attention_mask[share],
        mini.response_length,
        share_prompts="always",  # the same FSDP forward calls on every rank, whatever its rows
        max_buckets=1,  # (and one bucket, for the same reason)
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
    )
    return PolicyOutput(splice(logp, env), None if entropy is None else splice(entropy, env))


def prepare_policy(
    cfg: RunConfig,
    model: nn.Module,
    tokenizer: Any,
    ref_model: nn.Module | None,
    env: DistEnv,
    device: torch.device | None = None,
) -> tuple[nn.Module, nn.Module | None, RolloutEngine]:
    """Place the policy (and the frozen reference) on `device` (default: `train.device` resolved for
    this rank), shard them over the ranks, and start the rollout engine `rollout.engine` names
    (quadrants/rollout/registry.py) on the placed policy. An engine that asks for a replica (the HF
    engine) samples from the policy itself in one plain process, from a full per-rank copy on the
    same device when sharded, taken here before sharding.

    Sharded, only rank 0 needs the weights: the other ranks may pass the model on the meta device
    (`load_policy(weights=False)`, as `build_context` does), and every rank's shards (and replica)
    are filled from rank 0's values (`fill_from_rank0`), whatever the others passed.

    The modules are moved before `fully_shard`, so each rank's shards and its rollout copy are on
    `cuda:<LOCAL_RANK>` with CUDA (not run here) and the CPU otherwise (`.to` of a CPU module to the
    CPU is a no-op).

    The parameters are stored in `train.precision`'s dtype (train/precision.py): float32 for fp32
    and bf16-mixed whatever `model.dtype` they were read in (a bf16 checkpoint cast up exactly),
    bfloat16 for pure bf16. The replica is taken after the cast: the HF engine samples from the
    trainer's parameters in their stored dtype."""
    from quadrants.device import resolve_device

    check_layout(cfg, env.world_size)
    kind = get_engine(cfg.rollout.engine)
    device = resolve_device(cfg.train.device, env.local_rank) if device is None else device
    precision = resolve_precision(cfg.train.precision, device)
    model = _place(model, device, precision.param_dtype)
    if ref_model is not None:  # frozen: the policy's dtype, so that its forward is the policy's
        ref_model = _place(ref_model, device, precision.param_dtype)
    options = dict(
        precision=precision,
        reshard_after_forward=cfg.distributed.reshard_after_forward,
        device=device,
    )
    # rank 0's full tensors, to fill every rank's shards from (the other ranks: on the meta device)
    full = model.state_dict() if env.sharded and env.is_main else {}
    full_ref = ref_model.state_dict() if env.sharded and env.is_main and ref_model else {}
    replica = rollout_replica(model, env) if kind.replica_for_ranks else None
    model = shard_model(
        model, env, activation_checkpointing=cfg.train.activation_checkpointing, **options
    )
    if env.sharded:
        fill_from_rank0(model, full, env, device)
        del full  # rank 0's full copy: only its shards remain
        if replica is not None:
            fill_replica(replica, model, device)
    if env.sharded and ref_model is not None:
        ref_model = shard_model(ref_model, env, **options)
        fill_from_rank0(ref_model, full_ref, env, device)
        del full_ref
    engine = kind.start(cfg, model, tokenizer, replica=replica, world_size=env.world_size)
    return model, ref_model, engine


def _place(model: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """`model` on `device` in `dtype`; a model on the meta device (a rank that did not read the
    weights) only cast: its shards are allocated on `device` when filled (`fill_from_rank0`)."""
    if on_meta(model):
        return model.to(dtype=dtype)
    return model.to(device=device, dtype=dtype)
