"""Reward-balanced mini-batches (ops/balance.py), by hand."""

from __future__ import annotations

import torch

from quadrants.ops.balance import balanced_counts, balanced_order


def test_counts_without_zero_rows():
    # 2 positive, 6 negative, mini-batches of 4: positive prefix counts at the ends 4 and 8 are
    # round(4 * 2 / 8) = 1 and round(8 * 2 / 8) = 2: one positive and three negative in each
    assert balanced_counts(2, 6, 0, 4) == [(1, 3, 0), (1, 3, 0)]


def test_counts_with_zero_rows_and_uneven_shares():
    # 3 positive, 5 negative, 4 zero (B = 12), mini-batches of 4.
    # zero prefix at 4, 8, 12: round(4*4/12) = round(1.33) = 1, round(2.67) = 3, 4 -> zeros 1, 2, 1
    # non-zero per mini-batch 3, 2, 3 (cumulative 3, 5, 8); positive prefix round(3*3/8) =
    # round(1.125) = 1, round(5*3/8) = round(1.875) = 2, round(8*3/8) = 3 -> positives 1, 1, 1,
    # negatives 3-1 = 2, 2-1 = 1, 3-1 = 2
    assert balanced_counts(3, 5, 4, 4) == [(1, 2, 1), (1, 1, 2), (1, 2, 1)]


def test_counts_with_a_short_last_mini_batch():
    # 5 positive, 5 negative, mini-batches of 4 over B = 10: ends 4, 8, 10; positive prefix
    # round(4 * 5 / 10) = 2, round(8 * 5 / 10) = 4, 5 -> 2, 2, 1; a half rounds up (not needed)
    assert balanced_counts(5, 5, 0, 4) == [(2, 2, 0), (2, 2, 0), (1, 1, 0)]
    # halves round up: 1 positive and 1 negative in mini-batches of 1 -> round(1 * 1 / 2) =
    # round(0.5) = 1: the positive comes first
    assert balanced_counts(1, 1, 0, 1) == [(1, 0, 0), (0, 1, 0)]


def test_order_is_a_permutation_with_the_counts_in_each_slice():
    # B = 12: advantages 3 positive, 5 negative, 4 zero, interleaved in no special order
    adv = torch.tensor([0.5, -1.0, 0.0, -0.2, 0.0, 1.5, -0.3, 0.0, -0.7, 0.2, 0.0, -0.1])
    order = balanced_order(adv, 4, torch.Generator().manual_seed(0))
    assert sorted(order.tolist()) == list(range(12))
    counts = [
        (
            int((adv[s] > 0).sum()),
            int((adv[s] < 0).sum()),
            int((adv[s] == 0).sum()),
        )
        for s in order.split(4)
    ]
    assert counts == [(1, 2, 1), (1, 1, 2), (1, 2, 1)]  # = test_counts_with_zero_rows_...


def test_order_is_drawn_from_the_generator():
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, -1.0])
    first = balanced_order(adv, 4, torch.Generator().manual_seed(1))
    assert torch.equal(first, balanced_order(adv, 4, torch.Generator().manual_seed(1)))
    # other seeds put other rows together (8 rows: many orders satisfy the counts)
    others = {
        tuple(balanced_order(adv, 4, torch.Generator().manual_seed(s)).tolist()) for s in range(8)
    }
    assert len(others) > 1
