"""Held-out accuracy of the current policy on a task's held-out split (sampled, graded).

The full benchmark evaluation (unbiased pass@k curves, real benchmarks) is `quadrants.eval`; this is
the in-training check on the task's own held-out split: Avg@n (mean correctness over the n samples
of each problem) and the unbiased Pass@k for k = 1, 2, 4, ..., n from the same samples (so even the
quick check gives a Pass@k curve).
"""

from __future__ import annotations

import torch

from quadrants.eval.metrics import pass_at_k_curve
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
        {eval/<name>/avg_at_n, eval/<name>/pass_at_k for k = 1, 2, 4, ..., n, eval/<name>/no_answer_frac}.
    """
    correct_per_problem: list[float] = []
    correct_counts: list[int] = []
    no_answer = 0
    k = sampling.n
    for i in range(0, len(problems), batch_prompts):
        chunk = problems[i : i + batch_prompts]
        rollouts = engine.generate([p.prompt for p in chunk], sampling)
        golds = [chunk[int(g)].answer for g in rollouts.group_ids]
        graded = grader.grade(rollouts.texts, golds)
        correct = torch.tensor([o == Outcome.correct for o in graded.outcomes], dtype=torch.float32).view(len(chunk), k)
        correct_per_problem.extend(correct.mean(-1).tolist())
        correct_counts.extend(int(c) for c in correct.sum(-1).tolist())
        no_answer += sum(o == Outcome.no_answer for o in graded.outcomes)
    n = max(len(correct_per_problem), 1)
    metrics = {keys.evaluation(name, keys.avg_at(k)): sum(correct_per_problem) / n}
    if correct_counts:
        curve = pass_at_k_curve([k] * len(correct_counts), correct_counts)
        metrics.update({keys.evaluation(name, keys.pass_at(j)): value for j, value in curve.items()})
    metrics[keys.evaluation(name, "no_answer_frac")] = no_answer / max(n * k, 1)
    return metrics
