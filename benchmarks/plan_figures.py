"""The memory plan's byte figures for every preset that has a plan, and for the tiny models, as
JSON: run it at two commits and compare, to show that a change to the trace leaves every figure
the same to the byte.

    PYTHONPATH=. python benchmarks/plan_figures.py --out after.json [--only tiny]
    python benchmarks/plan_figures.py --compare before.json after.json

Each case is a run's overrides and its ranks (the launcher's `nodes x tasks_per_node`), planned as
`python -m quadrants.plan` plans it (quadrants/memory/check.py `plan_inputs`, memory/peaks.py
`make_plan`). Recorded per case: every trace the plan ran (its decoder layers and the five
footprints, by kind), and the plan itself (each phase's trainer footprint and engine terms, the
host figure, the head's buffers, the parameter counts). Besides the plans, a few traces of shapes
the plan does not run (rows of unequal length, padded and packed, as benchmarks/gpu_acceptance.py
traces them; real tensors instead of fake ones). The 7B cases trace a 7B-wide model at 2 and 3
layers: minutes on a laptop. `--compare` prints each case's first difference and exits 1 on any.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

# the experiment presets with cluster.gpu_memory_gib (the ones the sweep plans at compose time),
# at the ranks their comments launch them with, and the 7B study on one GPU (refused)
PRESETS = (
    ("experiment=paper_quadrants_qwen7b", 8),
    ("experiment=paper_quadrants_qwen7b", 1),
    ("experiment=paper_main_qwen7b", 8),
    ("experiment=paper_quadrants_qwen7b_lora_1gpu", 1),
    ("experiment=paper_main_dsr1p5b", 8),
    ("experiment=llama3.2_1b_quadrants", 1),
)
# the tiny models under the settings the trace branches on
TINY = tuple(
    (f"model={model}{extra}", ranks)
    for model in ("tiny_random", "tiny")
    for extra, ranks in (
        ("", 1),
        (" train.activation_checkpointing=true", 1),
        (" train.precision=fp32", 1),
        (" train.precision=bf16 train.allow_pure_bf16=true", 1),
        (" model.lora.enabled=true", 1),
        (" train.attention_layout=packed", 1),
        (" train.entropy_chunk_size=7", 1),
        (" train.offload_optimizer=true", 1),
        ("", 2),
        (" train.activation_checkpointing=true train.entropy_chunk_size=5", 4),
    )
)


def plan_case(overrides: str, ranks: int) -> dict:
    """Every trace the plan of `overrides` at `ranks` runs, and the plan's figures."""
    from quadrants.launch.hydra_setup import compose_run_plan
    from quadrants.memory import peaks as plan_module
    from quadrants.memory.check import plan_inputs

    traced = []
    trace_step = plan_module.trace_step

    def recorded(spec):
        step = trace_step(spec)
        traced.append({"layers": spec.layers, **asdict(step)})
        return step

    cfg = compose_run_plan(overrides.split(), files=False)
    inputs = plan_inputs(cfg, ranks, ranks)
    plan_module._TRACES.clear()  # each case traces (no trace shared across cases)
    plan_module.trace_step = recorded
    try:
        plan = plan_module.make_plan(inputs)
    finally:
        plan_module.trace_step = trace_step
    return {
        "traces": traced,
        "phases": [asdict(p) for p in plan.phases],
        "needed": plan.needed(),
        "host_per_node": plan.host_per_node,
        "head_buffers": plan.head_buffers,
        "parameters": plan.parameters,
        "trainable": plan.trainable,
    }


def trace_cases() -> dict[str, dict]:
    """Traces the plans above do not run: rows of unequal length, a flash kernel, real tensors."""
    from quadrants.memory.architecture import model_config
    from quadrants.memory.trace import TraceSpec, trace_step

    config = copy.deepcopy(model_config("tiny-random"))
    shape = dict(seq_len=40, response_tokens=24, update_rows=3, forward_rows=3, chunk_size=8)
    rows = (((16, 24), (3, 9), (10, 1)), ((1, 17), (16, 24)))
    specs = {
        "rows padded": TraceSpec(config, layers=2, sharded=False, rows=rows, **shape),
        "rows packed": TraceSpec(config, layers=2, sharded=False, rows=rows, packed=True, **shape),
        "rows sharded": TraceSpec(config, layers=2, world_size=2, rows=rows, **shape),
        "flash kernel packed": TraceSpec(
            config, layers=2, sharded=False, packed=True, varlen=True, **shape
        ),
        "real tensors": TraceSpec(config, layers=2, sharded=False, fake=False, **shape),
    }
    return {name: asdict(trace_step(spec)) for name, spec in specs.items()}


def compare(before: dict, after: dict) -> int:
    differ = 0
    for case in sorted(set(before) | set(after)):
        a, b = before.get(case), after.get(case)
        same = a == b
        differ += not same
        print(f"{'same' if same else 'DIFFERENT'}  {case}")
        if not same and a is not None and b is not None:
            for key in a:
                if a[key] != b.get(key):
                    print(f"    first difference in {key!r}: {a[key]} != {b.get(key)}")
                    break
    print(f"{len(set(before) | set(after)) - differ} cases the same, {differ} different")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", choices=("presets", "tiny", "traces"), default=None)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(p.read_text())["cases"] for p in args.compare)
        sys.exit(compare(before, after))
    cases: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    groups = {"presets": PRESETS, "tiny": TINY}
    for group, runs in groups.items():
        if args.only not in (None, group):
            continue
        for overrides, ranks in runs:
            name = f"{overrides} ranks={ranks}"
            started = time.perf_counter()
            cases[name] = plan_case(overrides, ranks)
            seconds[name] = round(time.perf_counter() - started, 1)
            print(f"{seconds[name]:7.1f} s  {name}", file=sys.stderr, flush=True)
    if args.only in (None, "traces"):
        started = time.perf_counter()
        cases.update({f"trace: {k}": v for k, v in trace_cases().items()})
        print(f"{time.perf_counter() - started:7.1f} s  traces", file=sys.stderr)
    text = json.dumps({"cases": cases, "seconds": seconds}, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
