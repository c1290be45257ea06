"""Flip and cancellation diagnostics of one update: which tokens' log-probs moved against their own
advantage, and which tokens a group's positive and negative responses share.

Cheng et al., "The Cancellation Hypothesis in Critic-Free RL" (arXiv 2605.08666), observe that
positive and negative rollouts hold similar proportions of tokens whose probability went up and
down after the update (token flipping), and explain it by coupling: the gradients of identical
tokens interact, so the opposite pushes a token receives from a group's positive and negative
responses cancel, while tokens specific to one side move with their own advantage. Masking a
quadrant removes that cancellation, so an arm's effect may come from what it no longer cancels.

Definitions (docs/science.md):
- **applied advantage** A_t: the advantage the update gave token t (the sequence advantage on a
  trained token, 0 on a token the arm does not train);
- **flip**: the token's log-prob moved against the sign of A_t: A_t > 0 and Δ_t < 0, or A_t < 0 and
  Δ_t > 0, with Δ_t = log π_after − log π_old. A token with A_t = 0 has no sign to move against and
  is left out of the flip fraction (`signed_tokens`); Δ_t = 0 is no flip;
- **shared** token (the strict rule): response token t of sequence i is shared when a response j
  of the same group with advantage of the opposite strict sign (A_i > 0 > A_j or A_i < 0 < A_j)
  holds the same tokens at positions 0..t, the token itself included: the two responses reached
  the same state and took the same action there, so the two pushes fall on one (state, action).
  The prompt is the group's, identical by construction. A response of advantage exactly 0 is on
  neither side: its tokens are neither shared nor unique;
- **unique** token: a token of a response with non-zero advantage that is not shared.

Shape legend: **B** sequences · **T** response tokens · **P** pairs of opposite-sign responses of
one group · **n** measured rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

PAIR_CHUNK_TOKENS = 1 << 22  # tokens compared at once by `shared_tokens` (pairs x T)


def opposite_pairs(advantages: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Every ordered pair (i, j) of responses of one group with A_i and A_j of opposite strict
    signs. [B] float, [B] long -> ([P] long, [P] long)."""
    same_group = group_ids[:, None] == group_ids[None, :]  # [B, B]
    sign = torch.sign(advantages)
    opposite = (sign[:, None] * sign[None, :]) < 0  # [B, B]
    first, second = torch.nonzero(same_group & opposite, as_tuple=True)
    return first, second


def shared_tokens(
    response_ids: Tensor, response_mask: Tensor, advantages: Tensor, group_ids: Tensor
) -> Tensor:
    """[B, T] bool: the shared tokens (the strict rule above).

    Args:
        response_ids: [B, T] long, the sampled response tokens (right-padded).
        response_mask: [B, T] bool, True on generated tokens.
        advantages: [B] float, the sequence advantages.
        group_ids: [B] long, the prompt each sequence answers.
    """
    mask = response_mask.bool()
    first, second = opposite_pairs(advantages, group_ids)  # [P], [P]
    hits = torch.zeros(mask.shape, dtype=torch.int32, device=mask.device)
    # pairs in chunks of at most PAIR_CHUNK_TOKENS tokens: a 7B recipe's 4096 rows of 8192 tokens
    # hold ~16k pairs, whose gathered ids alone would be 1 GiB
    step = max(1, PAIR_CHUNK_TOKENS // max(1, mask.shape[1]))
    for start in range(0, first.numel(), step):
        i, j = first[start : start + step], second[start : start + step]
        same = (response_ids[i] == response_ids[j]) & mask[i] & mask[j]  # [p, T]
        prefix = torch.cummin(same.to(torch.uint8), dim=1).values  # 1 where same at 0..t
        hits.index_add_(0, i, prefix.to(torch.int32))
    return (hits > 0) & mask


def unique_tokens(shared: Tensor, response_mask: Tensor, advantages: Tensor) -> Tensor:
    """[B, T] bool: tokens of non-zero-advantage responses that are not shared."""
    return response_mask.bool() & (advantages != 0)[:, None] & ~shared


def flipped(dlogp: Tensor, applied: Tensor) -> Tensor:
    """[n, T] bool: Δ log-prob against the sign of the applied advantage (A > 0 > Δ or A < 0 < Δ).

    Args:
        dlogp: [n, T] float, log π_after − log π_old.
        applied: [n, T] float, the applied advantage (0 where the update did not train).
    """
    return ((applied > 0) & (dlogp < 0)) | ((applied < 0) & (dlogp > 0))


def signed_tokens(applied: Tensor, mask: Tensor) -> Tensor:
    """[n, T] bool: the tokens of `mask` whose applied advantage has a sign (the flip fraction's
    denominator)."""
    return mask.bool() & (applied != 0)
