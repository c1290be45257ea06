"""`train.offload_optimizer` (quadrants/run/offload.py) on the CPU: the states' round trip, the
training it must leave unchanged, the compose-time refusal, and the memory plan's accounting.

With the CPU as the "device" the offload still makes real copies (`copy=True`), so the round trip
and the step pre-hook run for real; what only a GPU shows is the device memory freed between steps
(the plan's rollout phase below is that claim, computed)."""

from __future__ import annotations

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.memory.check import plan_inputs
from quadrants.memory.peaks import make_plan
from quadrants.models.tiny import random_tiny_policy
from quadrants.run.offload import OptimizerOffload
from quadrants.run_plan import RunPlan

CPU = torch.device("cpu")


def _train(steps: int, *, offload: bool, fused: bool) -> tuple[dict, dict, list[bool]]:
    """`steps` AdamW steps of the random tiny model on a fixed batch; with `offload` the states go
    to the host after every step, as the training loop does. (parameters, states, on_host before
    each step)."""
    torch.manual_seed(0)
    model, _ = random_tiny_policy(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused or None)
    mover = OptimizerOffload(optimizer, CPU) if offload else None
    ids = torch.randint(3, 100, (4, 12), generator=torch.Generator().manual_seed(1))
    before_step = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        before_step.append(mover.on_host if mover else False)
        optimizer.step()  # the pre-hook loads the states first
        optimizer.zero_grad(set_to_none=True)
        if mover is not None:
            assert not mover.on_host  # loaded by the hook
            mover.offload()
    states = {
        (name, key): value.clone()
        for name, p in model.named_parameters()
        for key, value in optimizer.state[p].items()
    }
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, states, before_step


@pytest.mark.parametrize("fused", [False, True])
def test_states_round_trip_bit_exact(fused):
    torch.manual_seed(0)
    model, _ = random_tiny_policy(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused or None)
    model(input_ids=torch.arange(3, 15)[None], labels=torch.arange(3, 15)[None]).loss.backward()
    optimizer.step()
    states = [dict(s) for s in optimizer.state.values()]
    saved = [{k: v.clone() for k, v in s.items()} for s in states]
    mover = OptimizerOffload(optimizer, CPU)
    moved = mover.offload()
    # 2 moments (and the step counter) per parameter, float32: the moments alone are 8 bytes a
    # parameter; each counter is one float32 element
    parameters = sum(p.numel() for p in model.parameters())
    counters = len(states)
    assert moved == 8 * parameters + 4 * counters
    assert mover.on_host and mover.offload() == 0  # offloaded once
    for before, now, original in zip(states, optimizer.state.values(), saved):
        for key in original:
            assert now[key] is not before[key]  # a copy, not the device tensor
            assert now[key].data_ptr() != before[key].data_ptr()
            assert torch.equal(now[key], original[key])
    mover.load()
    assert not mover.on_host
    for now, original in zip(optimizer.state.values(), saved):
        for key in original:
            assert now[key].device == original[key].device and now[key].dtype == original[key].dtype
            assert torch.equal(now[key], original[key])  # bit-exact after the round trip


@pytest.mark.parametrize("fused", [False, True])
def test_training_is_bit_identical_with_offloading(fused):
    plain, plain_states, _ = _train(3, offload=False, fused=fused)
    moved, moved_states, on_host = _train(3, offload=True, fused=fused)
    assert on_host == [False, True, True]  # offloaded between steps (no states before step 1)
    assert plain.keys() == moved.keys() and all(torch.equal(plain[k], moved[k]) for k in plain)
    assert plain_states.keys() == moved_states.keys()
    assert all(torch.equal(plain_states[k], moved_states[k]) for k in plain_states)


def test_a_cpu_run_refuses_it_at_compose_time():
    cfg = RunConfig()
    cfg.train.offload_optimizer, cfg.train.device = True, "cpu"
    with pytest.raises(ValueError, match=r"train.offload_optimizer=true .* train.device=cpu"):
        RunPlan.parse(cfg, files=False)
    cfg.train.device = "auto"  # may be a GPU: allowed (the loop skips it if it resolves to CPU)
    RunPlan.parse(cfg, files=False)


@pytest.mark.slow
def test_the_memory_plan_moves_the_states_to_the_host():
    """The tiny model (1,064,064 parameters) over 2 ranks: AdamW's states are 8 bytes a parameter
    over 2 ranks = 4,256,256 bytes a rank (the trace adds 200 bytes of step counters: 4,256,456).
    Offloaded, the rollout, behaviour-pass and weight-push phases hold that much less, the update's
    peak is at most the larger of the forward/backward without them and the AdamW step with them,
    and each of the node's 2 ranks holds them in host memory once the load copy is gone."""
    cfg = RunConfig()
    kept = make_plan(plan_inputs(RunPlan.parse(cfg, files=False), 2, 2))
    cfg.train.offload_optimizer = True
    offloaded = make_plan(plan_inputs(RunPlan.parse(cfg, files=False), 2, 2))
    states = 4_256_456
    assert 8 * 1_064_064 // 2 == 4_256_256
    by_phase = lambda plan: {p.phase: p for p in plan.phases}  # noqa: E731
    a, b = by_phase(kept), by_phase(offloaded)
    assert a["rollout"].trainer.optimizer == states and b["rollout"].trainer.optimizer == 0
    for phase in ("rollout", "behaviour pass", "weight push"):
        assert a[phase].total - b[phase].total == states, phase
    assert b["update"].total <= a["update"].total
    # host: the larger of rank 0's load copy (the tiny checkpoint is float32: 1,064,064 x 4 B =
    # 4,256,256, memory/peaks.py host_per_node) and the ranks' states (2 x 4,256,456 = 8,512,912)
    # instead of the load copy alone: 4,256,656 bytes more
    assert offloaded.host_per_node - kept.host_per_node == 2 * states - 4 * 1_064_064 == 4_256_656
