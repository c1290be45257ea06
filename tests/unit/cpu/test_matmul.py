"""cpu/matmul.py: float32 CPU linear maps through oneDNN, equal to F.linear up to float rounding,
forward and gradients; the backend choice; what falls back to F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from quadrants.cpu import matmul
from quadrants.cpu.matmul import (
    auto_backend,
    cpu_vendor,
    linear,
    linear_grads,
    onednn_available,
    routes,
    set_cpu_matmul,
)

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")


@pytest.fixture
def backend(monkeypatch):
    """Set the process's backend for one test; the choice before it comes back after."""
    monkeypatch.setattr(matmul, "_chosen", "torch")
    return set_cpu_matmul


@needs_onednn
def test_by_hand(backend):
    """x = [1, 2], W = [[1, 0], [0, 1], [1, 1]], b = [1, −1, 0.5]: x·Wᵀ + b = [1 + 1, 2 − 1,
    3 + 0.5] = [2, 1, 3.5]. With the incoming gradient g = [1, 0, 2]: input gradient
    g·W = [1 + 2, 0 + 2] = [3, 2]; weight gradient gᵀx = [[1, 2], [0, 0], [2, 4]]; bias gradient
    g = [1, 0, 2]. Small integers: exact in float32 whatever the summation order."""
    backend("onednn")
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    bias = torch.tensor([1.0, -1.0, 0.5], requires_grad=True)
    out = linear(x, weight, bias)
    assert routes(x, weight, bias)
    assert out.tolist() == [[2.0, 1.0, 3.5]]
    out.backward(torch.tensor([[1.0, 0.0, 2.0]]))
    assert x.grad.tolist() == [[3.0, 2.0]]
    assert weight.grad.tolist() == [[1.0, 2.0], [0.0, 0.0], [2.0, 4.0]]
    assert bias.grad.tolist() == [1.0, 0.0, 2.0]


def _float64_reference(x, weight, bias, grad):
    """F.linear's output and gradients computed in float64."""
    leaves = [t.detach().double().requires_grad_() for t in (x, weight)]
    b64 = None if bias is None else bias.detach().double().requires_grad_()
    out = F.linear(*leaves, b64)
    grads = torch.autograd.grad(out, leaves + ([b64] if bias is not None else []), grad.double())
    return out, grads


@needs_onednn
@pytest.mark.parametrize(
    "leading, out_features, in_features, with_bias",
    [
        ((7,), 5, 3, True),  # more outputs than inputs but few rows: gᵀx
        ((2, 9), 6, 11, False),  # fewer outputs: gᵀx
        ((4, 8), 16, 16, True),
        # the tiny workload's gate/up projection, 1,984 rows: the weight gradient as (xᵀg)ᵀ
        ((64, 31), 688, 256, False),
        ((64, 31), 256, 688, True),  # and its down projection: gᵀx
    ],
)
def test_equals_float64_reference(backend, leading, out_features, in_features, with_bias):
    """Output and every gradient within float32 rounding of F.linear in float64 (relative 1e-5 of
    the largest magnitude, absolute 1e-5), the same bound F.linear in float32 meets."""
    backend("onednn")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(*leading, in_features, generator=generator, requires_grad=True)
    weight = torch.randn(out_features, in_features, generator=generator, requires_grad=True)
    bias = torch.randn(out_features, generator=generator, requires_grad=True) if with_bias else None
    grad = torch.randn(*leading, out_features, generator=generator)
    out = linear(x, weight, bias)
    assert out.grad_fn is not None and "OneDNN" in type(out.grad_fn).__name__
    ours = [out, *torch.autograd.grad(out, [x, weight] + ([bias] if with_bias else []), grad)]
    ref_out, ref_grads = _float64_reference(x, weight, bias, grad)
    plain_out = F.linear(x, weight, bias)
    plain = [
        plain_out,
        *torch.autograd.grad(plain_out, [x, weight] + ([bias] if with_bias else []), grad),
    ]
    for got, reference, f32 in zip(ours, [ref_out, *ref_grads], plain):
        assert got.shape == reference.shape and got.dtype == torch.float32
        scale = reference.abs().max().item()
        torch.testing.assert_close(got.double(), reference, rtol=0, atol=1e-5 * max(scale, 1.0))
        torch.testing.assert_close(f32.double(), reference, rtol=0, atol=1e-5 * max(scale, 1.0))


@needs_onednn
def test_strided_operands(backend):
    """A transposed input and a non-contiguous incoming gradient give the contiguous operands'
    results (the same values up to rounding: 1e-5)."""
    backend("onednn")
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(24, 10, generator=generator).t()  # [10, 24], strides (1, 10)
    weight = torch.randn(30, 24, generator=generator)
    grad = torch.randn(10, 60, generator=generator)[:, ::2]  # [10, 30], strides (60, 2)
    assert not x.is_contiguous() and not grad.is_contiguous()
    torch.testing.assert_close(linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-5)
    grad_x, grad_w, grad_b = linear_grads(grad, x, weight, bias_grad=True)
    torch.testing.assert_close(grad_b, grad.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_x, grad @ weight, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_w, grad.t() @ x, rtol=1e-5, atol=1e-5)
    assert grad_w.is_contiguous()


@needs_onednn
def test_no_graph_without_grad(backend):
    """Under no_grad (and for inputs that need no gradient) the result carries no graph."""
    backend("onednn")
    weight = torch.randn(3, 4, requires_grad=True)
    with torch.no_grad():
        assert linear(torch.randn(2, 4), weight).grad_fn is None
    assert linear(torch.randn(2, 4), weight.detach()).grad_fn is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.randn(3, 4, dtype=torch.bfloat16), torch.randn(5, 4, dtype=torch.bfloat16)),
        lambda: (torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)),
        lambda: (torch.randn(0, 4), torch.randn(5, 4)),  # nothing to multiply
    ],
    ids=["bfloat16", "float64", "empty"],
)
def test_other_inputs_are_f_linear_bit_for_bit(backend, make):
    """Only float32 CPU inputs with rows are routed; anything else is F.linear itself."""
    if onednn_available():
        backend("onednn")
    x, weight = make()
    assert not routes(x, weight)
    assert torch.equal(linear(x, weight), F.linear(x, weight))


def test_torch_backend_is_f_linear_bit_for_bit(backend):
    """train.cpu_matmul=torch: the output and gradients are exactly F.linear's."""
    assert backend("torch") == "torch"
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(6, 32, generator=generator, requires_grad=True)
    weight = torch.randn(48, 32, generator=generator, requires_grad=True)
    grad = torch.randn(6, 48, generator=generator)
    assert not routes(x, weight)
    out = linear(x, weight)
    assert torch.equal(out, F.linear(x, weight))
    grad_x, grad_w, grad_b = linear_grads(grad, x, weight)
    assert grad_b is None
    assert torch.equal(grad_x, grad.matmul(weight))
    assert torch.equal(grad_w, grad.t().matmul(x))


@pytest.mark.parametrize(
    "vendor, machine, available, expected",
    [
        ("AuthenticAMD", "x86_64", True, "onednn"),
        ("HygonGenuine", "x86_64", True, "onednn"),
        ("GenuineIntel", "x86_64", True, "torch"),  # MKL's AVX-512 kernels run there
        ("AuthenticAMD", "x86_64", False, "torch"),  # no oneDNN in the build
        ("", "aarch64", True, "torch"),
        ("", "x86_64", True, "torch"),  # vendor unknown: torch's default
    ],
)
def test_auto_backend(vendor, machine, available, expected):
    assert auto_backend(vendor, machine, available) == expected


def test_cpu_vendor(tmp_path):
    """The first vendor_id line of a cpuinfo file; "" when the file is missing or has none."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n")
    assert cpu_vendor(info) == "AuthenticAMD"
    info.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")
    assert cpu_vendor(info) == ""
    assert cpu_vendor(tmp_path / "missing") == ""


def test_unknown_backend_names_the_key_and_the_choices(backend):
    with pytest.raises(ValueError, match=r"train\.cpu\.matmul.*'auto', 'torch', 'onednn'.*'mkl'"):
        backend("mkl")


def test_onednn_asked_for_without_it(backend, monkeypatch):
    """An explicit onednn where the build lacks it fails with what to use instead."""
    monkeypatch.setattr(matmul, "onednn_available", lambda: False)
    with pytest.raises(ValueError, match="train.cpu.matmul=torch or auto"):
        backend("onednn")
    assert backend("auto") == "torch"
