"""The trainer's AdamW runs torch's fused kernel where it applies (quadrants/run/build.py)."""

import pytest
import torch
from torch import nn

from quadrants.models.tiny import random_tiny_policy
from quadrants.run.build import fused_optimizer_applies


def test_fused_applies_to_plain_parameters_on_the_cpu_only():
    model, _ = random_tiny_policy(0)
    assert fused_optimizer_applies(model)
    assert not fused_optimizer_applies(nn.Linear(2, 2, device="meta"))
    assert not fused_optimizer_applies(nn.ReLU())  # no parameter at all


def test_one_fused_step_by_hand():
    """p = 1, g = 0.5, lr 0.1, betas (0.9, 0.999), weight decay 0.01, eps 1e-8. Decoupled decay:
    p = 1 − 0.1 × 0.01 = 0.999; m = 0.05, v = 0.00025, bias-corrected m̂ = 0.5, v̂ = 0.25, so
    the step is 0.1 × 0.5 / (0.5 + 1e-8) = 0.1 (to 2e-8) and p = 0.899."""
    p = nn.Parameter(torch.tensor([1.0]))
    optimizer = torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.999), weight_decay=0.01, fused=True)
    p.grad = torch.tensor([0.5])
    optimizer.step()
    assert p.item() == pytest.approx(0.899, abs=1e-6)


def test_fused_steps_equal_the_default_loop():
    """Five steps on the tiny model with the same gradients: every parameter within 1e-6 of the
    for-loop implementation (the same arithmetic, rounded in another order)."""
    torch.manual_seed(0)
    plain, _ = random_tiny_policy(0)
    fused, _ = random_tiny_policy(0)
    settings = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    optimizers = [
        torch.optim.AdamW(plain.parameters(), **settings),
        torch.optim.AdamW(fused.parameters(), fused=True, **settings),
    ]
    for _ in range(5):
        for a, b in zip(plain.parameters(), fused.parameters()):
            a.grad = torch.randn_like(a)
            b.grad = a.grad.clone()
        for optimizer in optimizers:
            optimizer.step()
    for a, b in zip(plain.parameters(), fused.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
