"""One mini-batch's gradient, in one piece or accumulated over micro-batches
(`train.micro_batch_size`).

The loss is the mini-batch's: its normaliser (token-mean over the whole mini-batch, the constant
groups DAPO drops, a forking or KL-Cov selection, batch statistics) is computed over every row of
the mini-batch, never over a micro-batch. Accumulation keeps that exactly:
1. one no-grad pass gives the current policy's log-probs (and entropy) for the whole mini-batch,
   a micro-batch at a time;
2. for each micro-batch, its rows run again with grad and are spliced into those detached values,
   and the whole mini-batch's loss is back-propagated: its gradient is the micro-batch's share, so
   the micro-batches' gradients add up to the unsplit one (float rounding aside;
   tests/unit/train/test_accumulate.py).
Peak activation memory follows the micro-batch (the first pass keeps none); the price is the extra
no-grad forward, paid only when micro-batches are on. The rows are dealt to micro-batches in order
of response length, so that each micro-batch holds similar lengths and its forward is cut after its
own longest row (models/policy.py); the order is a function of the mini-batch alone, the same on
every rank. The step's logged loss and metrics are those
of the last micro-batch's loss, whose value is the mini-batch's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from quadrants.objectives.batch import PolicyOutput, TokenBatch
from quadrants.objectives.loss import compute_loss
from quadrants.ops.length_buckets import response_spans
from quadrants.train.distributed_step import sharded_policy_output

if TYPE_CHECKING:
    from quadrants.train.context import StepContext


def _splice(full: Tensor, part: Tensor, rows: Tensor) -> Tensor:
    """`full` [B, T] with rows `rows` [n] replaced by `part` [n, T] (differentiable in `part`)."""
    return full.index_copy(0, rows, part)


def backward_minibatch(
    ctx: StepContext, mini: TokenBatch, is_weights: Tensor | None
) -> tuple[Tensor, dict[str, Tensor]]:
    """Back-propagate the mini-batch's loss (gradients accumulate into the parameters' .grad).

    Returns:
        (loss [] detached, objective metrics).
    """
    passes = dict(
        temperature=ctx.passes.temperature,
        chunk_size=ctx.passes.chunk_size,
        with_entropy=ctx.spec.wants_entropy(ctx.params),
        max_buckets=ctx.passes.length_buckets,
    )
    micro = ctx.cfg.train.micro_batch_size
    if not micro or micro >= mini.batch_size:
        policy = sharded_policy_output(ctx.dist, ctx.model, mini, **passes)
        loss, metrics = compute_loss(
            ctx.spec, ctx.params, mini, policy, ctx.loss_settings, is_weights=is_weights
        )
        loss.backward()
        return loss.detach(), metrics
    by_length = torch.argsort(response_spans(mini.response_mask), stable=True)  # [B]
    rows = [by_length[s : s + micro] for s in range(0, mini.batch_size, micro)]
    with torch.no_grad():
        parts = [sharded_policy_output(ctx.dist, ctx.model, mini.select(r), **passes) for r in rows]
    logp = _splice(torch.empty_like(mini.old_logp), torch.cat([p.logp for p in parts]), by_length)
    entropy = (
        None
        if parts[0].entropy is None
        else _splice(
            torch.empty_like(mini.old_logp),
            torch.cat([p.entropy for p in parts]),  # type: ignore[misc]
            by_length,
        )
    )  # [B, T] each, in the mini-batch's row order
    for index in rows:
        part = sharded_policy_output(ctx.dist, ctx.model, mini.select(index), **passes)
        policy = PolicyOutput(
            _splice(logp, part.logp, index),
            None if entropy is None else _splice(entropy, part.entropy, index),
        )  # type: ignore[arg-type]
        loss, metrics = compute_loss(
            ctx.spec, ctx.params, mini, policy, ctx.loss_settings, is_weights=is_weights
        )
        loss.backward()
    return loss.detach(), metrics
