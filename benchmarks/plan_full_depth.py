"""The memory plan's depth extrapolation against a trace of the whole model, for a preset's run.

    PYTHONPATH=. python benchmarks/plan_full_depth.py [--experiment paper_quadrants_qwen7b]
        [--ranks 8] [--layers N] [--out full_depth.json]

The plan (`python -m quadrants.plan`) traces 2 and 3 decoder layers on fake tensors and
extrapolates to the model's depth (quadrants/memory/peaks.py `extrapolate`). This script traces the
same step of the preset's run (`launcher=slurm_ddp` shapes: FSDP2 over `--ranks`, the preset's
micro-batch, precision and checkpointing) at `--layers` decoder layers (default: the model's whole
depth) and prints, phase by phase, the trace beside the plan's extrapolation to that depth, with
the time each took. Fake tensors: no weights and no GPU; a 28-layer 7B trace runs on a laptop CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from quadrants.launch.hydra_setup import compose_run_plan
from quadrants.memory.check import plan_inputs
from quadrants.memory.peaks import TRACED_DEPTH, extrapolate, trace_at
from quadrants.memory.trace import KINDS, GiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="paper_quadrants_qwen7b")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--layers", type=int, default=None, help="default: the model's depth")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    run = compose_run_plan([f"experiment={args.experiment}"], files=False)
    inputs = plan_inputs(run, args.ranks, args.ranks)
    layers = args.layers or int(inputs.config.num_hidden_layers)
    started = time.perf_counter()
    shallow = trace_at(inputs, TRACED_DEPTH), trace_at(inputs, TRACED_DEPTH + 1)
    planned = extrapolate(*shallow, layers, TRACED_DEPTH)
    plan_seconds = time.perf_counter() - started
    started = time.perf_counter()
    full = trace_at(inputs, layers)
    full_seconds = time.perf_counter() - started
    rows = {}
    print(
        f"{args.experiment}, FSDP2 over {args.ranks} ranks, {layers} decoder layers: "
        f"traces of {TRACED_DEPTH} and {TRACED_DEPTH + 1} layers extrapolated "
        f"({plan_seconds:.0f} s) "
        f"against a trace of all {layers} ({full_seconds:.0f} s); GiB"
    )
    for phase in ("update", "no_grad", "optimizer", "resident"):
        plan, traced = getattr(planned, phase), getattr(full, phase)
        rows[phase] = {"plan": asdict(plan), "trace": asdict(traced)}
        kinds = "  ".join(
            f"{k} {getattr(plan, k) / GiB:.2f}/{getattr(traced, k) / GiB:.2f}" for k in KINDS
        )
        print(
            f"  {phase:9s} plan {plan.total / GiB:6.2f}  trace {traced.total / GiB:6.2f}  "
            f"plan/trace {plan.total / traced.total:.3f}   (plan/trace by kind: {kinds})"
        )
    if args.out:
        args.out.write_text(
            json.dumps(
                dict(
                    experiment=args.experiment,
                    ranks=args.ranks,
                    layers=layers,
                    plan_seconds=plan_seconds,
                    trace_seconds=full_seconds,
                    phases=rows,
                ),
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
