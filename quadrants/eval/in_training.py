"""What the training loop calls to evaluate the live policy: `evaluate_policy`.

With `eval.benchmarks` set, the configured benchmarks (eval/runner.py: tables and samples as
artifacts); else the task's held-out split, `eval.problems` x `eval.samples` (eval/heldout.py); {}
when both are off. Under torch.distributed every rank calls it and generates its share.
"""

from __future__ import annotations

from typing import Any

from quadrants.distributed.collectives import DistEnv
from quadrants.eval.heldout import heldout_metrics
from quadrants.eval.runner import EvalSettings, evaluate_in_training
from quadrants.eval.sizing import call_size
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import RolloutEngine, SamplingSettings
from quadrants.tasks.base import Task
from quadrants.tracking.base import Tracker


def evaluate_policy(
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    tokenizer: Any,
    settings: EvalSettings,
    dist: DistEnv,
    step: int = 0,
    tracker: Tracker | None = None,
) -> dict[str, float]:
    """Held-out metrics of the current policy: the configured benchmarks (`eval.benchmarks`, through
    quadrants.eval.runner, tables and samples as artifacts), else the task's held-out
    split ({} when disabled); `settings` are the run's (`EvalSettings.of(plan)`).

    Every rank calls this: the generate calls are dealt to the ranks (each on its own rollout
    engine) and gathered; rank 0 returns the metrics, the other ranks {}."""
    evaluation = settings.eval
    if evaluation.benchmarks:
        return evaluate_in_training(engine, grader, tokenizer, settings, dist, step, tracker)
    if evaluation.problems == 0:
        return {}
    sampling = SamplingSettings(
        n=evaluation.samples,
        temperature=evaluation.temperature,
        top_p=evaluation.top_p,
        max_new_tokens=evaluation.max_new_tokens,
        seed=settings.seed,  # the run seed; each chunk's own is derived from it (eval/heldout.py)
    )
    problems = (
        evaluation.problems
        if evaluation.limit is None
        else min(evaluation.problems, evaluation.limit)
    )
    heldout = task.heldout(problems)
    metrics = heldout_metrics(
        engine,
        grader,
        heldout,
        sampling,
        task.name,
        batch_prompts=max(
            1,
            call_size(
                engine,
                [p.prompt for p in heldout],
                evaluation.batch_size,
                evaluation.samples,
                dist,
            )
            // evaluation.samples,
        ),
        dist=dist,
        extra_ks=list(evaluation.ks),
    )
    return metrics if dist.is_main else {}
