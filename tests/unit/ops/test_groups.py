"""Per-group reductions: hand-computed mean/std and a plain-loop reference."""

from __future__ import annotations

import math

import torch

from quadrants.ops.groups import (
    compact_group_ids,
    group_sum,
    group_token_mean_std,
    grouped_order,
)


def test_compact_group_ids_maps_arbitrary_ids_to_0_to_k():
    # sorted unique ids [3, 7, 10] -> 0, 1, 2
    index, k = compact_group_ids(torch.tensor([7, 3, 7, 10]))
    assert k == 3
    assert index.tolist() == [1, 0, 1, 2]


def test_group_sum_by_hand():
    # group 0 gets 1 + 3 = 4, group 1 gets 2
    out = group_sum(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 1, 0]), 2)
    torch.testing.assert_close(out, torch.tensor([4.0, 2.0]), rtol=0, atol=0)


def test_group_token_mean_std_by_hand():
    # sequences 0 and 2 answer prompt 5, sequence 1 answers prompt 9 (non-contiguous ids)
    # group 5 response tokens: 1, 2 (seq 0) and 3 (seq 2; its 100 is padding)
    #   -> count 3, mean 2, population var (1 + 0 + 1) / 3 = 2/3 -> std 0.8164966
    # group 9 response tokens: 4, 6 -> count 2, mean 5, var (1 + 1) / 2 = 1 -> std 1
    values = torch.tensor([[1.0, 2.0], [4.0, 6.0], [3.0, 100.0]])
    response_mask = torch.tensor([[True, True], [True, True], [True, False]])
    mean, std, count = group_token_mean_std(values, response_mask, torch.tensor([5, 9, 5]))
    torch.testing.assert_close(mean, torch.tensor([2.0, 5.0, 2.0]), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        std, torch.tensor([math.sqrt(2 / 3), 1.0, math.sqrt(2 / 3)]), rtol=0, atol=1e-6
    )
    torch.testing.assert_close(count, torch.tensor([3.0, 2.0, 3.0]), rtol=0, atol=0)


def test_group_without_response_tokens_gets_zeros():
    # group 1 has no response tokens at all -> mean 0, std 0, count 0
    values = torch.tensor([[1.0, 3.0], [7.0, 8.0]])
    response_mask = torch.tensor([[True, True], [False, False]])
    mean, std, count = group_token_mean_std(values, response_mask, torch.tensor([0, 1]))
    torch.testing.assert_close(mean, torch.tensor([2.0, 0.0]), rtol=0, atol=0)
    torch.testing.assert_close(std, torch.tensor([1.0, 0.0]), rtol=0, atol=0)
    torch.testing.assert_close(count, torch.tensor([2.0, 0.0]), rtol=0, atol=0)


def loop_group_token_mean_std(values, response_mask, group_ids):
    """Plain-Python reference: gather each group's response tokens, mean and population std."""
    mean, std, count = [], [], []
    for gid in group_ids.tolist():
        tokens = [
            float(values[i, t])
            for i in range(values.shape[0])
            if int(group_ids[i]) == gid
            for t in range(values.shape[1])
            if bool(response_mask[i, t])
        ]
        m = sum(tokens) / len(tokens) if tokens else 0.0
        var = sum((x - m) ** 2 for x in tokens) / len(tokens) if tokens else 0.0
        mean.append(m)
        std.append(math.sqrt(var))
        count.append(float(len(tokens)))
    return torch.tensor(mean), torch.tensor(std), torch.tensor(count)


def test_group_token_mean_std_matches_loop_reference():
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        batch, length = 12, 9
        values = torch.rand(batch, length, generator=gen) * 3
        response_mask = torch.rand(batch, length, generator=gen) < 0.7
        response_mask[0] = False  # a sequence with no response tokens
        group_ids = (
            torch.randint(0, 6, (batch,), generator=gen) * 11
        )  # non-contiguous ids, some groups absent
        got = group_token_mean_std(values, response_mask, group_ids)
        expected = loop_group_token_mean_std(values, response_mask, group_ids)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-6)


def test_grouped_order_keeps_each_groups_rows_together():
    # 3 groups of 2, interleaved rows: group 7 at rows 0, 3; group 2 at rows 1, 4; group 5 at 2, 5
    group_ids = torch.tensor([7, 2, 5, 7, 2, 5])
    orders = [grouped_order(group_ids, torch.Generator().manual_seed(s)) for s in range(12)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(6))  # every row once
        pairs = [order[i : i + 2].tolist() for i in (0, 2, 4)]
        # each consecutive pair is one group's rows, in batch order
        assert all(group_ids[a] == group_ids[b] and a < b for a, b in pairs)
    # the groups' order is drawn: 12 seeds give more than one of the 3! = 6 orders
    assert len({tuple(o.tolist()) for o in orders}) > 1
    torch.testing.assert_close(
        grouped_order(group_ids, torch.Generator().manual_seed(0)), orders[0]
    )  # reproducible from the generator
