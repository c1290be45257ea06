"""The matched random-token control's draw (ops/random_control.py) by hand: the exact matched count
per step and per sign, and a draw reproducible from its seed stream."""

from __future__ import annotations

import pytest
import torch

from quadrants.objectives.batch import make_token_batch
from quadrants.ops.random_control import (
    control_generator,
    control_strata,
    draw_matched,
)


def hand_batch():
    """2 groups x 2 responses, T = 4, advantages exact (normalize_std=False, rewards [1, 0]):
    rows 0, 2 at +0.5 and rows 1, 3 at -0.5.

    group 0: entropy [[2, 0, 2, 0], [0, 0, 0, 2]], mean 6/8 = 0.75:
        row 0 (+): PHR t0, t2 (2) · PLR t1, t3 (2);  row 1 (-): NHR t3 (1) · NLR t0-t2 (3)
    group 1: row 2 has 3 tokens; entropy [[1, 1, 1, -], [3, 0, 0, 0]], mean 6/7 = 0.857:
        row 2 (+): PHR t0-t2 (3);                    row 3 (-): NHR t0 (1) · NLR t1-t3 (3)
    totals: PHR 5, PLR 2, NHR 2, NLR 6; 15 response tokens, 7 positive, 8 negative."""
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    return make_token_batch(
        sequences=torch.zeros(4, 5, dtype=torch.long),
        attention_mask=torch.cat([torch.ones(4, 1, dtype=torch.bool), mask], dim=1),
        response_mask=mask,
        old_logp=torch.full((4, 4), -1.0),
        entropy=torch.tensor([[2.0, 0, 2, 0], [0, 0, 0, 2], [1, 1, 1, 0], [3, 0, 0, 0]]),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        normalize_std=False,
    )


def test_hand_batch_quadrant_counts():
    tb = hand_batch()
    counts = {q: int(tb.quadrants[q].sum()) for q in ("PHR", "PLR", "NHR", "NLR")}
    assert counts == {"PHR": 5, "PLR": 2, "NHR": 2, "NLR": 6}


@pytest.mark.parametrize(
    ("match", "by_sign", "want_pos", "want_neg"),
    [
        # one stratum (all 15 tokens): only the total is fixed, 5 for PHR, 2 + 2 = 4 for PHR+NHR
        (["PHR"], False, None, None),
        (["PHR", "NHR"], False, None, None),
        # by sign: PHR's 5 among the 7 positive tokens, none of the 8 negative
        (["PHR"], True, 5, 0),
        # NHR + NLR = 2 + 6 = 8: every negative token, no positive one
        (["NHR", "NLR"], True, 0, 8),
    ],
)
def test_control_keeps_exactly_the_matched_count_every_step(match, by_sign, want_pos, want_neg):
    tb = hand_batch()
    reference = tb.quadrants.union(match)
    strata = control_strata(tb.response_mask, tb.advantages, by_sign=by_sign)
    positive = (tb.advantages >= 0)[:, None]
    for step in range(20):
        draw = draw_matched(reference, strata, control_generator(seed=3, step=step))
        assert not bool((draw.mask & ~tb.response_mask).any())  # response tokens only
        assert int(draw.mask.sum()) == int(reference.sum())
        if by_sign:
            assert int((draw.mask & positive).sum()) == want_pos
            assert int((draw.mask & ~positive).sum()) == want_neg


def test_ht_weights_are_inverse_inclusion_probabilities():
    tb = hand_batch()
    positive = (tb.advantages >= 0)[:, None] & tb.response_mask
    # one stratum, PHR: pi = 5/15, weight 3 on every response token, 0 on padding
    one = draw_matched(
        tb.quadrants["PHR"],
        control_strata(tb.response_mask, tb.advantages, by_sign=False),
        control_generator(0, 0),
    )
    assert torch.equal(one.weight, tb.response_mask.float() * 3.0)
    # by sign, PHR: pi = 5/7 on the positive tokens (weight 7/5), the negative stratum is never
    # drawn (k = 0): weight 0 there
    two = draw_matched(
        tb.quadrants["PHR"],
        control_strata(tb.response_mask, tb.advantages, by_sign=True),
        control_generator(0, 0),
    )
    assert torch.equal(two.weight, positive.float() * (7 / 5))


def test_draw_is_reproducible_from_its_stream():
    tb = hand_batch()
    reference = tb.quadrants["PHR"]
    strata = control_strata(tb.response_mask, tb.advantages, by_sign=False)

    def mask(seed: int, step: int) -> torch.Tensor:
        return draw_matched(reference, strata, control_generator(seed, step)).mask

    assert torch.equal(mask(0, 1), mask(0, 1))  # same seed and step: the same tokens
    # 5 of 15 tokens: C(15, 5) = 3003 possible draws; these steps and seeds give different ones
    # (deterministic: the generators are seeded)
    assert not torch.equal(mask(0, 1), mask(0, 2))
    assert not torch.equal(mask(0, 1), mask(1, 1))
    # over 50 steps the draws are not all alike: at least 40 distinct subsets (a seed stream that
    # repeated itself across steps would give 1)
    distinct = {tuple(mask(0, s).flatten().tolist()) for s in range(50)}
    assert len(distinct) >= 40
