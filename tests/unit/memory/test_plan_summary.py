"""The plan's summary line names the phase that needs most once the caching allocator's headroom is
added, with that total, in GiB only (the table's unit), and the budget in the same unit."""

from __future__ import annotations

from transformers import PretrainedConfig

from quadrants.memory.peaks import GiB, PhasePeak, Plan, PlanInputs, format_plan
from quadrants.memory.trace import Footprint


def test_the_summary_names_the_phase_that_needs_most_after_headroom_in_gib():
    inputs = PlanInputs(
        config=PretrainedConfig(),
        world_size=1,
        gpus_per_node=1,
        sharded=False,
        precision="fp32",
        checkpointing=False,
        seq_len=8,
        response_tokens=4,
        update_rows=1,
        forward_rows=1,
        chunk_size=8,
        micro_batches=1,
        allocator_headroom=0.5,
        device_bytes=8 * GiB,
        device_source="cluster.gpu_memory_gib=8",
    )
    # rollout: 2 GiB of trainer + 3 GiB of KV cache = 5 GiB in its row, needs 5 + 0.5 x 2 = 6 GiB;
    # update: 4.5 GiB in its row (a smaller row), needs 4.5 + 0.5 x 4.5 = 6.75 GiB: the most
    rollout = PhasePeak("rollout", Footprint(parameters=2 * GiB), kv_cache=3 * GiB)
    update = PhasePeak("update", Footprint(parameters=2 * GiB, activations=int(2.5 * GiB)))
    plan = Plan(inputs, [rollout, update], host_per_node=0, head_buffers=0, parameters=0)
    text = format_plan(plan, checked=True)
    (line,) = [row for row in text.splitlines() if row.startswith("needs most")]
    # the budget: 8 GiB usable; 6.75 GiB fits
    assert line == (
        "needs most: update, 6.75 GiB per GPU = its total 4.50 + the caching allocator's "
        "headroom (0.5 x the trainer's 4.50); budget 8.00 GiB (cluster.gpu_memory_gib=8): fits"
    )
    assert " GB" not in line
