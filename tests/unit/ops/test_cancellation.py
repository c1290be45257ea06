"""Shared and unique tokens, and flips (ops/cancellation.py), by hand."""

from __future__ import annotations

import torch

from quadrants.ops.cancellation import flipped, shared_tokens, signed_tokens, unique_tokens


def test_shared_tokens_need_the_same_prefix_in_an_opposite_response_of_the_group():
    # group 0: row 0 (+) [5, 6, 7], row 1 (-) [5, 6, 8], row 2 (-) [9, 6, 7];
    # group 1: row 3 (+) [5, 6, 7] (same ids as row 0, other group), row 4 (-) [5, 6, pad],
    #          row 5 (0 advantage) [5, 6, 7]
    ids = torch.tensor([[5, 6, 7], [5, 6, 8], [9, 6, 7], [5, 6, 7], [5, 6, 0], [5, 6, 7]])
    mask = torch.ones(6, 3, dtype=torch.bool)
    mask[4, 2] = False
    adv = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.5, -0.5, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    shared = shared_tokens(ids, mask, adv, groups)
    expected = torch.tensor(
        [
            # row 0 shares 5, 5 6 with row 1; its 7 follows another prefix in row 2 (9 6 7)
            [True, True, False],
            [True, True, False],
            # row 2's 6 and 7 sit where row 0's do, after another first token: not shared
            [False, False, False],
            # row 3 shares 5, 5 6 with row 4; row 4 has no token 2 (padding), row 5 is on no side
            [True, True, False],
            [True, True, False],
            [False, False, False],
        ]
    )
    assert torch.equal(shared, expected)
    unique = unique_tokens(shared, mask, adv)
    # every non-shared token of a non-zero-advantage row, padding and row 5 excluded
    assert unique.tolist() == [
        [False, False, True],
        [False, False, True],
        [True, True, True],
        [False, False, True],
        [False, False, False],
        [False, False, False],
    ]


def test_flips_are_moves_against_the_applied_advantage():
    dlogp = torch.tensor([[0.2, -0.1, 0.0], [0.4, -0.2, 0.3]])
    applied = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
    # row 0 (A > 0): only -0.1 moved down; 0.0 did not move. row 1 (A < 0): +0.4 moved up;
    # the last token has no applied advantage (not trained): no flip, and not counted
    assert flipped(dlogp, applied).tolist() == [[False, True, False], [True, False, False]]
    mask = torch.ones(2, 3, dtype=torch.bool)
    assert signed_tokens(applied, mask).tolist() == [[True, True, True], [True, True, False]]


def test_shared_tokens_in_chunks_of_pairs_equal_one_pass(monkeypatch):
    import quadrants.ops.cancellation as cancellation

    gen = torch.Generator().manual_seed(0)
    # 4 groups of 4 responses over a 3-token vocabulary (many shared prefixes), 5 tokens each
    ids = torch.randint(0, 3, (16, 5), generator=gen)
    mask = torch.arange(5)[None] < torch.randint(1, 6, (16,), generator=gen)[:, None]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5] * 4)
    groups = torch.arange(4).repeat_interleave(4)
    whole = shared_tokens(ids, mask, adv, groups)
    monkeypatch.setattr(cancellation, "PAIR_CHUNK_TOKENS", 5 * 3)  # 3 pairs per chunk
    assert torch.equal(shared_tokens(ids, mask, adv, groups), whole)
    assert 0 < int(whole.sum()) < int(mask.sum())  # neither trivially empty nor full
