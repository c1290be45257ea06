"""Training step time with 2 gloo ranks (torchrun, FSDP2) against one process, on the tiny world.

Three layouts train the same run (cached tiny policy, GRPO, the same global batch and seeds through
`distributed.prompts_per_generate`), each as its own process tree started by this script:
1 process x 1 thread (the baseline), 1 process x 2 threads, 2 ranks x 1 thread. It prints the median
step time (steps after the first) and each phase (rollout, grading, old-logp pass, update, telemetry
incl. the weight sync), as ratios to the baseline. On 2 cores this measures what the distributed
machinery costs or saves at toy scale (gathers, spliced forwards, FSDP collectives, the per-rank
policy copy); GPU and multi-node figures need a GPU cluster.

    python benchmarks/distributed_step_time.py [--steps 6] [--prompts 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from quadrants.run_plan import RunPlan

PHASES = ("rollout", "reward", "old_logp", "update", "telemetry")


def worker(out: str, steps: int, prompts: int, threads: int) -> None:
    """One layout's run (called in each process of the layout)."""
    import torch

    from quadrants.config import RunConfig
    from quadrants.distributed.collectives import init_distributed, shutdown
    from quadrants.run.loop import run_training
    from quadrants.tracking.base import NullTracker

    class Timings(NullTracker):
        def __init__(self) -> None:
            super().__init__()
            self.steps: dict[int, dict[str, float]] = {}

        def log_metrics(self, metrics, step):  # noqa: ANN001 - the Tracker protocol
            self.steps[step] = {k: float(v) for k, v in metrics.items() if k.startswith("time/")}

    torch.set_num_threads(threads)
    env = init_distributed("gloo")
    cfg = RunConfig(seed=1)
    cfg.model.name_or_path = "tiny"
    cfg.objective.name = "grpo"
    cfg.train.steps, cfg.train.prompts_per_step, cfg.train.mini_batch_size = steps, prompts, 16
    cfg.train.threads = threads
    cfg.distributed.prompts_per_generate = prompts // 2
    cfg.eval.problems = 0
    cfg.checkpoint.every = 0
    tracker = Timings()
    try:
        run_training(RunPlan.parse(cfg), tracker)
    finally:
        shutdown()
    if env.is_main:
        Path(out).write_text(json.dumps(tracker.steps))


def run_layout(ranks: int, threads: int, steps: int, prompts: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "timings.json")
        args = [
            __file__,
            "--worker",
            out,
            "--steps",
            str(steps),
            "--prompts",
            str(prompts),
            "--threads",
            str(threads),
        ]
        launcher = (
            [sys.executable]
            if ranks == 1
            else [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(ranks),
            ]
        )
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(threads),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        subprocess.run([*launcher, *args], check=True, env=env, capture_output=True)
        per_step = {int(k): v for k, v in json.loads(Path(out).read_text()).items() if int(k) > 1}
    phases = {p: statistics.median(s[f"time/{p}_s"] for s in per_step.values()) for p in PHASES}
    return {
        "step": statistics.median(sum(s[f"time/{p}_s"] for p in PHASES) for s in per_step.values()),
        **phases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (x G = 8 samples)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.prompts, args.threads)
        return
    layouts = {
        "1 process x 1 thread": (1, 1),
        "1 process x 2 threads": (1, 2),
        "2 ranks x 1 thread": (2, 1),
    }
    results = {}
    for name, (ranks, threads) in layouts.items():
        print(f"running {name} ({args.steps} steps of {args.prompts} prompts x 8) ...", flush=True)
        results[name] = run_layout(ranks, threads, args.steps, args.prompts)
    base = results["1 process x 1 thread"]
    print(
        f"\nmedian seconds per training step (steps 2..{args.steps}), ratio to 1 process x 1 thread"
    )
    print(f"{'layout':24s} {'step':>14s} " + " ".join(f"{p:>16s}" for p in PHASES))
    for name, r in results.items():
        cells = " ".join(f"{r[p]:7.2f} ({r[p] / base[p]:4.2f}x)" for p in PHASES)
        print(f"{name:24s} {r['step']:6.2f} ({r['step'] / base['step']:4.2f}x) {cells}")


if __name__ == "__main__":
    main()
