"""Clipped surrogate per token with asymmetric clipping (clip_low 0.2, clip_high 0.28)."""

from __future__ import annotations

import math

import pytest
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


def test_dual_clip_by_hand():
    # clip 0.2/0.2 (ratio range [0.8, 1.2]), dual clip c = 3; old_logp = 0 so r = exp(logp)
    # row 0, A = +2 (the dual clip never touches A >= 0):
    #   r 4.0: max(-8, -2.4) = -2.4    clipped high        grad 0
    #   r 1.0: -2                      inside              d/dlogp = -A r = -2
    #   r 0.5: max(-1, -1.6) = -1      unclipped           d/dlogp = -1
    # row 1, A = -2, cap -A c = 6:
    #   r 4.0: max(8, 2.4) = 8 -> min(6, 8) = 6   dual-clipped   grad 0
    #   r 2.0: max(4, 2.4) = 4 -> min(6, 4) = 4   unclipped      d/dlogp = -A r = +4
    #   r 0.5: max(1, 1.6) = 1.6 -> 1.6           clipped low    grad 0
    logp = torch.tensor(
        [[math.log(4.0), 0.0, math.log(0.5)], [math.log(4.0), math.log(2.0), math.log(0.5)]],
        requires_grad=True,
    )
    advantages = torch.tensor([[2.0], [-2.0]])
    terms = clipped_surrogate(
        logp, torch.zeros(2, 3), advantages, clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0
    )
    torch.testing.assert_close(
        terms.per_token_loss, torch.tensor([[-2.4, -2.0, -1.0], [6.0, 4.0, 1.6]]), rtol=0, atol=1e-6
    )
    assert terms.dual_clipped_mask.tolist() == [[False, False, False], [True, False, False]]
    assert terms.clipped_mask.tolist() == [
        [True, False, False],
        [False, False, True],
    ]  # the ordinary clip, as before
    (grad,) = torch.autograd.grad(terms.per_token_loss.sum(), logp)
    torch.testing.assert_close(
        grad, torch.tensor([[0.0, -2.0, -1.0], [0.0, 4.0, 0.0]]), rtol=0, atol=1e-6
    )
    # off (None): the (1, 0) token is back to 8 and nothing is dual-clipped
    off = clipped_surrogate(logp, torch.zeros(2, 3), advantages, clip_low=0.2, clip_high=0.2)
    assert off.per_token_loss[1, 0].item() == pytest.approx(8.0, abs=1e-6)
    assert not off.dual_clipped_mask.any()


def _verl_policy_loss(logp, old_logp, advantages, clip_low, clip_high, clip_ratio_c):
    # verl core_algos.compute_policy_loss (vanilla), per token, written out one token at a time
    out = torch.empty_like(logp)
    lower = torch.zeros_like(logp, dtype=torch.bool)
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            a = float(advantages[i, j])
            r = math.exp(max(-20.0, min(20.0, float(logp[i, j] - old_logp[i, j]))))
            loss1, loss2 = -a * r, -a * min(max(r, 1 - clip_low), 1 + clip_high)
            clip1 = max(loss1, loss2)
            loss3 = -a * clip_ratio_c
            lower[i, j] = clip1 > loss3 and a < 0
            out[i, j] = min(loss3, clip1) if a < 0 else clip1
    return out, lower


def test_dual_clip_matches_a_plain_loop_of_verls_formula():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(16, 12, generator=g) * 1.5  # ratios from e^-4 to e^4: many tokens past c = 3
    old_logp = torch.zeros(16, 12)
    advantages = torch.randn(16, 12, generator=g)
    terms = clipped_surrogate(
        logp, old_logp, advantages, clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0
    )
    expected, lower = _verl_policy_loss(logp, old_logp, advantages, 0.2, 0.28, 3.0)
    torch.testing.assert_close(terms.per_token_loss, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(terms.dual_clipped_mask, lower)
    assert 10 < int(lower.sum()) < 100  # the cap bites on a real share of the tokens


def test_dual_clip_off_is_bit_identical():
    g = torch.Generator().manual_seed(1)
    logp, adv = torch.randn(8, 5, generator=g), torch.randn(8, 5, generator=g)
    base = clipped_surrogate(logp, torch.zeros(8, 5), adv, clip_low=0.2, clip_high=0.28)
    none = clipped_surrogate(
        logp, torch.zeros(8, 5), adv, clip_low=0.2, clip_high=0.28, clip_ratio_c=None
    )
    assert torch.equal(base.per_token_loss, none.per_token_loss)
