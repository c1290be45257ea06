"""Reduce per-token losses to one scalar: the normalisers frameworks disagree on, by name.

Every mode takes the per-token loss (already zero where a token gets no gradient) and a
`denominator_mask` saying which tokens count in the normaliser. Keeping these apart is what lets a
quadrant-isolation run keep the paper's normaliser 1/Σ|o_i| over *all* response tokens while only a
quarter of them carry gradient.

| mode | formula (D = denominator_mask, S = sequences with at least one D token) |
|---|---|
| token-mean | Σ_{i,t} l_it / Σ_{i,t} D_it (DAPO; the paper's 1/Σ|o_i|) |
| seq-mean-token-mean | 1/|S| Σ_{i∈S} (Σ_t l_it / Σ_t D_it) (original GRPO) |
| seq-mean-token-sum | 1/|S| Σ_{i∈S} Σ_t l_it |
| seq-mean-token-sum-norm | Σ_{i,t} l_it / (|S| · norm_length) (Dr. GRPO; norm_length default T) |

All four are linear in the per-token loss for a fixed denominator mask, so losses of disjoint token
sets sum to the loss of their union. Each divides by one scalar of the whole batch
(`loss_normaliser`: Σ D for token-mean, |S| for the seq-mean modes, |S| · norm_length for the last);
given it, the loss of a set of rows is aggregated over those rows alone, and the losses of disjoint
row sets sum to the batch's (`normaliser=` of `aggregate_loss`: the update's micro-batches,
train/update.py).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

LossAggregation = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
LOSS_AGGREGATIONS: tuple[str, ...] = get_args(LossAggregation)


def aggregate_loss(
    per_token_loss: Tensor,
    denominator_mask: Tensor,
    mode: LossAggregation = "token-mean",
    norm_length: int | None = None,
    normaliser: Tensor | None = None,
) -> Tensor:
    """Aggregate a per-token loss to a scalar.

    Args:
        per_token_loss: [B, T] float, zero on tokens that carry no gradient.
        denominator_mask: [B, T] bool, tokens counted in the normaliser.
        mode: one of LOSS_AGGREGATIONS.
        norm_length: the constant length of seq-mean-token-sum-norm (default T).
        normaliser: [] float, the divisor of a larger batch these rows belong to
            (`loss_normaliser` of its denominator mask); None = this batch's own.

    Returns:
        [] float scalar; 0 when no token counts in the denominator.
    """
    if normaliser is None:
        normaliser = loss_normaliser(denominator_mask, mode, norm_length, per_token_loss.dtype)
    mask = denominator_mask.to(per_token_loss.dtype)
    if mode == "token-mean":
        return per_token_loss.sum() / normaliser
    seq_count = mask.sum(-1)  # [B]
    present = (seq_count > 0).to(per_token_loss.dtype)  # [B]
    seq_sum = per_token_loss.sum(-1) * present  # [B]
    if mode == "seq-mean-token-mean":
        return (seq_sum / seq_count.clamp_min(1.0)).sum() / normaliser
    return seq_sum.sum() / normaliser


def loss_normaliser(
    denominator_mask: Tensor,
    mode: LossAggregation = "token-mean",
    norm_length: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The scalar `aggregate_loss` divides by ([] `dtype`): Σ D (token-mean), |S|
    (seq-mean-token-mean, seq-mean-token-sum) or |S| · norm_length (seq-mean-token-sum-norm;
    default T); |S| and Σ D at least 1."""
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(
            f"loss aggregation {mode!r} is unknown; choose one of {list(LOSS_AGGREGATIONS)}"
        )
    mask = denominator_mask.to(dtype)
    if mode == "token-mean":
        return mask.sum().clamp_min(1.0)
    num_seqs = (mask.sum(-1) > 0).to(dtype).sum().clamp_min(1.0)
    if mode != "seq-mean-token-sum-norm":
        return num_seqs
    length = denominator_mask.shape[-1] if norm_length is None else norm_length
    return num_seqs * length


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` over True entries of `mask`; 0 for an empty mask. Any shape -> []."""
    m = mask.to(values.dtype)
    return (values * m).sum() / m.sum().clamp_min(1.0)
