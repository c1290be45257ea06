"""The weights a rollout engine loads from the trainer's policy, whether the policy is a plain
module or sharded over ranks by FSDP2."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.tensor import DTensor

# the dtype names an engine may be given (rollout.vllm.dtype); "auto": the weights' own dtype
WEIGHT_DTYPES = {
    "auto": None,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def full_weights(
    model: nn.Module, dtype: torch.dtype | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every entry of `model`'s state dict, one at a time.

    `dtype`: floating tensors are cast to it one at a time (the engine's own dtype,
    rollout.vllm.dtype: float32 trainer weights pushed to a bf16 engine); None: as they are.

    An FSDP2-sharded entry (a DTensor) is all-gathered when it is reached, so every rank must
    consume the iterator to the end, in the same order, at the same point of the step; only one full
    tensor exists at a time (not a full copy of the model). A plain module's tensors pass through,
    detached, without a copy."""
    for name, tensor in model.state_dict().items():
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        yield name, tensor.detach()


@torch.no_grad()
def copy_weights(target: nn.Module, model: nn.Module) -> None:
    """Overwrite `target`'s parameters and persistent buffers with `model`'s, streamed by
    `full_weights` (a collective when `model` is sharded). Same names required."""
    state = target.state_dict()
    for name, tensor in full_weights(model):
        state[name].copy_(tensor)
