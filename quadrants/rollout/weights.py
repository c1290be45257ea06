"""The weights a rollout engine loads from the trainer's policy, whether the policy is a plain
module or sharded over ranks by FSDP2."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

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

_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


def full_weights(
    model: nn.Module, dtype: torch.dtype | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every entry of `model`'s state dict, one at a time.

    `dtype`: floating tensors are cast to it one at a time (the engine's own dtype,
    rollout.vllm.dtype: float32 trainer weights pushed to a bf16 engine); None: as they are.

    An FSDP2-sharded entry (a DTensor) is all-gathered when it is reached, so every rank must
    consume the iterator to the end, in the same order, at the same point of the step; only one full
    tensor exists at a time (not a full copy of the model), in the engine's dtype: a shard is cast
    before the gather (the cast is elementwise, so the values are those of casting the gathered
    tensor), so the gather moves and holds the engine's bytes, the one full parameter in the
    engine's dtype that the memory plan's weight push counts (memory/peaks.py). Gathered in float32
    and cast after, the largest (Qwen2.5-7B's embedding, 152,064 x 3,584) held 2.03 GiB plus its
    1.02 GiB bf16 copy at once, 3 x the plan's figure. A plain module's tensors pass through,
    detached, without a copy.

    A policy with LoRA adapters (models/lora.py) gives its merged weights under the base model's
    names (`merged_lora_weights`), so an engine that loads the base architecture (vLLM) receives
    the adapted policy."""
    from quadrants.models.lora import has_adapters

    entries = merged_lora_weights(model) if has_adapters(model) else model.state_dict().items()
    for name, tensor in entries:
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)  # a DTensor: its local shard, before the gather
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        yield name, tensor.detach()


@torch.no_grad()
def merged_lora_weights(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of the adapted policy as a plain model of the base architecture: every
    adapted linear's weight is W + delta, delta from peft's own `lora.Linear.get_delta_weight`
    (peft/tuners/lora/layer.py: `transpose(B @ A, fan_in_fan_out) * scaling`, summed over the
    active adapters), under the base layer's name (".base_layer" dropped); the adapters' own
    entries (lora_A, lora_B) are left out. One merged weight exists at a time, and the trainer's
    weights are never modified: peft's `merge_adapter` / `unmerge_adapter` (TRL's route) add and
    then subtract delta in place, which in floating point does not restore W exactly. An adapter
    switched off (`adapters_disabled`) or merged already gives W as it is.

    The sum is computed in float32 (or W's dtype if wider): under `bf16-mixed` the frozen W is
    stored in bf16 (ops/precision.py `store_parameters`), and delta added in bf16 would mostly
    round away; bf16 W widens to float32 exactly, so a float32 engine receives W + delta as
    before. An adapted weight is therefore yielded in float32 whatever W's storage dtype."""
    from peft.tuners.lora import LoraLayer

    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        owner, marker, leaf = name.partition(".base_layer.")
        if marker:
            layer = layers[owner]
            if leaf == "weight" and not layer.disable_adapters and not layer.merged:
                deltas = [
                    layer.get_delta_weight(adapter)
                    for adapter in layer.active_adapters
                    if adapter in layer.lora_A
                ]
                if deltas:  # in float32 at least: W may be stored in bf16 (ops/precision.py)
                    wide = torch.promote_types(tensor.dtype, torch.float32)
                    merged = tensor.to(wide, copy=True)  # a copy: the trainer's W stays as it is
                    for delta in deltas:
                        merged.add_(delta.to(wide))
                    tensor = merged
            name = f"{owner}.{leaf}"
        yield name, tensor


@torch.no_grad()
def copy_weights(target: nn.Module, model: nn.Module) -> None:
    """Overwrite `target`'s parameters and persistent buffers with `model`'s, streamed by
    `full_weights` (a collective when `model` is sharded). Same names required."""
    state = target.state_dict()
    for name, tensor in full_weights(model):
        state[name].copy_(tensor)


def layer_of(name: str) -> str:
    """The decoder layer a state-dict entry belongs to ("model.layers.3" for
    "model.layers.3.self_attn.q_proj.weight"), or the entry's own name outside the layers."""
    match = _LAYER.match(name)
    return match.group(1) if match else name


def weight_buckets(
    weights: Iterable[tuple[str, torch.Tensor]], max_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """`weights` regrouped into lists of (name, CPU tensor) that pickle, in order, for an engine
    whose workers are other processes (vLLM with tensor parallelism above 1: `collective_rpc`
    pickles its arguments, and a generator does not pickle).

    A bucket holds at most `max_bytes` unless one decoder layer alone is larger, and is cut only
    between decoder layers (`layer_of`): vLLM's in-place reload processes a layer once per
    `reload_weights` call (`vllm/model_executor/model_loader/reload/layerwise.py`), and a fused
    layer (q, k, v -> qkv_proj; gate, up -> gate_up_proj) given only part of its tensors in one call
    would be processed half-loaded. At most one bucket and one layer are on the host at a time."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    group: list[tuple[str, torch.Tensor]] = []
    group_size = 0
    current: str | None = None

    for name, tensor in weights:
        layer = layer_of(name)
        if layer != current and group:
            if bucket and size + group_size > max_bytes:
                yield bucket
                bucket, size = [], 0
            bucket.extend(group)
            size += group_size
            group, group_size = [], 0
        current = layer
        host = tensor.detach().to("cpu", copy=True).contiguous()
        group.append((name, host))
        group_size += host.numel() * host.element_size()
    if group:
        if bucket and size + group_size > max_bytes:
            yield bucket
            bucket = []
        bucket.extend(group)
    if bucket:
        yield bucket
