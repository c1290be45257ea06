"""One mini-batch's gradient, in one piece or accumulated over micro-batches
(`train.micro_batch_tokens`: rows packed by a token budget, train/micro_batches.py; or
`train.micro_batch_size`: a fixed number of rows).

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
every rank. The step's logged loss and metrics are those of the last micro-batch's loss, whose value
is the mini-batch's.

The same splice serves rows that carry no gradient (`rows_with_gradient`: no token that is both in
a kept quadrant and in the objective's denominator, or, for objectives that are inert there and
without KL, an advantage of exactly 0). They run once without grad, for their values,
and only the other rows run with grad and get the backward; with micro-batches, only the other rows
are dealt to the grad passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from quadrants.objectives.batch import PolicyOutput, TokenBatch
from quadrants.objectives.loss import LossSettings, compute_loss
from quadrants.objectives.registry import ObjectiveSpec
from quadrants.ops.length_buckets import response_spans
from quadrants.train.distributed_step import sharded_policy_output
from quadrants.train.micro_batches import row_lengths, token_groups

if TYPE_CHECKING:
    from quadrants.train.context import StepContext


def _splice(full: Tensor, part: Tensor, rows: Tensor) -> Tensor:
    """`full` [B, T] with rows `rows` [n] replaced by `part` [n, T] (differentiable in `part`)."""
    return full.index_copy(0, rows, part)


def rows_with_gradient(
    mini: TokenBatch,
    settings: LossSettings,
    spec: ObjectiveSpec | None = None,
    params: Mapping[str, Any] | None = None,
) -> Tensor | None:
    """[B] bool: the rows holding a response token that the loss both keeps (a kept quadrant's) and
    counts (in the objective's denominator); None: every row may carry gradient.

    compute_loss multiplies every per-token term (the objective's, the KL's) by the kept-quadrant
    mask and by the denominator mask, so a row without such a token adds exactly nothing to the
    loss or its gradient, whatever the objective: under `quadrant=PHR` every row with a negative
    advantage, under `NHR` every row with a non-negative one, and under DAPO's dynamic sampling
    every row of a constant group. The denominator is read only from an objective whose spec says
    it depends on the batch alone (`batch_denominator`): it is computed here from the objective
    run on the old log-probs, before any forward. A row whose advantage is exactly 0 (a constant or
    singleton group) also carries nothing when the objective says so (`zero_advantage_inert`: its
    per-token loss is −0·r = 0 whatever the ratio, e.g. GRPO's) and the step adds no KL term."""
    params = params or {}
    tokens, known = mini.response_mask, False
    if settings.quadrant.keep is not None:
        tokens, known = tokens & mini.quadrants.union(settings.quadrant.keep), True
    if spec is not None and spec.denominator_from_batch(params):
        standin = PolicyOutput(mini.old_logp, mini.entropy if spec.wants_entropy(params) else None)
        with torch.no_grad():
            denominator = spec.fn(mini, standin, **params).denominator_mask
        if denominator is not None:
            tokens, known = tokens & denominator, True
    if spec is not None and settings.kl_coef == 0 and spec.inert_at_zero_advantage(params):
        tokens, known = tokens & (mini.advantages != 0)[:, None], True
    return tokens.any(dim=1) if known else None


def backward_minibatch(
    ctx: StepContext, mini: TokenBatch, is_weights: Tensor | None
) -> tuple[Tensor, dict[str, Tensor]]:
    """Back-propagate the mini-batch's loss (gradients accumulate into the parameters' .grad).

    Rows that carry no gradient (`rows_with_gradient`) run only without grad: their values enter
    the loss and the metrics, and their forward keeps no activations and gets no backward. Sharded
    ranks add idle rows to the grad pass until both passes split evenly (`_equal_shares`); with
    micro-batches, whose size is a multiple of the ranks (collectives.check_layout), each grad pass
    then splits evenly too.

    Returns:
        (loss [] detached, objective metrics).
    """
    passes = dict(
        temperature=ctx.passes.temperature,
        chunk_size=ctx.passes.chunk_size,
        with_entropy=ctx.spec.wants_entropy(ctx.params),
        max_buckets=ctx.passes.length_buckets,
    )
    train, world = ctx.cfg.train, ctx.dist.world_size
    micro = train.micro_batch_size
    micro = micro if micro and micro < mini.batch_size and not train.micro_batch_tokens else 0
    carried = rows_with_gradient(mini, ctx.loss_settings, ctx.spec, ctx.params)
    if carried is not None and ctx.dist.sharded:
        carried = _equal_shares(carried, world)
    if carried is not None and bool(carried.all()):
        carried = None
    by_length = torch.argsort(response_spans(mini.response_mask), stable=True)  # [B]
    valued: list[Tensor] = []
    graded = by_length if carried is None else by_length[carried[by_length]]
    if train.micro_batch_tokens:  # micro-batches by token budget (train/micro_batches.py)
        lengths = row_lengths(mini.attention_mask, mini.response_length)
        with_grad = token_groups(lengths, graded, train.micro_batch_tokens, world)
        split = len(with_grad) > 1
        every_row = torch.arange(mini.batch_size, device=graded.device)
        first = every_row if split or carried is None else torch.nonzero(~carried).squeeze(1)
        budget = train.forward_tokens or train.micro_batch_tokens
        valued = token_groups(lengths, first, budget, world) if first.numel() else []
    else:
        split = bool(micro)
        step = micro or mini.batch_size
        with_grad = [graded[s : s + step] for s in range(0, graded.shape[0], step)]
        if micro:  # every row's values without grad, a micro-batch at a time
            valued = [by_length[s : s + micro] for s in range(0, mini.batch_size, micro)]
        elif carried is not None:  # the idle rows' values only: the rows with gradient get
            valued = [torch.nonzero(~carried).squeeze(1)]  # theirs from the grad pass
    if not split and carried is None:
        with ctx.precision.autocast(ctx.device):
            policy = sharded_policy_output(ctx.dist, ctx.model, mini, **passes)
        loss, metrics = compute_loss(
            ctx.spec, ctx.params, mini, policy, ctx.loss_settings, is_weights=is_weights
        )
        loss.backward()
        return loss.detach(), metrics
    logp, entropy = _detached_values(ctx, mini, valued, passes)
    loss, metrics, draws = None, {}, None
    for index in with_grad:
        with ctx.precision.autocast(ctx.device):
            part = sharded_policy_output(ctx.dist, ctx.model, mini.select(index), **passes)
        policy = PolicyOutput(
            _splice(logp, part.logp, index),
            None if entropy is None else _splice(entropy, part.entropy, index),
        )  # type: ignore[arg-type]
        if draws is None:  # the first pass draws as the unsplit update's one call would
            draws = _generator_state(logp.device)
            same_draws = contextlib.nullcontext()
        else:  # the later ones draw the same numbers again (Clip-Cov's random subset)
            same_draws = _replaying(draws, logp.device)
        with same_draws:
            loss, metrics = compute_loss(
                ctx.spec, ctx.params, mini, policy, ctx.loss_settings, is_weights=is_weights
            )
        loss.backward()
    if loss is None:  # no row carries gradient: the loss is a constant and every gradient zero
        loss, metrics = compute_loss(
            ctx.spec,
            ctx.params,
            mini,
            PolicyOutput(logp, entropy),
            ctx.loss_settings,
            is_weights=is_weights,
        )
        for parameter in ctx.model.parameters():
            if parameter.requires_grad and parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
    return loss.detach(), metrics


def _generator_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    """The default generators' states: the CPU one's and, on CUDA, `device`'s."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


@contextlib.contextmanager
def _replaying(state: tuple[Tensor, Tensor | None], device: torch.device) -> Iterator[None]:
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


def _equal_shares(carried: Tensor, world_size: int) -> Tensor:
    """`carried` [B] with the first idle rows added until both the rows with grad and the rest
    split into equal shares over `world_size` ranks (B is a multiple of it), and at least one share
    runs with grad: an idle row in the grad pass adds nothing to the gradient, and every rank makes
    the same sharded forward calls. The rows are a function of the mini-batch alone, the same on
    every rank."""
    missing = (-int(carried.sum())) % world_size or (world_size if not carried.any() else 0)
    idle = torch.nonzero(~carried).squeeze(1)[:missing]
    return carried.index_fill(0, idle, True)


def _detached_values(
    ctx: StepContext, mini: TokenBatch, groups: list[Tensor], passes: dict
) -> tuple[Tensor, Tensor | None]:
    """The current policy's log-probs (and entropy) of the rows in `groups`, one no-grad pass per
    group, in the mini-batch's row order ([B, T] each; rows in no group are left unset)."""
    logp, entropy = torch.empty_like(mini.old_logp), None
    if passes["with_entropy"]:
        entropy = torch.empty_like(mini.old_logp)
    with torch.no_grad(), ctx.precision.autocast(ctx.device):
        for rows in groups:
            if rows.numel() == 0:
                continue
            part = sharded_policy_output(ctx.dist, ctx.model, mini.select(rows), **passes)
            logp = _splice(logp, part.logp, rows)
            if entropy is not None:
                entropy = _splice(entropy, part.entropy, rows)  # type: ignore[arg-type]
    return logp, entropy
