"""bf16-mixed precision, activation checkpointing and micro-batches by token budget on FSDP2 over
real gloo ranks: the mini-batch's gradient (backward_minibatch, the random tiny policy, the seeded
batch of tests/unit/train/test_accumulate.py) on 2 ranks equals the one on 1 rank.

- bf16-mixed: float32 shards under FSDP2's MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32), the forward under autocast. gloo all-gathers the bf16 parameters and
  reduce-scatters float32 gradients (measured here: torch 2.13's ProcessGroupGloo takes bf16 in
  its all-gather). 2 ranks against 1 rank (a process group of one, the same FSDP2 numerics): the
  ranks group rows differently, so bf16 rounding differs a little; and both against the plain
  one-process autocast over float32 parameters, whose residual stream stays float32 (FSDP2 casts
  every parameter, the embedding too, to bf16): bf16 tolerance. Measured: worst relative
  gradient difference 0.56 % between 2 and 1 rank (bound 2 %), 2.9 % against the one-process
  autocast (bound 5 %; bf16 keeps 8 bits, 0.4 % per rounding).
- checkpointing + token budget (grad passes of at most 16 tokens per rank) under quadrant
  isolation, float32: the gradient of the plain one-process update (no checkpointing, one pass) to
  float32 summation order (measured: 9.7e-8 at most).

What only a GPU shows: NCCL, bf16 speed, the memory checkpointing saves.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CASES = {
    # name: (precision, activation checkpointing, micro_batch_tokens, quadrant.keep)
    "bf16_mixed": ("bf16-mixed", False, 0, "all"),
    "ckpt_tokens": ("fp32", True, 16, "PHR"),
    "plain_PHR": ("fp32", False, 0, "PHR"),  # the one-process reference of ckpt_tokens
}


def gradients(case: str, sharded: bool) -> dict[str, torch.Tensor]:
    """The mini-batch's full gradient under `case`, in this process (sharded: one rank of the
    process group that is already up)."""
    from quadrants.distributed.collectives import current, shard_model
    from quadrants.distributed.placement import Sharded
    from quadrants.models.loading import load_policy
    from quadrants.ops.precision import resolve_precision
    from tests.unit.train.test_accumulate import backward, context, seeded_batch

    precision_name, checkpointing, tokens, keep = CASES[case]
    precision = resolve_precision(precision_name, torch.device("cpu"))
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)  # from the float32 model, before sharding: the same on every rank
    env = current()
    assert env.sharded == sharded
    model = shard_model(
        model, env, precision=precision, activation_checkpointing=checkpointing
    ).train()
    ctx = context("dapo", 0, model, keep)
    placement = Sharded(env) if env.sharded else ctx.forwards.placement
    ctx.forwards = dataclasses.replace(ctx.forwards, placement=placement, precision=precision)
    ctx.update = dataclasses.replace(ctx.update, micro_batch_tokens=tokens)
    torch.manual_seed(0)
    backward(ctx, batch)
    out = {}
    for name, p in model.named_parameters():
        grad = p.grad
        out[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).float().clone()
    return out


def no_grad_pass_by_tokens(sharded: bool) -> dict[str, torch.Tensor]:
    """The seeded batch's old log-probs and entropy through the step's `no_grad_pass` in calls of at
    most 16 tokens per rank (train.forward_tokens; float32, FSDP2 when sharded)."""
    from quadrants.distributed.collectives import current, shard_model
    from quadrants.distributed.placement import Sharded
    from quadrants.models.loading import load_policy
    from quadrants.train.context import Forwards, PassSettings
    from quadrants.train.forwards import no_grad_pass
    from quadrants.train.micro_batches import row_lengths, token_groups
    from quadrants.train.placement import SingleProcess
    from tests.unit.train.test_accumulate import seeded_batch

    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    env = current()
    model = shard_model(model, env)
    lengths = row_lengths(batch.attention_mask, batch.response_length)
    groups = token_groups(lengths, torch.arange(batch.batch_size), 16, env.world_size)
    passes = PassSettings(
        temperature=1.0,
        chunk_size=7,
        batch_size=batch.batch_size,
        length_buckets=1,
        forward_tokens=0,
        layout="padded",
    )
    placement = Sharded(env) if env.sharded else SingleProcess()
    forwards = Forwards(dataclasses.replace(passes, forward_tokens=16), placement)
    logp, entropy = no_grad_pass(
        forwards, model, batch.sequences, batch.attention_mask, batch.response_length
    )
    mask = batch.response_mask
    return {"logp": logp * mask, "entropy": entropy * mask, "calls": torch.tensor(len(groups))}


def _rank(rank: int, world: int, rendezvous: str, out: str, case: str) -> None:
    torch.set_num_threads(1)
    os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
    try:
        if case == "no_grad_tokens":
            grads = no_grad_pass_by_tokens(sharded=True)
        else:
            grads = gradients(case, sharded=True)
        if rank == 0:
            torch.save(grads, out)
    finally:
        dist.destroy_process_group()


def on_ranks(tmp_path: Path, case: str, world: int) -> dict[str, torch.Tensor]:
    out = tmp_path / f"{case}_{world}.pt"
    rendezvous = f"file://{tmp_path / f'rendezvous_{case}_{world}'}"
    mp.start_processes(
        _rank, args=(world, rendezvous, str(out), case), nprocs=world, start_method="spawn"
    )
    return torch.load(out)


def relative_errors(a: dict, b: dict) -> dict[str, float]:
    assert set(a) == set(b)
    return {
        n: float((a[n] - b[n]).norm() / b[n].norm().clamp_min(1e-30)) for n in b if b[n].norm() > 0
    }


@pytest.mark.slow
def test_bf16_mixed_on_two_ranks_equals_one_rank(tmp_path):
    one, two = on_ranks(tmp_path, "bf16_mixed", 1), on_ranks(tmp_path, "bf16_mixed", 2)
    plain = gradients("bf16_mixed", sharded=False)
    assert sum(g.abs().sum() for g in two.values()) > 0
    ranks = relative_errors(two, one)
    assert max(ranks.values()) < 2e-2, sorted(ranks.items(), key=lambda kv: -kv[1])[:3]
    against_autocast = relative_errors(two, plain)
    assert max(against_autocast.values()) < 5e-2, max(against_autocast.values())


@pytest.mark.slow
def test_checkpointing_and_token_budget_on_two_ranks_equal_one_process(tmp_path):
    two = on_ranks(tmp_path, "ckpt_tokens", 2)
    plain = gradients("plain_PHR", sharded=False)
    assert sum(g.abs().sum() for g in plain.values()) > 0
    for name, grad in plain.items():  # float32 sums in another order
        torch.testing.assert_close(two[name], grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
def test_no_grad_pass_by_tokens_on_two_ranks_equals_one_process(tmp_path):
    """Rows of 9 7 9 6 8 9 tokens, a budget of 16 per rank, 2 ranks: units of 2 rows by length,
    [6, 7], [8, 9], [9, 9]; two units would cost each rank 2 rows x 9 = 18 > 16, so every unit is
    a call: 3 calls on every rank, one row each. The result is the one-process pass's."""
    two = on_ranks(tmp_path, "no_grad_tokens", 2)
    one = no_grad_pass_by_tokens(sharded=False)
    assert int(two["calls"]) == 3
    torch.testing.assert_close(two["logp"], one["logp"], rtol=0, atol=1e-5)
    torch.testing.assert_close(two["entropy"], one["entropy"], rtol=0, atol=1e-5)
