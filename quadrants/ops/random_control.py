"""The matched random-token control: a uniformly random set of response tokens as large as the set a
named arm (a quadrant, or a union of them) keeps on the same batch, and its Horvitz–Thompson
weights.

Why (docs/science.md): an arm that trains on a fraction f of the tokens and does as well as all
tokens says nothing about *which* tokens matter until a random subset of the same size is run
beside it (NAT, arXiv 2603.06619, reaches full GRPO with a uniformly random half of the tokens).

The draw is stratified simple random sampling without replacement: stratum s holds n_s response
tokens, k_s of them are drawn, every k_s-subset equally likely (a uniform permutation of the
stratum's tokens, cut after k_s). Without `match_sign` there is one stratum, every response token,
with k = the arm's count; with it there are two, the tokens of non-negative and of negative
advantage (the quadrants' polarity: zero counts as positive), each with the arm's count on that
side, so "random positive tokens" shadows PHR.

Horvitz–Thompson (1952): a token of stratum s is drawn with probability π_s = k_s / n_s, so for
any per-token values ℓ_t the weighted sum over the drawn tokens Σ_{t drawn} ℓ_t / π_t has
expectation Σ_{t in strata with k_s > 0} ℓ_t, every token's value once. NAT's estimator is this
reweighting applied to the token-level policy-gradient loss (its abstract: "an unbiased
partial-token policy-gradient estimator via Horvitz-Thompson reweighting"); under a normaliser that
does not depend on the draw (`quadrant.denominator=all_response_tokens`) the expected loss, and so
the expected gradient, is the full objective's over the sampled strata. A stratum with k_s = 0 is
never drawn and gets weight 0: no reweighting recovers tokens that cannot be drawn.

Shape legend: **B** sequences · **T** response tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from quadrants import seeds

Reweight = Literal["none", "ht"]
REWEIGHTS: tuple[str, ...] = get_args(Reweight)

# Where the control's count is matched (train/score.py `draw_control`, docs/science.md):
# - `minibatch` (default): the arm's gradient-carrying tokens (in the loss's denominator, non-zero
#   advantage), counted in each mini-batch of the update (per sign with match_sign), drawn among
#   that mini-batch's gradient-carrying tokens;
# - `row`: as many as the arm keeps in each row, drawn among that row's gradient-carrying tokens;
# - `nominal`: the suite's first design, the arm's nominal count (every kept response token,
#   gradient or not) over the whole step, drawn among all response tokens (`draw_matched`).
Within = Literal["minibatch", "row", "nominal"]
WITHINS: tuple[str, ...] = get_args(Within)
# `entropy`: the draw keeps the arm's count in each decile of the step's gradient-carrying tokens'
# entropy (`entropy_deciles`), uniformly at random within each bin
Stratify = Literal["none", "entropy"]
STRATIFIES: tuple[str, ...] = get_args(Stratify)
DECILES = 10


def control_generator(seed: int, step: int) -> torch.Generator:
    """The control's CPU generator at `step`: stream `random_control` of the run seed
    (quadrants/seeds.py)."""
    return torch.Generator().manual_seed(seeds.random_control(seed, step))


@dataclass(frozen=True)
class ControlDraw:
    """One step's draw.

    Attributes:
        mask: [B, T] bool, the drawn tokens.
        weight: [B, T] float, 1/π on every token of a stratum with k_s > 0 (n_s / k_s), 0 elsewhere:
            the Horvitz–Thompson weight of a token, were it drawn.
    """

    mask: Tensor
    weight: Tensor


def control_strata(
    response_mask: Tensor, advantages: Tensor, *, by_sign: bool
) -> tuple[Tensor, ...]:
    """The strata the draw samples from: every response token, or (`by_sign`) the tokens of
    non-negative and of negative advantage, in that order.

    Args:
        response_mask: [B, T] bool.
        advantages: [B] float (zero counts as positive, as in ops/quadrants.py).

    Returns:
        one or two [B, T] bool masks, disjoint, their union the response mask.
    """
    response_mask = response_mask.bool()
    if not by_sign:
        return (response_mask,)
    positive = (advantages >= 0)[:, None]  # [B, 1]
    return response_mask & positive, response_mask & ~positive


def draw_matched(
    reference: Tensor, strata: Sequence[Tensor], generator: torch.Generator
) -> ControlDraw:
    """Draw, in each stratum, as many tokens as `reference` holds there, uniformly without
    replacement.

    Args:
        reference: [B, T] bool, the tokens the matched arm keeps (only their count per stratum is
            read).
        strata: disjoint [B, T] bool masks (`control_strata`).
        generator: a CPU generator (`control_generator`); the permutations are drawn on the CPU,
            one per stratum in order, so the draw is the same on every device and rank.

    Returns:
        the ControlDraw: exactly (reference & stratum).sum() tokens in each stratum.
    """
    device = reference.device
    mask = torch.zeros(reference.shape, dtype=torch.bool)
    weight = torch.zeros(reference.shape, dtype=torch.float32)
    flat_mask, flat_weight = mask.view(-1), weight.view(-1)
    for stratum in strata:
        stratum = stratum.bool().cpu()
        members = torch.nonzero(stratum.view(-1)).squeeze(1)  # [n_s], ascending
        wanted = int((reference.bool().cpu() & stratum).sum())  # k_s
        if wanted == 0:
            continue
        order = torch.randperm(members.numel(), generator=generator)[:wanted]
        flat_mask[members[order]] = True
        flat_weight[members] = members.numel() / wanted  # 1 / π_s
    return ControlDraw(mask.to(device), weight.to(device))


def draw_by_labels(labels: Tensor, wanted: Tensor, generator: torch.Generator) -> ControlDraw:
    """Draw `wanted[s]` tokens uniformly without replacement among the tokens labelled s, for every
    stratum s at once.

    Args:
        labels: [B, T] long, each token's stratum in [0, S), or -1 for a token never drawn.
        wanted: [S] long, k_s (at most n_s, the stratum's size).
        generator: a CPU generator; one uniform key per token is drawn on the CPU (B·T of them,
            every token's, so the draw does not depend on the device or rank).

    Returns:
        the ControlDraw: exactly k_s tokens of each stratum; weight n_s / k_s on every token of a
        stratum with k_s > 0, 0 elsewhere.

    Within a stratum the k_s tokens of smallest key are drawn: the keys are i.i.d. continuous, so
    their order is a uniform permutation and every k_s-subset is equally likely (simple random
    sampling without replacement, as `draw_matched`'s randperm).
    """
    device = labels.device
    flat = labels.reshape(-1).cpu()
    keys = torch.rand(flat.shape, generator=generator, dtype=torch.float64)
    eligible = torch.nonzero(flat >= 0).squeeze(1)
    strata = flat[eligible]
    sizes = torch.bincount(strata, minlength=wanted.numel())  # n_s
    wanted = wanted.cpu().long()
    if bool((wanted > sizes).any()):
        raise ValueError(f"a stratum asks for more tokens than it holds: {wanted} > {sizes}")
    # sort by (stratum, key): each stratum's tokens in a run, in the order of their keys
    order = torch.argsort(strata.double() * 2.0 + keys[eligible], stable=True)
    starts = torch.cumsum(sizes, 0) - sizes
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel()) - starts[strata[order]]
    drawn = rank < wanted[strata]
    mask = torch.zeros(flat.shape, dtype=torch.bool)
    mask[eligible[drawn]] = True
    per_stratum = torch.where(wanted > 0, sizes.float() / wanted.clamp_min(1).float(), 0.0)
    weight = torch.zeros(flat.shape, dtype=torch.float32)
    weight[eligible] = per_stratum[strata]
    return ControlDraw(mask.view(labels.shape).to(device), weight.view(labels.shape).to(device))


def entropy_deciles(entropy: Tensor, eligible: Tensor) -> Tensor:
    """[B, T] long, each token's decile (0..9) of the entropy of the `eligible` tokens ([B, T]
    bool: the step's gradient-carrying tokens); -1 off them.

    Bin d holds the tokens whose entropy rank (ties broken by position, a stable sort) lies in
    [d·n/10, (d+1)·n/10): equal-count bins, so a tie at a bin edge still splits exactly."""
    values = entropy.reshape(-1).double()
    members = torch.nonzero(eligible.reshape(-1)).squeeze(1)
    bins = torch.full(values.shape, -1, dtype=torch.long, device=values.device)
    n = members.numel()
    if n:
        order = torch.argsort(values[members], stable=True)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(n, device=order.device)
        bins[members] = rank * DECILES // n
    return bins.view(entropy.shape)


def matched_counts(
    labels: Tensor, reference: Tensor, strata: int, fraction: float | None = None
) -> Tensor:
    """[S] long, the count to draw in each stratum: the `reference` tokens ([B, T] bool, the arm's
    gradient-carrying ones) labelled s, or with `fraction` f the share f of the stratum's size
    n_s, rounded half up (f = 1 draws every token)."""
    flat = labels.reshape(-1).cpu()
    eligible = flat >= 0
    if fraction is not None:
        sizes = torch.bincount(flat[eligible], minlength=strata).double()
        return torch.floor(sizes * fraction + 0.5).long()
    hits = eligible & reference.reshape(-1).cpu().bool()
    return torch.bincount(flat[hits], minlength=strata)


def ht_relative_noise(coefficients: Tensor, inclusion: Tensor, reachable: Tensor) -> Tensor:
    """[] float64, E‖g_HT − g_full‖² / ‖g_full‖² of the Horvitz–Thompson control in the
    coordinates of the per-token log-probs: closed form for stratified sampling without
    replacement.

    g_full has one coordinate per token, c_t = ∂loss/∂log π_t of the full objective (ratio 1:
    proportional to the applied weight, objectives/loss.py `applied_weights`); the HT estimate's
    coordinate is z_t c_t / π_t, z_t = 1 when t is drawn (P(z_t = 1) = π_t). The coordinates are
    distinct tokens, so the draw's covariance between tokens falls off the diagonal of the squared
    norm, and E‖g_HT − g_full‖² = Σ_t c_t² Var(z_t/π_t) = Σ_{t reachable} c_t² (1 − π_t)/π_t
    + Σ_{t unreachable} c_t² (a token of a stratum drawn 0 times is never recovered: its whole
    coordinate is error). In parameter space the tokens' gradients ∇log π_t also correlate, which
    this does not see (the gradient-cosine diagnostic measures the parameter-space direction).

    Args:
        coefficients: [B, T] float, c_t (0 on tokens carrying no gradient).
        inclusion: [B, T] float, π_t of each reachable token.
        reachable: [B, T] bool, tokens of strata with k_s > 0.
    """
    c2 = coefficients.double() ** 2
    total = c2.sum()
    pi = inclusion.double().clamp_min(1e-300)
    noise = torch.where(reachable, c2 * (1.0 - pi) / pi, c2).sum()
    return noise / total if float(total) > 0 else total.new_tensor(float("nan"))
