"""What one hindsight-credit probe costs at the default `probe.*` settings, on the tiny world.

Runs `quadrants.probe.measure.probe_policy` on the cached tiny policy (HF engine, 1 thread unless
--threads) `--repeats` times with different seeds and prints, per run and as the median: branching
rollouts, generated tokens, wall seconds and rollouts/s, plus the load average
(the machine is shared).

    python benchmarks/probe_cost.py [--repeats 3] [--threads 1] [probe overrides as key=value ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import replace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "overrides", nargs="*", help="probe settings, e.g. positions=16 continuations=16"
    )
    args = parser.parse_args()

    import torch

    from quadrants.config import ProbeConfig, RunConfig
    from quadrants.eval.generation import TextEngine
    from quadrants.models.loading import load_policy
    from quadrants.probe.branching import ProbeSettings
    from quadrants.probe.measure import probe_policy
    from quadrants.rewards.grader import Grader
    from quadrants.run.build import make_run_task
    from quadrants.run_plan import RunPlan

    torch.set_num_threads(args.threads)
    settings = {
        k: type(getattr(ProbeConfig(), k))(v) for k, v in (o.split("=", 1) for o in args.overrides)
    }
    plan = RunPlan.parse(RunConfig(probe=replace(ProbeConfig(), **settings)))
    model, tokenizer = load_policy("tiny")
    task = make_run_task(plan, tokenizer)
    p = plan.probe
    print(
        f"probe settings: prompts {p.prompts} x G {plan.rollout.group_size}, positions "
        f"{p.positions}, branches {p.branches} (+ rest), coverage {p.coverage}, continuations "
        f"{p.continuations}, resamples {p.resamples}; {args.threads} thread(s)"
    )
    seconds, rates = [], []
    with Grader(num_workers=1, timeout_s=5.0) as grader:
        for repeat in range(args.repeats):
            run = ProbeSettings.of(plan)
            run = replace(run, probe=replace(run.probe, seed=repeat))
            result = probe_policy(
                model, tokenizer, TextEngine(model, tokenizer), grader, task, run, announce=False
            )
            m = result.metrics
            seconds.append(result.seconds)
            rates.append(m["probe/rollouts_per_s"])
            print(
                f"  seed {repeat}: {m['probe/rollouts']:.0f} rollouts, {m['probe/tokens']:.0f} "
                f"tokens, {result.seconds:.1f} s, {m['probe/rollouts_per_s']:.1f} rollouts/s "
                f"(load {os.getloadavg()[0]:.1f})"
            )
    print(
        f"median: {statistics.median(seconds):.1f} s per probe, "
        f"{statistics.median(rates):.1f} rollouts/s"
    )


if __name__ == "__main__":
    main()
