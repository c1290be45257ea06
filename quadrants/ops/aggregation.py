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
sets sum to the loss of their union.
"""

from __future__ import annotations

from typing import Literal, get_args

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
) -> Tensor:
    """Aggregate a per-token loss to a scalar.

    Args:
        per_token_loss: [B, T] float, zero on tokens that carry no gradient.
        denominator_mask: [B, T] bool, tokens counted in the normaliser.
        mode: one of LOSS_AGGREGATIONS.
        norm_length: the constant length of seq-mean-token-sum-norm (default T).

    Returns:
        [] float scalar; 0 when no token counts in the denominator.
    """
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(
            f"loss aggregation {mode!r} is unknown; choose one of {list(LOSS_AGGREGATIONS)}"
        )
    mask = denominator_mask.to(per_token_loss.dtype)
    if mode == "token-mean":
        return per_token_loss.sum() / mask.sum().clamp_min(1.0)
    seq_count = mask.sum(-1)  # [B]
    present = (seq_count > 0).to(per_token_loss.dtype)  # [B]
    num_seqs = present.sum().clamp_min(1.0)
    seq_sum = per_token_loss.sum(-1) * present  # [B]
    if mode == "seq-mean-token-mean":
        return (seq_sum / seq_count.clamp_min(1.0)).sum() / num_seqs
    if mode == "seq-mean-token-sum":
        return seq_sum.sum() / num_seqs
    length = per_token_loss.shape[-1] if norm_length is None else norm_length
    return seq_sum.sum() / (num_seqs * length)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` over True entries of `mask`; 0 for an empty mask. Any shape -> []."""
    m = mask.to(values.dtype)
    return (values * m).sum() / m.sum().clamp_min(1.0)
