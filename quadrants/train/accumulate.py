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
no-grad forward, paid only when micro-batches are on. The step's logged loss and metrics are those
of the last micro-batch's loss, whose value is the mini-batch's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from quadrants.objectives.batch import PolicyOutput, TokenBatch
from quadrants.objectives.loss import compute_loss
from quadrants.train.distributed_step import sharded_policy_output

if TYPE_CHECKING:
    from quadrants.train.context import StepContext


def _splice(full: Tensor, part: Tensor, start: int) -> Tensor:
    """`full` [B, T] with rows start .. start + len(part) replaced by `part`
    (differentiable in `part`)."""
    return torch.cat([full[:start], part, full[start + part.shape[0] :]])


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
    starts = range(0, mini.batch_size, micro)
    device = mini.sequences.device
    rows = [torch.arange(s, min(s + micro, mini.batch_size), device=device) for s in starts]
    with torch.no_grad():
        parts = [sharded_policy_output(ctx.dist, ctx.model, mini.select(r), **passes) for r in rows]
    logp = torch.cat([p.logp for p in parts])  # [B, T]
    entropy = None if parts[0].entropy is None else torch.cat([p.entropy for p in parts])  # type: ignore[misc]
    for start, index in zip(starts, rows):
        part = sharded_policy_output(ctx.dist, ctx.model, mini.select(index), **passes)
        policy = PolicyOutput(
            _splice(logp, part.logp, start),
            None if entropy is None else _splice(entropy, part.entropy, start),
        )  # type: ignore[arg-type]
        loss, metrics = compute_loss(
            ctx.spec, ctx.params, mini, policy, ctx.loss_settings, is_weights=is_weights
        )
        loss.backward()
    return loss.detach(), metrics
