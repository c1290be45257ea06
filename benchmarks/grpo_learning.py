"""Does GRPO learn on a CPU? Train the embedded tiny policy for a few minutes on 2 cores and print
held-out accuracy before and after (the same held-out problems, the same sampling settings).

    python benchmarks/grpo_learning.py [--objective grpo] [--steps 100] [--threads 2]

Goal (issue: training core): held-out Avg@4 rises by at least 15 points within 10 minutes.
"""

from __future__ import annotations

import argparse
import logging
import time

from quadrants.config import RunConfig
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.tracking.base import RecordingTracker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", default="grpo")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-problems", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    cfg = RunConfig(seed=args.seed)
    cfg.objective.name = args.objective
    cfg.train.steps = args.steps
    cfg.train.prompts_per_step = args.prompts
    cfg.rollout.group_size = args.group
    cfg.train.mini_batch_size = args.prompts * args.group // 2
    cfg.train.lr = args.lr
    cfg.train.threads = args.threads
    cfg.eval.problems = args.eval_problems
    cfg.eval.every = 0
    tracker = RecordingTracker()
    start = time.perf_counter()
    result = run_training(RunPlan.parse(cfg), tracker)
    minutes = (time.perf_counter() - start) / 60
    name = keys.evaluation("arithmetic", keys.avg_at(cfg.eval.samples))
    before, after = result.initial_eval[name], result.final_eval[name]
    step_times = [
        m[keys.timing("rollout")]
        + m[keys.timing("reward")]
        + m[keys.timing("old_logp")]
        + m[keys.timing("update")]
        + m[keys.timing("telemetry")]
        for _, m in tracker.history
        if keys.timing("update") in m
    ]
    print(
        f"objective {args.objective}, {args.steps} steps x {args.prompts} prompts x "
        f"G={args.group}, {args.threads} threads"
    )
    print(
        f"held-out {name} ({args.eval_problems} problems): before {before:.3f}  after {after:.3f}  "
        f"change {100 * (after - before):+.1f} points"
    )
    print(
        f"wall time {minutes:.1f} min (incl. evaluation); mean step "
        f"{sum(step_times) / len(step_times):.2f} s"
    )
    print(
        "goal: +15 points within 10 minutes -> "
        f"{'met' if after - before >= 0.15 and minutes <= 10 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
