"""Phase 2 of the step, score (`ScoreSettings`): old log-probs and entropy (the engine's where
exact, else a no-grad behaviour pass), the KL reference's log-probs, advantages and quadrants: the
`TokenBatch` (objectives/batch.py, `build_batch`); under `quadrant=random` the matched control's
draw (`draw_control`); then the mismatch correction's weights (`mismatch_weights`).

Shape legend: **B** sequences · **P** prompt tokens · **T** response tokens.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from quadrants.objectives.batch import TokenBatch, make_token_batch
from quadrants.ops.mismatch import truncated_is_weights
from quadrants.ops.quadrants import QuadrantSettings, RandomControl
from quadrants.ops.random_control import (
    DECILES,
    control_generator,
    control_strata,
    draw_by_labels,
    draw_matched,
    entropy_deciles,
    matched_counts,
)
from quadrants.rollout.engine import Rollouts
from quadrants.train.context import Forwards, ScoreSettings, UpdateSettings
from quadrants.train.forwards import no_grad_pass, reference_logprobs
from quadrants.train.signals import token_signals
from quadrants.train.update import first_epoch_minibatches


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
