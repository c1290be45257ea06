"""Per-step telemetry: per-quadrant statistics of a TokenBatch, reduced to floats for the tracker.

This is where tensors become Python floats (`.item()`), once per step, after the update: the
rollout batch's figures (`rollout_metrics`), the quadrants' (`quadrant_telemetry`), the |Δ log-prob|
and flips on a subsample of rows measured before and after the update (`telemetry_rows`,
`trainer_logp_before`, `measure_dlogp`), what the keep set trains (`gradient_figures`) and, under
`quadrant=random`, what the matched control trains and its noise (`control_telemetry`,
`ht_noise`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from quadrants import seeds
from quadrants.objectives.batch import TokenBatch
from quadrants.objectives.loss import applied_weights
from quadrants.ops.cancellation import flipped, shared_tokens, signed_tokens, unique_tokens
from quadrants.ops.entropy_change import (
    covariance_by_set,
    entropy_change,
    signed_shares,
    state_covariance_by_set,
    state_term,
    token_correlation,
)
from quadrants.ops.mismatch import logp_abs_diff
from quadrants.ops.quadrants import Quadrant
from quadrants.ops.random_control import ht_relative_noise
from quadrants.ops.subsample import auto_rows, ratio_mean_se, sample_rows
from quadrants.rewards.grader import Outcome
from quadrants.rollout.engine import Rollouts
from quadrants.tracking import keys
from quadrants.train.context import Forwards, Objective, UpdateSettings
from quadrants.train.forwards import no_grad_pass
from quadrants.train.update import first_epoch_minibatches


def quadrant_telemetry(
    batch: TokenBatch,
    dlogp: Tensor | None = None,
    dlogp_rows: Tensor | None = None,
    entropy_after: Tensor | None = None,
    trained: Tensor | None = None,
    weights: Tensor | None = None,
    denominator: Tensor | None = None,
) -> dict[str, float]:
    """token_frac and `tokens` (the count the quadrant's arm keeps), entropy_mean, adv_mass (Σ of
    the sequence advantage over the quadrant's tokens), the means of the attention entropy and of
    the LoRA adapter residual where the batch holds them, Cui et al.'s covariance term `cov` with
    its signed `cov_share` and the per-state estimate `cov_state` (ops/entropy_change.py),
    `shared_frac` (the quadrant's tokens shared between a group's positive and negative responses,
    ops/cancellation.py) and, when the post-update pass ran, the within-step correlation over the
    quadrant's measured tokens of the per-token prediction −(log π + H) w with the measured ΔH
    (`token_r`; also over all tokens, `train/entropy_token_r`, and the high-entropy ones,
    `train/entropy_token_r_high`, each logged only where defined), mean |Δ log-prob| and mean
    entropy change `dentropy` of each quadrant with their standard errors over the measured rows
    (ops.subsample: 0 when every row was measured), `entropy_change` = token_frac · dentropy, the
    quadrant's part of the change of the batch's mean token entropy, and the flip diagnostics:
    `flip_frac` (tokens whose log-prob moved against their applied advantage, over the tokens with
    one) and `dlogp_signed` (mean Δ log-prob), each also over the shared and the unique tokens.
    Besides the quadrants: `train/kept_tokens` (the tokens the run's arm trains; with
    `_pos`/`_neg` by advantage sign).

    Args:
        batch: the step's full rollout batch.
        dlogp: [n, T] float log π_after − log π_old of rows `dlogp_rows` (0 off the response), or
            None.
        dlogp_rows: [n] long, the batch rows measured; None = every row (n = B).
        entropy_after: [n, T] float, the updated policy's entropy on those rows, or None.
        trained: [B, T] bool, the tokens the update trained (quadrant isolation's keep set, the
            random control's draw); None = every response token. The flips take the applied
            advantage as 0 elsewhere.
        weights: [B, T] float, the applied per-token weight w_t (objectives/loss.py
            `applied_weights`), the covariance terms' A_t; None = the sequence advantage on the
            `trained` tokens (what a token-mean policy gradient applies).
        denominator: [B, T] bool, the loss's denominator, the N tokens the covariance is centred
            and averaged over; None = every response token.

    Returns:
        flat metric dict; an empty quadrant reports zeros.
    """
    total = batch.response_mask.sum().clamp_min(1)
    adv = batch.advantages.float()[:, None].expand_as(batch.entropy)  # [B, T]
    out: dict[str, float] = {}
    rows = (
        torch.arange(batch.batch_size, device=batch.response_mask.device)
        if dlogp_rows is None
        else dlogp_rows
    )
    applied = adv if trained is None else adv * trained
    kept = batch.response_mask if trained is None else trained & batch.response_mask
    positive = (batch.advantages >= 0)[:, None]
    out[keys.train("kept_tokens")] = kept.sum().item()
    out[keys.train("kept_tokens_pos")] = (kept & positive).sum().item()
    out[keys.train("kept_tokens_neg")] = (kept & ~positive).sum().item()
    weights = applied if weights is None else weights.float()
    population = batch.response_mask if denominator is None else denominator & batch.response_mask
    sets = [batch.quadrants[q] for q in Quadrant]
    cov = covariance_by_set(weights, batch.old_logp, population, sets)
    share = signed_shares(cov)
    cov_state = state_covariance_by_set(weights, batch.old_logp, batch.entropy, population, sets)
    shared = shared_tokens(
        batch.sequences[:, -batch.response_length :],
        batch.response_mask,
        batch.advantages,
        batch.group_ids,
    )  # [B, T]
    unique = unique_tokens(shared, batch.response_mask, batch.advantages)
    dentropy = None
    if entropy_after is not None:
        dentropy = entropy_change(
            entropy_after, batch.entropy[rows], batch.response_mask[rows]
        )  # [n, T]
        predicted = state_term(weights[rows], batch.old_logp[rows], batch.entropy[rows])  # [n, T]
        high = batch.quadrants.PHR | batch.quadrants.NHR
        for name, part in (("entropy_token_r", population), ("entropy_token_r_high", high)):
            r = token_correlation(predicted, dentropy, (part & population)[rows])
            if not torch.isnan(r):
                out[keys.train(name)] = r.item()
    flips = None
    if dlogp is not None:
        dlogp = dlogp.float() * batch.response_mask[rows]
        flips = flipped(dlogp, applied[rows]).float()  # [n, T]
        signed = signed_tokens(applied[rows], batch.response_mask[rows])
    for i, q in enumerate(Quadrant):
        mask = batch.quadrants[q]
        count = mask.sum()
        denom = count.clamp_min(1)
        out[keys.quadrant(q.value, "token_frac")] = (count / total).item()
        out[keys.quadrant(q.value, "tokens")] = count.item()
        out[keys.quadrant(q.value, "entropy_mean")] = ((batch.entropy * mask).sum() / denom).item()
        out[keys.quadrant(q.value, "adv_mass")] = (adv * mask).sum().item()
        out[keys.quadrant(q.value, "shared_frac")] = ((shared & mask).sum() / denom).item()
        # the other per-token signals, next to the entropy, where the step computed them
        for stat, signal in (
            ("attention_entropy_mean", batch.attention_entropy),
            ("adapter_residual_mean", batch.adapter_residual),
        ):
            if signal is not None:
                out[keys.quadrant(q.value, stat)] = ((signal * mask).sum() / denom).item()
        if dlogp is not None:
            mean, se = ratio_mean_se(dlogp.abs(), mask[rows], batch.batch_size)
            out[keys.quadrant(q.value, "dlogp_abs")] = mean.item()
            out[keys.quadrant(q.value, "dlogp_abs_se")] = se.item()
            out.update(flip_telemetry(q.value, dlogp, flips, signed, mask[rows], shared[rows],
                                      unique[rows], batch.batch_size))  # fmt: skip
        out[keys.quadrant(q.value, "cov")] = cov[i].item()
        out[keys.quadrant(q.value, "cov_share")] = share[i].item()
        out[keys.quadrant(q.value, "cov_state")] = cov_state[i].item()
        if dentropy is not None:
            mean, se = ratio_mean_se(dentropy, mask[rows], batch.batch_size)
            out[keys.quadrant(q.value, "dentropy")] = mean.item()
            out[keys.quadrant(q.value, "dentropy_se")] = se.item()
            out[keys.quadrant(q.value, "entropy_change")] = (mean * count / total).item()
            r = token_correlation(predicted, dentropy, (mask & population)[rows])
            if not torch.isnan(r):
                out[keys.quadrant(q.value, "token_r")] = r.item()
    return out


def flip_telemetry(
    quadrant: str,
    dlogp: Tensor,
    flips: Tensor,
    signed: Tensor,
    mask: Tensor,
    shared: Tensor,
    unique: Tensor,
    population: int,
) -> dict[str, float]:
    """One quadrant's flip fraction and mean signed Δ log-prob over its measured tokens, over its
    shared and over its unique ones (ops/cancellation.py), with the standard errors of the first
    two (ops/subsample.py). Every argument but the names is [n, T] over the measured rows."""
    out: dict[str, float] = {}
    for suffix, part in (("", mask), ("_shared", mask & shared), ("_unique", mask & unique)):
        flip, flip_se = ratio_mean_se(flips, part & signed, population)
        moved, moved_se = ratio_mean_se(dlogp, part, population)
        out[keys.quadrant(quadrant, f"flip_frac{suffix}")] = flip.item()
        out[keys.quadrant(quadrant, f"dlogp_signed{suffix}")] = moved.item()
        if not suffix:
            out[keys.quadrant(quadrant, "flip_frac_se")] = flip_se.item()
            out[keys.quadrant(quadrant, "dlogp_signed_se")] = moved_se.item()
    return out


def gradient_figures(
    kept: Tensor | None, carrying: Tensor, advantages: Tensor, prefix: str
) -> dict[str, float]:
    """What a keep set trains on one step: `prefix` + grad_tokens_pos / grad_tokens_neg (its
    tokens that carry gradient, objectives/loss.py `gradient_tokens`, of positive / negative
    advantage), grad_rows (the rows holding one) and grad_adv_mass (Σ|A| over those tokens).

    Args:
        kept: [B, T] bool, the tokens the loss keeps (None = every response token).
        carrying: [B, T] bool, the tokens that carry gradient under the full objective.
        advantages: [B] float, the sequence advantages.
    """
    trained = carrying if kept is None else carrying & kept  # [B, T]
    per_row = trained.sum(1)  # [B]
    positive = advantages > 0
    return {
        keys.train(f"{prefix}grad_tokens_pos"): float(per_row[positive].sum()),
        keys.train(f"{prefix}grad_tokens_neg"): float(per_row[~positive].sum()),
        keys.train(f"{prefix}grad_rows"): float((per_row > 0).sum()),
        keys.train(f"{prefix}grad_adv_mass"): float((per_row * advantages.abs()).sum()),
    }


def minibatch_count_gap(
    control: Tensor, arm: Tensor, advantages: Tensor, minibatches: list[Tensor], *, by_sign: bool
) -> float:
    """The largest |control − arm| difference of gradient-carrying token counts over the step's
    first-epoch mini-batches (and, `by_sign`, the two advantage signs): 0 when every mini-batch
    matches.

    Args:
        control, arm: [B, T] bool, the gradient-carrying tokens each trains.
        advantages: [B] float.
        minibatches: the rows of each mini-batch ([b] long each).
    """
    gap = 0.0
    diff = control.sum(1) - arm.sum(1)  # [B]
    for rows in minibatches:
        sign = advantages[rows] > 0
        for side in (sign, ~sign) if by_sign else (torch.ones_like(sign),):
            gap = max(gap, abs(float(diff[rows][side].sum())))
    return gap


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


def control_telemetry(
    objective: Objective,
    settings: UpdateSettings,
    batch: TokenBatch,
    carrying: Tensor,
    trained: Tensor | None,
    step: int,
) -> dict[str, float]:
    """What the run's keep set trains (`gradient_figures`: gradient-carrying
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
    objective: Objective,
    batch: TokenBatch,
    carrying: Tensor,
    is_weights: Tensor | None,
    generator: torch.Generator,
) -> float:
    """The Horvitz–Thompson control's relative gradient noise E‖g_HT − g_full‖² / ‖g_full‖² on
    this batch, in the per-token log-prob coordinates (ops/random_control.py
    `ht_relative_noise`): c_t the full objective's applied weight on each gradient-carrying token
    (objectives/loss.py `applied_weights`, the keep set and the HT weights removed), π_t the
    draw's inclusion probability k_s / n_s, the inverse of the batch's HT weight. `generator`: the
    objective's draws (train/update.py `objective_generator`)."""
    weight = batch.control_weight
    assert weight is not None  # reweight=ht
    quadrant = replace(objective.quadrant, control=None)
    full = replace(batch, control_mask=None, control_weight=None)
    coefficients, _ = applied_weights(
        objective.spec, objective.params, full, replace(objective.loss, quadrant=quadrant),
        is_weights, generator,
    )  # fmt: skip
    reachable = weight > 0
    inclusion = torch.where(reachable, 1.0 / weight.clamp_min(1e-30), 0.0)
    return float(ht_relative_noise(coefficients * carrying, inclusion, reachable))
