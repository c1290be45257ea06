"""Cui et al.'s covariance term split over token sets, its signed shares and the measured entropy
change, by hand (ops/entropy_change.py)."""

from __future__ import annotations

import pytest
import torch

from quadrants.ops.entropy_change import (
    covariance_by_set,
    entropy_change,
    signed_shares,
    state_covariance_by_set,
    state_term,
    token_correlation,
)

# B = 2 sequences x T = 3 tokens; the second row is 2 tokens long, (1, 2) is padding (N = 5)
MASK = torch.tensor([[True, True, True], [True, True, False]])
ADV = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
LOGP = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -4.0, -50.0]])  # -50 on padding: must not count


def sets() -> list[torch.Tensor]:
    s = [torch.zeros(2, 3, dtype=torch.bool) for _ in range(4)]
    s[0][0, 0] = s[0][0, 1] = True  # {(0,0), (0,1)}
    s[1][0, 2] = True  # {(0,2)}
    s[2][1, 0] = True  # {(1,0)}
    s[3][1, 1] = s[3][1, 2] = True  # {(1,1)} and the padding token, which is ignored
    return s


def test_covariance_by_set_by_hand():
    # mean A over the 5 response tokens = (3 - 2) / 5 = 0.2; mean logp = -11 / 5 = -2.2
    # cov_t = (A - 0.2)(logp + 2.2):
    #   (0,0) 0.8 * 1.2 = 0.96   (0,1) 0.8 * 0.2 = 0.16   (0,2) 0.8 * -0.8 = -0.64
    #   (1,0) -1.2 * 1.2 = -1.44 (1,1) -1.2 * -1.8 = 2.16
    # Σ = 1.2 (= Σ A logp - N mean A mean logp = -1 + 2.2); per set / N = 5:
    #   (0.96 + 0.16) / 5 = 0.224, -0.64 / 5 = -0.128, -1.44 / 5 = -0.288, 2.16 / 5 = 0.432
    parts = covariance_by_set(ADV, LOGP, MASK, sets())
    assert parts.tolist() == pytest.approx([0.224, -0.128, -0.288, 0.432], abs=1e-6)
    # the sets cover every response token: the parts sum to the batch covariance 1.2 / 5
    assert parts.sum().item() == pytest.approx(0.24, abs=1e-6)


def test_covariance_takes_the_applied_advantage():
    # only row 0 trained: A = [1, 1, 1 | 0, 0]; mean A = 3 / 5 = 0.6, mean logp -2.2
    # (0,0) 0.4 * 1.2 = 0.48  (0,1) 0.4 * 0.2 = 0.08  (0,2) 0.4 * -0.8 = -0.32
    # (1,0) -0.6 * 1.2 = -0.72  (1,1) -0.6 * -1.8 = 1.08;  / 5 per set
    trained = torch.tensor([[True] * 3, [False] * 3])
    parts = covariance_by_set(ADV * trained, LOGP, MASK, sets())
    assert parts.tolist() == pytest.approx([0.112, -0.064, -0.144, 0.216], abs=1e-6)


def test_signed_shares_by_hand():
    # Σ |parts| = 0.224 + 0.128 + 0.288 + 0.432 = 1.072
    shares = signed_shares(torch.tensor([0.224, -0.128, -0.288, 0.432]))
    assert shares.tolist() == pytest.approx(
        [0.224 / 1.072, -0.128 / 1.072, -0.288 / 1.072, 0.432 / 1.072], abs=1e-6
    )  # 0.20896, -0.11940, -0.26866, 0.40299
    # one sign: the plain share, summing to 1; all zero: zeros, not NaN
    assert signed_shares(torch.tensor([1.0, 3.0, 0.0, 0.0])).tolist() == [0.25, 0.75, 0.0, 0.0]
    assert signed_shares(torch.zeros(4)).tolist() == [0.0] * 4


def test_no_response_tokens_give_zeros():
    none = torch.zeros(2, 3, dtype=torch.bool)
    assert covariance_by_set(ADV, LOGP, none, sets()).tolist() == [0.0] * 4


def test_entropy_change_on_the_mask():
    after = torch.tensor([[1.0, 2.0, 9.0]])
    before = torch.tensor([[1.5, 1.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    # 1 - 1.5 = -0.5, 2 - 1 = 1, padding 0
    assert entropy_change(after, before, mask).tolist() == [[-0.5, 1.0, 0.0]]


def test_state_covariance_by_hand():
    # entropy H = [[0.5, 1.0, 2.0], [1.0, 3.0, 9.0]] (9 on padding: ignored)
    # (logp + H) A: (0,0) (-1 + 0.5) * 1 = -0.5   (0,1) (-2 + 1) * 1 = -1   (0,2) (-3 + 2) * 1 = -1
    #               (1,0) (-1 + 1) * -1 = 0       (1,1) (-4 + 3) * -1 = 1
    # per set / N = 5: (-0.5 - 1) / 5 = -0.3, -1 / 5 = -0.2, 0, 1 / 5 = 0.2
    entropy = torch.tensor([[0.5, 1.0, 2.0], [1.0, 3.0, 9.0]])
    parts = state_covariance_by_set(ADV, LOGP, entropy, MASK, sets())
    assert parts.tolist() == pytest.approx([-0.3, -0.2, 0.0, 0.2], abs=1e-6)


def test_covariance_is_centred_over_the_denominator_only():
    # population = every response token but (1,1) (a token out of the loss's denominator):
    # N = 4, mean A = (1 + 1 + 1 - 1) / 4 = 0.5, mean logp = (-1 - 2 - 3 - 1) / 4 = -1.75
    # cov_t = (A - 0.5)(logp + 1.75): (0,0) 0.5 * 0.75 = 0.375, (0,1) 0.5 * -0.25 = -0.125,
    #   (0,2) 0.5 * -1.25 = -0.625, (1,0) -1.5 * 0.75 = -1.125; (1,1) not counted
    # per set / 4: (0.375 - 0.125) / 4 = 0.0625, -0.15625, -0.28125, 0
    # check: mean(A logp) - mean A mean logp = (-1 - 2 - 3 + 1) / 4 + 0.875 = -0.375 = Σ parts
    population = MASK.clone()
    population[1, 1] = False
    parts = covariance_by_set(ADV, LOGP, population, sets())
    assert parts.tolist() == pytest.approx([0.0625, -0.15625, -0.28125, 0.0], abs=1e-6)
    assert parts.sum().item() == pytest.approx(-0.375, abs=1e-6)


def test_token_correlation_by_hand():
    # x = [0, 0.2, -3, -2] (mean -1.2, dx = [1.2, 1.4, -1.8, -0.8], Σ dx² = 7.28)
    # y = [-0.5, 0.25, 0, 0.5] (mean 0.0625, dy = [-0.5625, 0.1875, -0.0625, 0.4375],
    # Σ dy² = 0.546875); Σ dx dy = -0.675 + 0.2625 + 0.1125 - 0.35 = -0.65
    # r = -0.65 / sqrt(7.28 · 0.546875) = -0.65 / 1.995307 = -0.325764
    x = torch.tensor([[0.0, 0.2], [-3.0, -2.0]])
    y = torch.tensor([[-0.5, 0.25], [0.0, 0.5]])
    everything = torch.ones(2, 2, dtype=torch.bool)
    assert token_correlation(x, y, everything).item() == pytest.approx(-0.325764, abs=1e-5)
    two = torch.tensor([[True, True], [False, False]])
    assert torch.isnan(token_correlation(x, y, two))  # fewer than 3 tokens


def test_state_term_by_hand():
    # -(logp + H) w: -(-1 + 1) 0.1 = 0, -(-2 + 0) 0.1 = 0.2, -(-3 + 0)(-1) = -3, -(-2 + 0)(-1) = -2
    w = torch.tensor([[0.1, 0.1], [-1.0, -1.0]])
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -2.0]])
    entropy = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    term = state_term(w, logp, entropy).flatten().tolist()
    assert term == pytest.approx([0.0, 0.2, -3.0, -2.0])
