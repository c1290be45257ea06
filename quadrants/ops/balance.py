"""Reward-balanced mini-batches (`train.minibatch_grouping=balanced`): a row order whose consecutive
mini-batches each hold the batch's proportion of positive- and negative-advantage responses, as
nearly as whole rows allow (docs/science.md, "Flips and cancellation").

A row is positive (advantage > 0), negative (< 0) or zero (= 0: a constant group's, which carries
no policy gradient). The batch of B rows is cut into mini-batches of `size` rows (the last one
shorter when size does not divide B), and each mini-batch k of m_k rows gets
1. its share of the zero rows: the prefix counts Z(e) = round(e · n_zero / B) at the mini-batch
   ends e (cumulative rounding, half up), so each mini-batch holds ⌊m_k n_zero / B⌋ or ⌈·⌉ of
   them and all n_zero are placed;
2. among its other rows, their share of positive ones, the same way over the cumulative counts of
   non-zero rows: P = round(cumulative non-zero · n_pos / n_nonzero); the rest are negative.
So every mini-batch's positive : negative split is the batch's, to within one row of each
(hand-computed in tests/unit/ops/test_balance.py). Within each class the rows are taken in an
order drawn with the caller's generator (the update's `shuffle` stream), so which positive rows
share a mini-batch is random, and a mini-batch's rows are shuffled among themselves.

Shape legend: **B** sequences.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _round_share(count: int, total: int, of: int) -> int:
    """round(count · of / total), halves up, in integers (0 when total is 0)."""
    return (2 * count * of + total) // (2 * total) if total else 0


def balanced_counts(
    positive: int, negative: int, zero: int, size: int
) -> list[tuple[int, int, int]]:
    """(positive, negative, zero) rows of each mini-batch of `size` rows, in order (module
    docstring): the batch's classes spread in proportion by cumulative rounding."""
    total = positive + negative + zero
    nonzero = positive + negative
    counts: list[tuple[int, int, int]] = []
    placed_zero = placed_pos = placed_nonzero = 0
    for end in range(size, total + size, size):
        end = min(end, total)
        zero_to = _round_share(end, total, zero)
        nonzero_to = end - zero_to
        pos_to = _round_share(nonzero_to, nonzero, positive)
        z, nz, p = zero_to - placed_zero, nonzero_to - placed_nonzero, pos_to - placed_pos
        counts.append((p, nz - p, z))
        placed_zero, placed_nonzero, placed_pos = zero_to, nonzero_to, pos_to
    return counts


def balanced_order(advantages: Tensor, size: int, generator: torch.Generator) -> Tensor:
    """A permutation [B] of the rows whose consecutive `size`-row slices are the balanced
    mini-batches of `advantages` [B] (module docstring); drawn on the CPU `generator`."""
    advantages = advantages.detach().cpu()
    classes = [advantages > 0, advantages < 0, advantages == 0]
    pools = []
    for member in classes:  # each class's rows in a random order
        rows = torch.nonzero(member).squeeze(1)
        pools.append(rows[torch.randperm(rows.numel(), generator=generator)])
    sizes = [int(pool.numel()) for pool in pools]
    taken = [0, 0, 0]
    parts: list[Tensor] = []
    for counts in balanced_counts(*sizes, size):
        mini = []
        for c, n in enumerate(counts):
            mini.append(pools[c][taken[c] : taken[c] + n])
            taken[c] += n
        rows = torch.cat(mini)
        parts.append(rows[torch.randperm(rows.numel(), generator=generator)])
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
