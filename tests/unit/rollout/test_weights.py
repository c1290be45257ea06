"""The weights an engine loads from the policy (quadrants/rollout/weights.py), on a plain module. The
sharded case (DTensor entries gathered one at a time) runs for real in tests/distributed (every
2-rank run's HF engines are synced with copy_weights) and in the vLLM stage."""

from __future__ import annotations

import torch
from torch import nn

from quadrants.rollout.weights import copy_weights, full_weights


def two_layers(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))
    model.register_buffer("scale", torch.tensor([float(seed)]))  # a persistent buffer travels too
    return model


def test_a_plain_module_passes_its_own_tensors_through_in_state_dict_order():
    model = two_layers(0)
    names, tensors = zip(*full_weights(model))
    assert (
        list(names)
        == list(model.state_dict())
        == ["scale", "0.weight", "0.bias", "1.weight", "1.bias"]
    )
    for tensor, original in zip(tensors, model.state_dict().values()):
        assert (
            tensor.data_ptr() == original.data_ptr() and not tensor.requires_grad
        )  # no copy, detached


def test_copy_weights_overwrites_every_parameter_and_buffer_in_place():
    source, target = two_layers(1), two_layers(2)
    weight = target[0].weight  # the same Parameter object afterwards: engines keep references to it
    copy_weights(target, source)
    assert target[0].weight is weight
    for name, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[name], value), name
    assert target.scale.item() == 1.0


def test_the_push_casts_floating_tensors_to_the_engine_dtype():
    """rollout.vllm.dtype=bfloat16 with a float32 trainer: each floating tensor is cast as it is
    reached (0.1 becomes bf16's nearest, 0.10009765625); integer buffers stay as they are."""
    model = nn.Linear(2, 1)
    model.register_buffer("count", torch.tensor([3]))
    with torch.no_grad():
        model.weight.fill_(0.1)
    weights = dict(full_weights(model, dtype=torch.bfloat16))
    assert weights["weight"].dtype == torch.bfloat16 and weights["bias"].dtype == torch.bfloat16
    assert float(weights["weight"][0, 0]) == 0.10009765625
    assert weights["count"].dtype == torch.int64
    assert next(iter(dict(full_weights(model)).values())).dtype == torch.float32
