"""The trainer's numeric precision (`train.precision`): the dtype its parameters are stored in, the
dtype its forward computes in, and how that is arranged in one process and under FSDP2.

- `fp32`: parameters, gradients, AdamW's moments and the compute in float32.
- `bf16-mixed`: float32 parameters, gradients and AdamW moments (the "master weights"), compute in
  bfloat16; frozen linear weights (LoRA's base) stored in bf16 (below). One process:
  `torch.autocast(device, bfloat16)` around the forward, over the float32 parameters (CPU and
  CUDA both have it). Sharded: FSDP2's
  `MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`: the all-gathered parameters
  are cast to bf16 for the forward and backward, gradients are reduced in float32 and land on the
  float32 shards the optimizer steps (torch/distributed/fsdp/_fully_shard/_fsdp_api.py), with the
  same autocast around the forward, as verl's FSDP actor does (verl/workers/actor/dp_actor.py wraps
  its forward in `torch.autocast(dtype=torch.bfloat16)` over an FSDP module with
  `param_dtype=bf16, reduce_dtype=fp32`).
- `bf16`: pure bfloat16: parameters and AdamW's moments in bf16. An Adam step moves a weight by
  about lr (1e-6 in the paper), while bf16 spaces the numbers near a weight w by 2^(e-7) with
  2^e <= |w| < 2^(e+1): any |w| >= 2^-11 ~ 4.9e-4 has spacing >= 2^-18 ~ 3.8e-6, half of it
  (1.9e-6) above the update, which rounds away. the run plan refuses it unless
  `train.allow_pure_bf16=true`.
- `auto`: bf16-mixed on CUDA, fp32 elsewhere.

Frozen weights under `bf16-mixed` (`store_parameters`): a parameter that does not train (LoRA's
base) gets no optimizer update, so a float32 master copy of it buys nothing where its only reader is
a linear layer: autocast casts F.linear's floating inputs to bf16 (`linear` is in
aten/src/ATen/autocast_mode.h `AT_FORALL_LOWER_PRECISION_FP`), so the matmul sees bf16(W) whether
W is stored in float32 or in bf16, and `cached_cast` (autocast_mode.cpp) caches only the casts of
leaf tensors that require grad, so a float32 frozen W is cast again at every call. Such parameters
are stored in bf16: the same numbers, half the memory. A frozen parameter that anything else
reads (an embedding, whose lookup returns its weight's dtype and so sets the residual stream's; a
norm's weight; a tied embedding / LM head) keeps float32, so the forward is unchanged bit for bit.

torch only (no quadrants import), so a script with torch and transformers alone can use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

PRECISIONS = ("fp32", "bf16-mixed", "bf16", "auto")


@dataclass(frozen=True)
class Precision:
    """A resolved `train.precision` (never `auto`).

    Attributes:
        name: "fp32", "bf16-mixed" or "bf16".
        param_dtype: the dtype the trainer's parameters (and so its gradients and AdamW's moments)
            are stored in.
        compute_dtype: the dtype of the forward's matrix multiplies.
    """

    name: str
    param_dtype: torch.dtype
    compute_dtype: torch.dtype

    @property
    def mixed(self) -> bool:
        """True when the forward computes in another dtype than the parameters are stored in."""
        return self.param_dtype != self.compute_dtype

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The context a forward runs in: `torch.autocast(device.type, compute_dtype)` when mixed,
        else a no-op (fp32 and pure bf16 compute in the parameters' own dtype)."""
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.compute_dtype)

    def fsdp_policy(self) -> MixedPrecisionPolicy | None:
        """FSDP2's policy for a sharded run: bf16 compute with float32 gradient reduction when
        mixed; None (FSDP2's default: the parameters' own dtype throughout) otherwise."""
        if not self.mixed:
            return None
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=self.compute_dtype, reduce_dtype=torch.float32)


FP32 = Precision("fp32", torch.float32, torch.float32)

_RESOLVED = {
    "fp32": FP32,
    "bf16-mixed": Precision("bf16-mixed", torch.float32, torch.bfloat16),
    "bf16": Precision("bf16", torch.bfloat16, torch.bfloat16),
}


def resolve_precision(name: str, device: torch.device) -> Precision:
    """`train.precision` on `device`: `auto` is bf16-mixed on CUDA and fp32 elsewhere."""
    if name not in PRECISIONS:
        raise ValueError(f"train.precision={name!r} is unknown; choose one of {list(PRECISIONS)}")
    if name == "auto":
        name = "bf16-mixed" if device.type == "cuda" else "fp32"
    return _RESOLVED[name]


def frozen_linear_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of `model` that do not require grad and that only `nn.Linear` modules read
    (peft's `lora.Linear` wraps an `nn.Linear` as its `base_layer`; the CPU's `RoutedLinear` is
    one): a weight shared with any other module (a tied embedding) is left out."""
    linear: dict[int, nn.Parameter] = {}
    other: set[int] = set()
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if isinstance(module, nn.Linear):
                linear[id(p)] = p
            else:
                other.add(id(p))
    return [p for key, p in linear.items() if not p.requires_grad and key not in other]


@torch.no_grad()
def store_parameters(
    model: nn.Module, precision: Precision, device: torch.device | None = None
) -> nn.Module:
    """`model`'s parameters (and floating buffers) on `device` (default: where they are) in
    `precision.param_dtype`, and, when the precision is mixed, its frozen linear weights
    (`frozen_linear_parameters`) in `precision.compute_dtype` (module docstring): under
    `bf16-mixed` a LoRA policy's base linears in bf16, its adapters, norms and embeddings in
    float32. FSDP2 expects one dtype per parameter group
    (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py `_init_mp_dtypes`), and the trainer
    refuses LoRA with more than one rank.

    One tensor at a time, moved first and cast where it lands (`cast_on_device`): a bf16
    checkpoint bound for a GPU never has a float32 copy on the host (the host holds the loaded
    copy and nothing more: the memory plan's host line), and a frozen base never has one on the
    GPU. A tensor on the meta device (a rank that did not read the weights) stays there, cast."""
    frozen = {id(p) for p in frozen_linear_parameters(model)} if precision.mixed else set()
    return cast_on_device(
        model,
        device,
        lambda p: precision.compute_dtype if id(p) in frozen else precision.param_dtype,
    )


@torch.no_grad()
def cast_on_device(
    model: nn.Module, device: torch.device | None, dtype_of: Callable[[torch.Tensor], torch.dtype]
) -> nn.Module:
    """Each floating parameter and buffer `t` of `model` moved to `device` (None: kept where it is;
    a meta tensor stays on the meta device) and then cast to `dtype_of(t)` there, one tensor at a
    time: the extra memory at any moment is one tensor, on the device. `model.to(dtype)` followed
    by `.to(device)` would cast every tensor where the model was loaded (the host) first.

    Through `nn.Module._apply`, the function `model.to` itself applies to each tensor
    (torch/nn/modules/module.py): it hands `fn` the Parameter (so `dtype_of` may key on it) and
    swaps in the result as `.to` does (`param.data = ...` where the tensor types allow it)."""

    def move_then_cast(tensor: torch.Tensor) -> torch.Tensor:
        target = tensor.device if device is None or tensor.is_meta else device
        moved = tensor.to(device=target)
        return moved.to(dtype_of(tensor)) if tensor.is_floating_point() else moved

    return model._apply(move_then_cast)


@torch.no_grad()
def store_frozen_linears(model: nn.Module, precision: Precision) -> None:
    """When `precision` is mixed, `model`'s frozen linear weights (`frozen_linear_parameters`) cast
    in place to its compute dtype; the rest of `store_parameters`, for a model already in
    `precision.param_dtype` (the memory trace's, built in it on fake tensors)."""
    if precision.mixed:
        for p in frozen_linear_parameters(model):
            p.data = p.data.to(precision.compute_dtype)


def stored_mixed_autocast(
    model: nn.Module, device: torch.device
) -> contextlib.AbstractContextManager:
    """The context a forward of `model` outside the trainer's step (the HF engine's decode) needs:
    `torch.autocast(device.type, d)` when `model`'s floating parameters are stored in more than one
    dtype (`store_parameters` under bf16-mixed: bf16 frozen linears among float32 adapters, which
    F.linear refuses to multiply without autocast), d the narrowest of them; else a no-op, the
    forward computing in the parameters' own dtype."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(dtypes) < 2:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=min(dtypes, key=lambda d: torch.finfo(d).bits))
