"""Phase 3 of the step, the update (`UpdateSettings`): `epochs` passes of shuffled mini-batches
(`train.minibatch_grouping`: rows at random, whole prompts, or reward-balanced), each mini-batch's
loss back-propagated in one piece or accumulated over micro-batches (`backward_minibatch`),
clipped, one optimizer step each; and the same mini-batches' gradients without a step
(`update_gradient`, the counterfactual's and the gradient cosine's).

The update's draws are named streams of quadrants/seeds.py: the mini-batch order from `shuffle`
of the step, the objective's own draws (Clip-Cov's random subset) from a generator of `update` of
the step (`objective_generator`), handed down to the loss. Nothing here draws from torch's default
generators.

Shape legend: **B** sequences · **T** response tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

import torch
from torch import Tensor, nn

from quadrants import seeds
from quadrants.objectives.batch import PolicyOutput, TokenBatch
from quadrants.objectives.loss import compute_loss, mini_batch_normaliser
from quadrants.ops.balance import balanced_order
from quadrants.ops.groups import grouped_order
from quadrants.ops.length_buckets import response_spans
from quadrants.tracking import keys
from quadrants.train.context import Forwards, Objective, UpdateSettings
from quadrants.train.forwards import policy_output
from quadrants.train.gradless_rows import equal_shares, rows_with_gradient, splice_rows
from quadrants.train.micro_batches import row_lengths, token_groups


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
    sliced with each mini-batch. The objective's draws come from one `objective_generator` of
    the step, through the mini-batches in order.
    """
    per_update: list[dict[str, Tensor]] = []
    grad_norms: list[float] = []
    model.train()
    generator = objective_generator(settings, step, batch.sequences.device)
    for mini, mini_weights in step_minibatches(batch, settings, step, is_weights):
        optimizer.zero_grad(set_to_none=True)
        loss, metrics = backward_minibatch(
            model, objective, forwards, settings, mini, mini_weights, generator
        )
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


def mean_metrics(per_update: list[dict[str, Tensor]]) -> dict[str, float]:
    """Average each objective metric over the mini-batch updates of a step, leaving out the NaN
    of a mini-batch that had nothing to measure (objectives/batch.py `PolicyMetric.over_rows`: no
    row carried gradient); a metric with nothing to measure in the whole step is not logged."""
    if not per_update:
        return {}
    names = sorted({name for m in per_update for name in m})
    means = {
        name: torch.stack([m[name].float() for m in per_update if name in m]).nanmean().item()
        for name in names
    }
    return {name: value for name, value in means.items() if not math.isnan(value)}


def objective_generator(
    settings: UpdateSettings, step: int, device: torch.device
) -> torch.Generator:
    """The generator of the objective's own draws at `step` (Clip-Cov's random subset,
    objectives/clip_cov.py): a fresh one on `device`, its seed stream `update` of the step
    (quadrants/seeds.py). The update makes one and hands it down through its mini-batches in
    order; `update_gradient` and the telemetry's whole-batch losses each make their own. So the
    draws are a function of the run seed and the step alone: every rank computes the whole
    mini-batch's loss (distributed/collectives.py) and draws the same tokens as the others, as one
    process and a resumed run do, whatever the engine drew before. (verl's Clip-Cov,
    verl/trainer/ppo/core_algos.py `compute_policy_loss_clip_cov`, draws from the global generator,
    but over the rank's own micro-batch only, so its ranks need not agree.)"""
    return torch.Generator(device=device).manual_seed(seeds.update(settings.seed, step))


def step_minibatches(
    batch: TokenBatch, settings: UpdateSettings, step: int, is_weights: Tensor | None
) -> Iterator[tuple[TokenBatch, Tensor | None]]:
    """The mini-batches of `step`'s update, every epoch's in order (the order from stream
    `shuffle` of the step), each with its rows' slice of `is_weights`."""
    generator = shuffle_generator(settings, step)
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


def first_epoch_minibatches(batch: TokenBatch, settings: UpdateSettings, step: int) -> list[Tensor]:
    """The rows of each mini-batch of `step`'s first epoch: the order `step_minibatches` draws
    (a fresh generator of the step's shuffle stream), cut the same way."""
    return epoch_minibatches(batch, settings, shuffle_generator(settings, step))


def shuffle_generator(settings: UpdateSettings, step: int) -> torch.Generator:
    """The CPU generator of `step`'s mini-batch order: stream `shuffle` of the step."""
    return torch.Generator().manual_seed(seeds.shuffle(settings.seed, step))


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
    quadrants/run/one_step_arms.py reports as the first-order effect of an arm."""
    model.train()
    for parameter in model.parameters():
        parameter.grad = None
    generator = objective_generator(settings, step, batch.sequences.device)
    for mini, mini_weights in step_minibatches(batch, settings, step, is_weights):
        backward_minibatch(model, objective, forwards, settings, mini, mini_weights, generator)


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
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Back-propagate the mini-batch's loss (gradients accumulate into the parameters' .grad).
    Returns (loss [] detached, objective metrics). `generator`: what an objective that draws at
    random draws from (`objective_generator`; objectives/loss.py `compute_loss`).

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
    mini-batch's. An objective that draws at random (Clip-Cov's subset of its candidates) draws
    the same tokens in every pass, as the unsplit update's single call does: each pass starts from
    the generator's state before the first (otherwise each pass detaches its rows by another draw
    and the passes' gradients do not add up to the mini-batch's: 0.73 of the largest entry apart,
    measured), and the generator ends where one call leaves it. The metrics that read the current
    policy are over the rows that carry gradient (objectives/loss.py `compute_loss` with `rows`),
    in every path.

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
            spec, params, mini, policy, loss_settings,
            is_weights=is_weights, rows=needed, generator=generator,
        )  # fmt: skip

    if not split and carried is None:  # the plain update: one forward with grad, one backward
        loss, metrics = loss_of(policy_output(forwards, model, mini, with_entropy))
        loss.backward()
        return loss.detach(), metrics
    if spec.decomposes(params):
        return backward_by_rows(
            model, objective, forwards, mini, with_grad, needed, is_weights, generator
        )
    logp, entropy = detached_values(forwards, model, mini, valued, with_entropy)
    loss, metrics = None, {}
    start = None if generator is None else generator.get_state()  # every pass draws from here
    for index in with_grad:
        part = policy_output(forwards, model, mini.select(index), with_entropy)
        policy = PolicyOutput(
            splice_rows(logp, part.logp, index),
            None if entropy is None else splice_rows(entropy, part.entropy, index),
        )  # type: ignore[arg-type]
        if generator is not None and start is not None:  # the first pass's draws again
            generator.set_state(start)
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
    generator: torch.Generator | None = None,
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
            spec, params, rows, part, loss_settings,
            is_weights=weights, normaliser=normaliser, generator=generator,
        )  # fmt: skip
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
            generator=generator,
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
