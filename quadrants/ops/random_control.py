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
