"""DAPO's soft overlong penalty, by hand."""

import pytest
import torch

from quadrants.ops.overlong import overlong_penalty


def test_overlong_penalty_by_hand():
    # L_max = 10, L_cache = 4: free up to 6 tokens, then -(|y| - 6) / 4
    # lengths 5, 6 -> 0; 7 -> -0.25; 8 -> -0.5; 9 -> -0.75; 10 -> -1
    lengths = torch.tensor([5, 6, 7, 8, 9, 10])
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0])
    torch.testing.assert_close(
        overlong_penalty(lengths, max_length=10, buffer=4), expected, rtol=0, atol=1e-7
    )
    # the penalty factor scales it (verl's overlong_penalty_factor): -0.5 at the limit
    torch.testing.assert_close(
        overlong_penalty(lengths, max_length=10, buffer=4, penalty=0.5),
        expected / 2,
        rtol=0,
        atol=1e-7,
    )


def test_overlong_penalty_off_and_at_the_bounds():
    lengths = torch.tensor([1, 10, 12])
    assert torch.equal(overlong_penalty(lengths, max_length=10, buffer=0), torch.zeros(3))
    # buffer = L_max: the penalty starts at the first token; past L_max it stays at -1 (DAPO's R = -1)
    torch.testing.assert_close(
        overlong_penalty(lengths, max_length=10, buffer=10),
        torch.tensor([-0.1, -1.0, -1.0]),
        rtol=0,
        atol=1e-7,
    )


@pytest.mark.parametrize("length", range(21))
def test_overlong_penalty_matches_the_dapo_formula(length):
    # Eq. 13 with L_max 20, L_cache 8, one length at a time
    l_max, l_cache = 20, 8
    if length <= l_max - l_cache:
        expected = 0.0
    elif length <= l_max:
        expected = ((l_max - l_cache) - length) / l_cache
    else:
        expected = -1.0
    got = overlong_penalty(torch.tensor([length]), max_length=l_max, buffer=l_cache)
    assert got.item() == pytest.approx(expected, abs=1e-7)
