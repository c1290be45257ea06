"""The weights an engine loads from the policy (quadrants/rollout/weights.py), on a plain module. The
sharded case (DTensor entries gathered one at a time) runs for real in tests/distributed (every
2-rank run's HF engines are synced with copy_weights) and in the vLLM stage."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

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


def test_a_sharded_push_gathers_each_tensor_in_the_engine_dtype(monkeypatch):
    """FSDP2 over a fake process group of 2 ranks (torch.testing._internal.distributed.fake_pg: the
    shapes and dtypes of a real run, no data): every all-gather of a bf16 push moves bf16, the one
    full tensor at a time the memory plan counts in the engine's dtype (memory/peaks.py, weight
    push). Gathering float32 and casting after held the float32 full tensor and its bf16 copy at
    once: for a [152064, 3584] embedding 4 + 2 bytes x 545e6 = 3.05 GiB against the planned
    2 x 545e6 = 1.02 GiB. What only a GPU run shows: the CUDA peak itself (the dtypes fix it).
    The values equal a cast of the gathered tensor (an elementwise cast commutes with the
    gather); the vLLM stage checks pushed weights against the trainer's forward."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("needs a process without a process group")
    gathered: list[tuple[torch.dtype, tuple[int, ...]]] = []
    full_tensor = DTensor.full_tensor

    def recording(self, **kwargs):
        gathered.append((self.dtype, tuple(self.shape)))
        return full_tensor(self, **kwargs)

    monkeypatch.setattr(DTensor, "full_tensor", recording)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        model = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 6))  # float32, as the trainer's
        fully_shard(model, mesh=init_device_mesh("cpu", (2,)))
        pushed = dict(full_weights(model, dtype=torch.bfloat16))
    finally:
        dist.destroy_process_group()
    # 3 entries, each gathered once, in bf16, at its full shape
    assert gathered == [
        (torch.bfloat16, (8, 4)),
        (torch.bfloat16, (6, 4)),
        (torch.bfloat16, (6,)),
    ]
    assert {name: (t.dtype, tuple(t.shape)) for name, t in pushed.items()} == {
        "0.weight": (torch.bfloat16, (8, 4)),
        "1.weight": (torch.bfloat16, (6, 4)),
        "1.bias": (torch.bfloat16, (6,)),
    }
    assert not any(isinstance(t, DTensor) for t in pushed.values())
