"""cpu/linears.py: a policy's plain linear layers follow train.cpu_matmul, with the same
parameters, state-dict keys and outputs (to float rounding)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from quadrants.cpu import matmul
from quadrants.cpu.linears import PLAIN_LINEARS, RoutedLinear, route_linears
from quadrants.cpu.matmul import onednn_available, set_cpu_matmul
from quadrants.models.tiny import random_tiny_policy


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.setattr(matmul, "_chosen", "torch")
    return set_cpu_matmul


def test_routes_every_plain_linear_and_keeps_the_state_dict():
    """The tiny Qwen2 has 7 projections in each of its 2 layers plus the LM head: 15 routed;
    the state dict (names, values) is unchanged, and a second call finds nothing left to route."""
    model, _ = random_tiny_policy(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    layers = len(model.model.layers)
    assert route_linears(model) == 7 * layers + 1
    assert all(type(m) is not nn.Linear for m in model.modules())
    assert isinstance(model.lm_head, nn.Linear) and type(model.lm_head) is RoutedLinear
    assert RoutedLinear in PLAIN_LINEARS
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert route_linears(model) == 0


@pytest.mark.parametrize("name", ["torch", "onednn"])
def test_forward_and_gradients_match_the_plain_model(backend, name):
    """A routed model's logits and parameter gradients equal the plain model's: bit for bit with
    train.cpu_matmul=torch, within float32 rounding (1e-4 absolute on logits of order 1, 1e-5
    relative on gradients) with onednn."""
    if name == "onednn" and not onednn_available():
        pytest.skip("this torch has no oneDNN")
    backend(name)
    plain, _ = random_tiny_policy(0)
    routed, _ = random_tiny_policy(0)
    route_linears(routed)
    ids = torch.randint(
        0, plain.config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(0)
    )
    outs = []
    for model in (plain, routed):
        logits = model(input_ids=ids).logits
        logits.float().pow(2).mean().backward()
        outs.append((logits, {n: p.grad for n, p in model.named_parameters()}))
    (plain_logits, plain_grads), (routed_logits, routed_grads) = outs
    if name == "torch":
        assert torch.equal(routed_logits, plain_logits)
        assert all(torch.equal(routed_grads[n], plain_grads[n]) for n in plain_grads)
    else:
        torch.testing.assert_close(routed_logits, plain_logits, rtol=0, atol=1e-4)
        for n in plain_grads:
            scale = plain_grads[n].abs().max().item()
            torch.testing.assert_close(
                routed_grads[n], plain_grads[n], rtol=0, atol=1e-5 * max(scale, 1e-3)
            )
