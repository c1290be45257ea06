"""A linear map whose forward output is given (already computed elsewhere) and whose backward is the
linear map's own.

`replayed_linear(x, W, b, y)` returns `y` in the forward, without multiplying, and back-propagates
as `F.linear(x, W, b)` would: the input gradient g·W, the weight gradient gᵀx and the bias gradient
Σg, all from the incoming gradient g and the input x given here. It is exact when `y` is
`F.linear(x, W, b)` up to float rounding, which is what its one caller guarantees (the update's
forward over outputs the decode computed with the same weights, quadrants/models/replay.py).

Shape legend: **N...** any leading dimensions · **I** input features · **O** output features.
"""

from __future__ import annotations

import torch
from torch import Tensor

from quadrants.ops.matmul import linear_grads


class _ReplayedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, output: Tensor) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return output.view_as(output)  # a new tensor object over the given values

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        # g·W [N..., I], gᵀx [O, I], Σg [O]; through oneDNN where train.cpu_matmul says
        grads = linear_grads(
            grad,
            x,
            weight,
            input_grad=wanted[0],
            weight_grad=wanted[1],
            bias_grad=ctx.has_bias and wanted[2],
        )
        return *grads, None


def replayed_linear(x: Tensor, weight: Tensor, bias: Tensor | None, output: Tensor) -> Tensor:
    """`output` [N..., O] in the forward; the gradients of `F.linear(x, weight, bias)` in the
    backward. x [N..., I], weight [O, I], bias [O] or None. `output` is not differentiated."""
    if output.shape[:-1] != x.shape[:-1] or output.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"a replayed output of shape {tuple(output.shape)} does not fit input "
            f"{tuple(x.shape)} and weight {tuple(weight.shape)}"
        )
    return _ReplayedLinear.apply(x, weight, bias, output.detach())
