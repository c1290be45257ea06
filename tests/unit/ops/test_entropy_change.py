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
