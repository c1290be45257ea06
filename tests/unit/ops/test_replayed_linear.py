"""ops/replayed_linear.py: the given output in the forward, the linear map's gradients in the
backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from quadrants.ops.replayed_linear import replayed_linear


def test_by_hand():
    """x = [1, 2], W = [[1, 0], [0, 1], [1, 1]], b = [0, 0, 0]; the given output [7, 8, 9] is
    returned as it is (F.linear would give [1, 2, 3]). With the incoming gradient g = [1, 0, 2]:
    input gradient g·W = [1 + 2, 0 + 2] = [3, 2]; weight gradient gᵀx = [[1, 2], [0, 0], [2, 4]];
    bias gradient g = [1, 0, 2]."""
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    bias = torch.zeros(3, requires_grad=True)
    out = replayed_linear(x, weight, bias, torch.tensor([[7.0, 8.0, 9.0]]))
    assert out.tolist() == [[7.0, 8.0, 9.0]]
    out.backward(torch.tensor([[1.0, 0.0, 2.0]]))
    assert x.grad.tolist() == [[3.0, 2.0]]
    assert weight.grad.tolist() == [[1.0, 2.0], [0.0, 0.0], [2.0, 4.0]]
    assert bias.grad.tolist() == [1.0, 0.0, 2.0]


@pytest.mark.parametrize("with_bias", [True, False])
def test_gradients_equal_f_linear(with_bias):
    """Given F.linear's own output, every gradient equals F.linear's, over [2, 3, I] inputs and a
    loss that goes on through a nonlinearity (1e-6 relative)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, generator=generator, requires_grad=True)
    weight = torch.randn(4, 5, generator=generator, requires_grad=True)
    bias = torch.randn(4, generator=generator, requires_grad=True) if with_bias else None
    leaves = [x, weight] + ([bias] if with_bias else [])
    plain = torch.autograd.grad(torch.tanh(F.linear(x, weight, bias)).pow(2).sum(), leaves)
    given = F.linear(x, weight, bias).detach()
    replayed = torch.autograd.grad(
        torch.tanh(replayed_linear(x, weight, bias, given)).pow(2).sum(), leaves
    )
    for a, b in zip(plain, replayed):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_the_output_is_not_recomputed_and_not_differentiated():
    """The forward is the given tensor (not x·Wᵀ), and no gradient reaches it."""
    x = torch.ones(1, 2, requires_grad=True)
    weight = torch.ones(1, 2, requires_grad=True)
    given = torch.tensor([[5.0]], requires_grad=True)
    out = replayed_linear(x, weight, None, given)
    assert out.item() == 5.0
    out.sum().backward()
    assert given.grad is None
    assert weight.grad.tolist() == [[1.0, 1.0]]


def test_a_misfitting_output_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        replayed_linear(torch.ones(2, 3), torch.ones(4, 3), None, torch.ones(3, 4))
