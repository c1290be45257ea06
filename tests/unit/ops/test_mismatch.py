"""Train–inference mismatch: |Δ log-prob| statistics and truncated importance-sampling weights."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.ops.mismatch import is_weight_stats, logp_abs_diff, truncated_is_weights

LN = math.log
# two sequences x 3 tokens; the last token of row 1 is padding
MASK = torch.tensor([[True, True, True], [True, True, False]])
TRAINER = torch.tensor([[LN(0.5), LN(0.4), LN(0.9)], [LN(0.2), LN(0.6), 0.0]])
ENGINE = torch.tensor([[LN(0.5), LN(0.1), LN(0.3)], [LN(0.4), LN(0.6), -7.0]])


def test_abs_diff_mean_and_max_by_hand():
    # |Δ| on response tokens: row 0: 0, ln 4 = 1.386294, ln 3 = 1.098612; row 1: ln 2 = 0.693147, 0
    # (padding |0 - (-7)| = 7 must not count). mean = (ln 4 + ln 3 + ln 2) / 5 = ln 24 / 5
    mean, largest = logp_abs_diff(ENGINE, TRAINER, MASK)
    torch.testing.assert_close(mean, torch.tensor(LN(24) / 5), rtol=0, atol=1e-6)
    torch.testing.assert_close(largest, torch.tensor(LN(4)), rtol=0, atol=1e-6)


def test_abs_diff_of_an_empty_mask_is_zero():
    mean, largest = logp_abs_diff(ENGINE, TRAINER, torch.zeros(2, 3, dtype=torch.bool))
    assert mean.item() == 0.0 and largest.item() == 0.0


def test_token_level_weights_by_hand():
    # ratio π_old/μ per token: row 0: 0.5/0.5 = 1, 0.4/0.1 = 4 -> cap 2, 0.9/0.3 = 3 -> cap 2
    #                          row 1: 0.2/0.4 = 0.5 (kept: TIS only truncates above), 0.6/0.6 = 1, pad -> 1
    weights = truncated_is_weights(TRAINER, ENGINE, MASK, level="token", cap=2.0)
    expected = torch.tensor([[1.0, 2.0, 2.0], [0.5, 1.0, 1.0]])
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-6)


def test_sequence_level_weights_by_hand():
    # row 0: product 1 * 4 * 3 = 12 -> cap 5 -> 5 on every token
    # row 1: product 0.5 * 1 = 0.5 on its response tokens; padding stays 1
    weights = truncated_is_weights(TRAINER, ENGINE, MASK, level="sequence", cap=5.0)
    expected = torch.tensor([[5.0, 5.0, 5.0], [0.5, 0.5, 1.0]])
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-5)


def test_sequence_level_product_does_not_overflow():
    # 200 tokens each with ratio e^1: the product e^200 overflows float32 (max ~ e^88.7); in log
    # space it is min(200, ln 2) -> exactly the cap
    trainer = torch.zeros(1, 200)
    engine = torch.full((1, 200), -1.0)
    weights = truncated_is_weights(
        trainer, engine, torch.ones(1, 200, dtype=torch.bool), level="sequence", cap=2.0
    )
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights, torch.full((1, 200), 2.0), rtol=0, atol=1e-6)


@pytest.mark.parametrize("level", ["none", "token", "sequence"])
def test_identical_logprobs_give_weights_of_exactly_one(level):
    # log-ratio 0 -> exp(0) = 1.0 exactly, on every token and on padding
    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 7, generator=generator) * 3
    mask = torch.rand(4, 7, generator=generator) > 0.3
    weights = truncated_is_weights(logp, logp.clone(), mask, level=level, cap=2.0)
    assert torch.equal(weights, torch.ones(4, 7))


def test_weights_are_detached():
    trainer = TRAINER.clone().requires_grad_(True)
    weights = truncated_is_weights(trainer, ENGINE, MASK, level="token", cap=2.0)
    assert not weights.requires_grad


def test_none_is_all_ones_even_with_a_mismatch():
    assert torch.equal(
        truncated_is_weights(TRAINER, ENGINE, MASK, level="none", cap=2.0), torch.ones(2, 3)
    )


def test_bad_level_and_cap_fail_with_the_allowed_values():
    with pytest.raises(
        ValueError, match=r"'tokens' is unknown; choose one of \['none', 'token', 'sequence'\]"
    ):
        truncated_is_weights(TRAINER, ENGINE, MASK, level="tokens", cap=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"allowed: \[1, inf\)"):
        truncated_is_weights(TRAINER, ENGINE, MASK, level="token", cap=0.5)


def test_weight_stats_by_hand():
    # token-level weights [[1, 2, 2], [0.5, 1, pad]] at cap 2: mean over the 5 response tokens
    # = (1 + 2 + 2 + 0.5 + 1) / 5 = 1.3; capped: 2 of 5 = 0.4
    weights = truncated_is_weights(TRAINER, ENGINE, MASK, level="token", cap=2.0)
    mean, capped = is_weight_stats(weights, MASK, cap=2.0)
    torch.testing.assert_close(mean, torch.tensor(1.3), rtol=0, atol=1e-6)
    torch.testing.assert_close(capped, torch.tensor(0.4), rtol=0, atol=1e-6)
