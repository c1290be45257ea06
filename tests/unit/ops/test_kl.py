"""The per-token KL estimators (ops/kl.py) by hand, and k3's bounds as verl's low_var_kl."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.ops.kl import K3_MAX, kl_penalty


def test_estimators_by_hand():
    # logp = [-1, -2], ref = [-2, -1.5] -> δ = ref - logp = [-1, 0.5]
    # k1 = -δ = [1, -0.5]; k2 = δ²/2 = [0.5, 0.125]; k3 = e^δ - 1 - δ = [e^-1, e^0.5 - 1.5]
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -1.5])
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), torch.tensor([1.0, -0.5]))
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), torch.tensor([0.5, 0.125]))
    torch.testing.assert_close(
        kl_penalty(logp, ref, "k3"), torch.tensor([math.exp(-1), math.exp(0.5) - 1.5])
    )


def test_k3_is_clamped_at_ten_with_no_gradient_beyond():
    # δ = 6: e^6 - 1 - 6 = 396.43 unclamped -> 10, gradient 0 (verl: clamp(kld, -10, 10));
    # δ = 2: e^2 - 3 = 4.389056 < 10, unchanged, d/d logp = 1 - e^2 = -6.389056;
    # δ = -30: δ clamped to -20 -> e^-20 - 1 + 20 = 19.0 -> 10, gradient 0
    logp = torch.tensor([-6.0, -2.0, 30.0], requires_grad=True)
    kl = kl_penalty(logp, torch.zeros(3), "k3")
    torch.testing.assert_close(kl, torch.tensor([K3_MAX, math.exp(2) - 3, K3_MAX]))
    kl.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, 1 - math.exp(2), 0.0]))


def test_k3_is_never_negative_and_zero_only_at_equal_logps():
    delta = torch.arange(-250, 251) / 10.0  # -25 to 25 in steps of 0.1, exactly 0 at index 250
    kl = kl_penalty(torch.zeros(501), delta, "k3")
    assert kl.min() >= 0 and kl.max() == K3_MAX
    assert kl[250] == 0  # δ = 0


def test_unknown_estimator_is_refused():
    with pytest.raises(ValueError, match=r"kl estimator 'k4' is unknown; choose one of"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k4")
