"""The plan's terms beside the trainer's trace: the engine's share as a fraction of the device's
usable total, what the engine keeps while asleep, the reload's extra tensor in the push, the
process's non-torch memory, and FSDP2's gathered layers held at the deepest traced value."""

from __future__ import annotations

import pytest
import torch

from quadrants.config import VLLMConfig
from quadrants.launch.hydra_setup import compose_run_plan
from quadrants.memory import check
from quadrants.memory.peaks import NON_TORCH_GIB, extrapolate, make_plan
from quadrants.memory.trace import Footprint, GiB, StepTrace
from quadrants.rollout.vllm_share import CUDA_GRAPH_POOL_GIB, RUNNER_BUFFERS_GIB, vllm_share

VLLM_TINY = ["model=tiny_random", "rollout=vllm", "rollout.max_new_tokens=64"]


def test_the_engine_takes_utilization_times_the_devices_usable_total():
    # an "80 GB" card reports 79.1 GiB = int(79.1 x 2**30) = 84,932,978,278 bytes; at 0.7 the
    # engine takes int(0.7 x 84,932,978,278) = 59,453,084,794 bytes (55.37 GiB), not 0.7 x 80e9 =
    # 56e9: 3.45e9 bytes (3.2 GiB) more. 7.62e9 bf16 parameters = 15.24e9 bytes of weights; the
    # KV cache is the rest: 59,453,084,794 - 15,240,000,000 = 44,213,084,794
    device = int(79.1 * 2**30)
    assert device == 84_932_978_278
    share = vllm_share(VLLMConfig(gpu_memory_utilization=0.7), 7_620_000_000, device)
    assert share.weights == 15_240_000_000
    assert share.weights + share.kv_cache == 59_453_084_794 == int(0.7 * device)


def test_what_sleep_keeps_and_what_the_push_receives():
    # the CUDA-graph pool (1 GiB) and the runner's buffers (0.25 GiB) stay through sleep:
    # 1.25 x 2**30 = 1,342,177,280 bytes; under gpu_memory_utilization they are inside the awake
    # share (0 on top), with a fixed KV cache on top of it; no graphs when eager: 0.25 GiB
    assert (CUDA_GRAPH_POOL_GIB, RUNNER_BUFFERS_GIB) == (1.0, 0.25)
    by_share = vllm_share(VLLMConfig(), 10**9, 80 * GiB)
    assert (by_share.awake_fixed, by_share.asleep_fixed) == (0, 1_342_177_280)
    fixed = vllm_share(VLLMConfig(kv_cache_gib=2.0), 10**9, 80 * GiB)
    assert (fixed.awake_fixed, fixed.asleep_fixed) == (1_342_177_280, 1_342_177_280)
    eager = vllm_share(VLLMConfig(enforce_eager=True), 10**9, 80 * GiB)
    assert eager.asleep_fixed == 268_435_456  # 0.25 x 2**30
    assert by_share.receive_tensors == 1  # the layer-wise reload's copy of the incoming tensor


@pytest.mark.slow  # traces the tiny model
def test_a_plan_counts_the_devices_total_the_engines_fixed_part_the_reload_and_non_torch():
    run = compose_run_plan([*VLLM_TINY, "cluster.gpu_memory_gib=2"])
    plan = make_plan(check.plan_inputs(run, world_size=2, gpus_per_node=2))
    phases = {p.phase: p for p in plan.phases}
    device = 2 * GiB  # 2,147,483,648 bytes
    assert plan.inputs.device_bytes == device
    # awake: the engine's weights + KV cache are 0.5 x 2,147,483,648 = 1,073,741,824 bytes
    rollout = phases["rollout"]
    assert rollout.engine_weights + rollout.kv_cache == 1_073_741_824
    assert rollout.engine_fixed == 0
    # asleep (level 2, the default): nothing of the share, the graphs and buffers: 1,342,177,280
    for name in ("behaviour pass", "update"):
        assert phases[name].engine_weights + phases[name].kv_cache == 0
        assert phases[name].engine_fixed == 1_342_177_280
    # the push over 2 ranks: the largest parameter, tiny's MLP matrix 512 x 128 = 65,536 elements
    # in bf16 = 131,072 bytes, gathered, and the reload's copy of it: 2 x 131,072 = 262,144
    push = phases["weight push"]
    assert push.gathered_push == 262_144
    assert push.engine_fixed == 1_342_177_280 and push.kv_cache == 0
    # every phase: 1.5 GiB outside torch = 1,610,612,736 bytes
    assert NON_TORCH_GIB == 1.5
    assert all(p.non_torch == 1_610_612_736 for p in plan.phases)
    assert rollout.total == rollout.trainer.total + 1_073_741_824 + 1_610_612_736


@pytest.mark.slow  # traces the tiny model
def test_a_planning_process_that_sees_a_gpu_sizes_on_that_gpu(monkeypatch):
    # a device reporting 150e9 bytes in all: the share is 0.5 x 150e9 = 75e9, whatever
    # cluster.gpu_memory_gib says
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (10**9, 150 * 10**9))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a test GPU")
    run = compose_run_plan([*VLLM_TINY, "cluster.gpu_memory_gib=2"])
    total, source = check.device_total(run.cluster)
    assert total == 150 * 10**9 and "a test GPU" in source
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # no GPU seen: the setting, 2 x 2**30
    assert check.device_total(run.cluster) == (2 * GiB, "cluster.gpu_memory_gib=2")


def test_gathered_layers_are_held_at_the_deepest_trace_not_extended():
    # traces at 2 and 3 layers; per layer the held state grows by 10 parameters' bytes and 100 of
    # activations; FSDP2's gathered bytes are 7 at 2 layers and 9 at 3 (the root's and one or two
    # layers): at 10 layers the plan keeps 9 (a linear extension would give 9 + 7 x 2 = 23)
    def trace(params: int, gathered: int, activations: int) -> StepTrace:
        held = Footprint(parameters=params, gathered=gathered, activations=activations)
        return StepTrace(
            update=held,
            held=held,
            optimizer=Footprint(parameters=params, gathered=gathered),
            no_grad=Footprint(parameters=params, gathered=gathered, activations=activations // 2),
            resident=Footprint(parameters=params),
            parameters=params,
        )

    ten = extrapolate(trace(20, 7, 200), trace(30, 9, 300), layers=10, depth=2)
    # 7 layers beyond the 3-layer trace: parameters 30 + 7 x 10 = 100, activations 300 + 7 x 100
    assert ten.update == Footprint(parameters=100, gathered=9, activations=1000)
    assert ten.held.gathered == ten.optimizer.gathered == ten.no_grad.gathered == 9
    # the no-grad pass's activations: 150 + 7 x 50 = 500
    assert ten.no_grad.activations == 500
