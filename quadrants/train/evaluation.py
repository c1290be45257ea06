"""Held-out accuracy of the current policy on a task's held-out split (sampled, graded).

The full benchmark evaluation (unbiased pass@k curves, real benchmarks) is `quadrants.eval`; this is
the in-training check on the task's own held-out split: Avg@k (mean correctness over k samples per
problem) and Pass@k (at least one of the k correct, which is the unbiased estimator when n = k).
"""

from __future__ import annotations

import torch

from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, SamplingSettings
from quadrants.tasks.base import Problem
from quadrants.tracking import keys


def heldout_metrics(
    engine: RolloutEngine, grader: Grader, problems: list[Problem], sampling: SamplingSettings, name: str,
    batch_prompts: int = 64,
) -> dict[str, float]:
    """Generate `sampling.n` answers per problem and grade them.

    Returns:
        {eval/<name>/avg_at_k, eval/<name>/pass_at_k, eval/<name>/no_answer_frac}.
    """
    correct_per_problem: list[float] = []
    any_correct: list[float] = []
    no_answer = 0
    k = sampling.n
    for i in range(0, len(problems), batch_prompts):
        chunk = problems[i : i + batch_prompts]
        rollouts = engine.generate([p.prompt for p in chunk], sampling)
        golds = [chunk[int(g)].answer for g in rollouts.group_ids]
        graded = grader.grade(rollouts.texts, golds)
        correct = torch.tensor([o == Outcome.correct for o in graded.outcomes], dtype=torch.float32).view(len(chunk), k)
        correct_per_problem.extend(correct.mean(-1).tolist())
        any_correct.extend((correct.max(-1).values).tolist())
        no_answer += sum(o == Outcome.no_answer for o in graded.outcomes)
    n = max(len(correct_per_problem), 1)
    return {
        keys.evaluation(name, keys.avg_at(k)): sum(correct_per_problem) / n,
        keys.evaluation(name, keys.pass_at(k)): sum(any_correct) / n,
        keys.evaluation(name, "no_answer_frac"): no_answer / max(n * k, 1),
    }
