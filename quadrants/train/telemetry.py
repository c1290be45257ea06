"""Per-step telemetry: per-quadrant statistics of a TokenBatch, reduced to floats for the tracker.

This is where tensors become Python floats (`.item()`), once per step, after the update.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from quadrants.objectives.batch import TokenBatch
from quadrants.ops.cancellation import flipped, shared_tokens, signed_tokens, unique_tokens
from quadrants.ops.entropy_change import (
    covariance_by_set,
    entropy_change,
    signed_shares,
    state_covariance_by_set,
    state_term,
    token_correlation,
)
from quadrants.ops.quadrants import Quadrant
from quadrants.ops.subsample import ratio_mean_se
from quadrants.tracking import keys


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
