"""What the training loop calls to evaluate the live policy: `evaluate_policy`.

With `eval.benchmarks` set, the configured benchmarks (eval/runner.py: tables and samples as
artifacts); else the task's held-out split, `eval.problems` x `eval.samples` (eval/heldout.py); {}
when both are off. Under torch.distributed every rank calls it and generates its share.
"""

from __future__ import annotations

from typing import Any

from quadrants.config import RunConfig
from quadrants.distributed.collectives import DistEnv
from quadrants.eval.heldout import heldout_metrics
from quadrants.eval.runner import evaluate_in_training
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
    cfg: RunConfig,
    dist: DistEnv,
    step: int = 0,
    tracker: Tracker | None = None,
) -> dict[str, float]:
    """Held-out metrics of the current policy: the configured benchmarks (`eval.benchmarks`, through
    quadrants.eval.runner, tables and samples as artifacts), else the task's held-out
    split ({} when disabled).

    Every rank calls this: the generate calls are dealt to the ranks (each on its own rollout
    engine) and gathered; rank 0 returns the metrics, the other ranks {}."""
    if cfg.eval.benchmarks:
        return evaluate_in_training(engine, grader, tokenizer, cfg, dist, step, tracker)
    if cfg.eval.problems == 0:
        return {}
    sampling = SamplingSettings(
        n=cfg.eval.samples,
        temperature=cfg.eval.temperature,
        top_p=cfg.eval.top_p,
        max_new_tokens=cfg.eval.max_new_tokens,
        seed=cfg.seed,  # the run seed; each chunk's own is derived from it (eval/heldout.py)
    )
    problems = (
        cfg.eval.problems if cfg.eval.limit is None else min(cfg.eval.problems, cfg.eval.limit)
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
                cfg.eval.batch_size,
                cfg.eval.samples,
                dist,
            )
            // cfg.eval.samples,
        ),
        dist=dist,
        extra_ks=list(cfg.eval.ks),
    )
    return metrics if dist.is_main else {}
