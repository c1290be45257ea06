"""Clipped surrogate per token with asymmetric clipping (clip_low 0.2, clip_high 0.28)."""

from __future__ import annotations

import math

import torch

from quadrants.ops.surrogate import clipped_surrogate, importance_ratio

CLIP_LOW, CLIP_HIGH = 0.2, 0.28  # ratio range [0.8, 1.28]
RATIOS = [0.5, 1.1, 1.5]  # below, inside, above the clip range


def _logp(ratios: list[float]) -> torch.Tensor:
    # old_logp = 0, so r = exp(logp) = the ratio we want
    return torch.tensor([[math.log(r) for r in ratios]] * 2, requires_grad=True)


def test_clipped_surrogate_by_hand():
    # loss = max(-A r, -A clip(r, 0.8, 1.28))
    # row 0, A = +2:
    #   r 0.5: max(-1.0, -1.6) = -1.0    unclipped (A > 0 never clips below)
    #   r 1.1: max(-2.2, -2.2) = -2.2    inside
    #   r 1.5: max(-3.0, -2.56) = -2.56  clipped high
    # row 1, A = -1:
    #   r 0.5: max(0.5, 0.8) = 0.8       clipped low
    #   r 1.1: max(1.1, 1.1) = 1.1       inside
    #   r 1.5: max(1.5, 1.28) = 1.5      unclipped (A < 0 never clips above)
    logp = _logp(RATIOS)
    advantages = torch.tensor([[2.0], [-1.0]])  # [B, 1] broadcasts over tokens
    terms = clipped_surrogate(
        logp, torch.zeros(2, 3), advantages, clip_low=CLIP_LOW, clip_high=CLIP_HIGH
    )
    expected = torch.tensor([[-1.0, -2.2, -2.56], [0.8, 1.1, 1.5]])
    torch.testing.assert_close(terms.per_token_loss, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(terms.ratio, torch.tensor([RATIOS, RATIOS]), rtol=0, atol=1e-6)
    assert terms.clipped_mask.tolist() == [[False, False, True], [True, False, False]]
    assert terms.clipped_high_mask.tolist() == [[False, False, True], [False, False, False]]
    assert terms.clipped_low_mask.tolist() == [[False, False, False], [True, False, False]]


def test_gradient_is_zero_on_clipped_tokens_only():
    # d loss / d logp on the unclipped branch = -A r (since dr/dlogp = r):
    #   A = +2: [-1.0, -2.2, clipped -> 0]
    #   A = -1: [clipped -> 0, 1.1, 1.5]
    logp = _logp(RATIOS)
    advantages = torch.tensor([[2.0], [-1.0]])
    terms = clipped_surrogate(
        logp, torch.zeros(2, 3), advantages, clip_low=CLIP_LOW, clip_high=CLIP_HIGH
    )
    terms.per_token_loss.sum().backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([[-1.0, -2.2, 0.0], [0.0, 1.1, 1.5]]), rtol=0, atol=1e-6
    )
    assert torch.equal(logp.grad[terms.clipped_mask], torch.zeros(2))
    assert (logp.grad[~terms.clipped_mask] != 0).all()


def test_per_token_advantages_and_zero_advantage():
    # [B, T] advantages: token-level A = [+1, 0, -3] at ratio 1.1 (inside the range)
    #   -> loss [-1.1, 0, 3.3], gradient [-1.1, 0, 3.3], nothing clipped
    logp = torch.full((1, 3), math.log(1.1), requires_grad=True)
    advantages = torch.tensor([[1.0, 0.0, -3.0]])
    terms = clipped_surrogate(
        logp, torch.zeros(1, 3), advantages, clip_low=CLIP_LOW, clip_high=CLIP_HIGH
    )
    torch.testing.assert_close(
        terms.per_token_loss, torch.tensor([[-1.1, 0.0, 3.3]]), rtol=0, atol=1e-6
    )
    assert not terms.clipped_mask.any()
    terms.per_token_loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.1, 0.0, 3.3]]), rtol=0, atol=1e-6)


def test_zero_advantage_gets_no_gradient_even_outside_the_range():
    # A = 0: both branches are 0 whatever the ratio -> loss 0, gradient 0
    logp = _logp(RATIOS)
    terms = clipped_surrogate(
        logp, torch.zeros(2, 3), torch.zeros(2, 1), clip_low=CLIP_LOW, clip_high=CLIP_HIGH
    )
    terms.per_token_loss.sum().backward()
    assert torch.equal(terms.per_token_loss.detach(), torch.zeros(2, 3))
    assert torch.equal(logp.grad, torch.zeros(2, 3))
    assert not terms.clipped_mask.any()


def test_old_logp_enters_through_the_ratio():
    # logp = old_logp = -2.3 -> r = 1 -> loss -A = -0.5; logp - old = ln 1.5 -> r = 1.5, A > 0 -> -0.5 * 1.28
    logp = torch.tensor([[-2.3, -2.3 + math.log(1.5)]])
    old_logp = torch.tensor([[-2.3, -2.3]])
    terms = clipped_surrogate(
        logp, old_logp, torch.tensor([[0.5]]), clip_low=CLIP_LOW, clip_high=CLIP_HIGH
    )
    torch.testing.assert_close(
        terms.per_token_loss, torch.tensor([[-0.5, -0.64]]), rtol=0, atol=1e-6
    )


def test_importance_ratio_clamps_the_log_ratio_at_20():
    # log-ratios [0, ln 2, 30, -30] -> [1, 2, e^20, e^-20]; relative tolerance since e^20 = 4.85e8
    ratio = importance_ratio(torch.tensor([0.0, math.log(2), 30.0, -30.0]), torch.zeros(4))
    torch.testing.assert_close(
        ratio, torch.tensor([1.0, 2.0, math.exp(20), math.exp(-20)]), rtol=1e-6, atol=1e-12
    )
