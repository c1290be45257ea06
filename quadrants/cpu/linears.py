"""A model's plain `nn.Linear` layers compute through `quadrants.cpu.matmul.linear`, so that a
policy's forwards (the update's, the no-grad passes', HF `generate`'s) use the CPU matmul backend
that `train.cpu.matmul` chose: oneDNN on processors where torch's MKL default is slow.

`route_linears` swaps each plain `nn.Linear`'s class for `RoutedLinear`, a subclass whose forward
is `linear(input, weight, bias)`: the same parameters, state-dict keys and `isinstance`, and where
the backend is `torch` (or the input is not float32 on the CPU) exactly `F.linear`.
"""

from __future__ import annotations

from torch import Tensor, nn

from quadrants.cpu.matmul import linear


class RoutedLinear(nn.Linear):
    """`nn.Linear` through `quadrants.cpu.matmul.linear`."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 (nn.Linear's own name)
        return linear(input, self.weight, self.bias)


PLAIN_LINEARS = (nn.Linear, RoutedLinear)  # the exact types a plain linear layer may have


def route_linears(model: nn.Module) -> int:
    """Make every plain `nn.Linear` in `model` a `RoutedLinear` (in place); returns how many."""
    routed = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = RoutedLinear
            routed += 1
    return routed
