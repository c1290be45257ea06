"""Held-out accuracy of the current policy on a task's held-out split (sampled, graded).

The full benchmark evaluation (unbiased pass@k curves, real benchmarks) is `quadrants.eval`; this is
the in-training check on the task's own held-out split: Avg@n (mean correctness over the n samples
of each problem) and the unbiased Pass@k for k = 1, 2, 4, ..., n from the same samples (so even the
quick check gives a Pass@k curve).

Under torch.distributed the chunks of problems (one generate call each, chunk c seeded by the
stream `heldout` of quadrants/seeds.py: no two samples of the split share a seed) are dealt to the
ranks, chunk c to rank c % W, and gathered in chunk order on every rank
(`quadrants.distributed.collectives.run_dealt`), so the metrics are those of one process for any W.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from quadrants import seeds
from quadrants.distributed.collectives import DistEnv, run_dealt
from quadrants.eval.metrics import avg_at_k_estimate, mean_pass_at_k, pass_at_k_curve
from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, SamplingSettings
from quadrants.tasks.base import Problem
from quadrants.tracking import keys


@dataclass(frozen=True)
class ChunkCounts:
    """One chunk's graded samples: per problem the correct fraction and count of n, and the
    number of samples with no answer."""

    correct_fraction: list[float]
    correct_count: list[int]
    no_answer: int


def grade_chunk(
    engine: RolloutEngine, grader: Grader, chunk: list[Problem], sampling: SamplingSettings
) -> ChunkCounts:
    """Generate `sampling.n` answers for each problem of `chunk` in one call and
    count the correct ones."""
    rollouts = engine.generate([p.prompt for p in chunk], sampling)
    golds = [chunk[int(g)].answer for g in rollouts.group_ids]
    graded = grader.grade(rollouts.texts, golds)
    correct = torch.tensor(
        [o == Outcome.correct for o in graded.outcomes], dtype=torch.float32
    ).view(len(chunk), sampling.n)
    return ChunkCounts(
        correct_fraction=correct.mean(-1).tolist(),  # [prompts]
        correct_count=[int(c) for c in correct.sum(-1).tolist()],  # [prompts]
        no_answer=sum(o == Outcome.no_answer for o in graded.outcomes),
    )


def summarize(
    chunks: list[ChunkCounts], k: int, name: str, extra_ks: Sequence[int] = ()
) -> dict[str, float]:
    """Avg@k, the Pass@k curve and the no-answer share over the chunks'
    problems (in chunk order).

    Raises ValueError when the chunks hold no problem: a mean over none is no score, and logging it
    as 0 would read as a policy that solves nothing (`RunPlan.parse` refuses the config that
    leads here, ``task.heldout_size=0``, before anything runs)."""
    correct_per_problem = [f for chunk in chunks for f in chunk.correct_fraction]
    correct_counts = [c for chunk in chunks for c in chunk.correct_count]
    if not correct_per_problem:
        raise ValueError(
            f"{name}: no held-out problems to evaluate (a score over 0 problems is not 0); "
            "set task.heldout_size and eval.problems to positive sizes, or eval.problems=0 to "
            "skip the held-out evaluation"
        )
    n = len(correct_per_problem)
    metrics = {keys.evaluation(name, keys.avg_at(k)): sum(correct_per_problem) / n}
    metrics[keys.evaluation(name, "problems")] = float(n)  # as the benchmark runner logs it
    if (
        len(correct_counts) >= 2
    ):  # the standard error over problems, as the benchmark runner logs it
        estimate = avg_at_k_estimate([k] * len(correct_counts), correct_counts)
        metrics[keys.evaluation(name, keys.stderr(keys.avg_at(k)))] = estimate.stderr
    curve = pass_at_k_curve([k] * len(correct_counts), correct_counts)
    # `eval.ks` off the curve (validated k <= n), as the benchmark runner adds them
    curve.update(
        {j: mean_pass_at_k([k] * n, correct_counts, j) for j in extra_ks if j not in curve}
    )
    metrics.update({keys.evaluation(name, keys.pass_at(j)): curve[j] for j in sorted(curve)})
    no_answer = sum(chunk.no_answer for chunk in chunks)
    metrics[keys.evaluation(name, "no_answer_frac")] = no_answer / (n * k)
    return metrics


def heldout_metrics(
    engine: RolloutEngine,
    grader: Grader,
    problems: list[Problem],
    sampling: SamplingSettings,
    name: str,
    batch_prompts: int = 64,
    dist: DistEnv | None = None,
    extra_ks: Sequence[int] = (),
) -> dict[str, float]:
    """Generate `sampling.n` answers per problem, `batch_prompts` problems per
    generate call, and grade them.

    With `dist` sharded, chunk c is generated and graded by rank c % W and every rank gets every
    chunk (a collective: every rank calls this, even when there are fewer chunks than ranks).

    Returns:
        {eval/<name>/avg_at_n, eval/<name>/pass_at_k for k = 1, 2, 4, ..., n and `extra_ks`
        (`eval.ks`), eval/<name>/no_answer_frac, ...}, the same on every rank.
    """
    chunks = [problems[i : i + batch_prompts] for i in range(0, len(problems), batch_prompts)]

    def chunk_sampling(c: int) -> SamplingSettings:
        """Chunk c's seed: stream `heldout` of (c,) of `sampling.seed` (quadrants/seeds.py), so no
        two samples of the split share a seed, also with vLLM, where equal seeds draw equal noise
        (one seed for every chunk coupled problem r of each chunk with problem r of every other)."""
        if sampling.seed is None:
            return sampling
        return replace(sampling, seed=seeds.heldout(sampling.seed, c))

    counts = run_dealt(
        len(chunks),
        lambda c: grade_chunk(engine, grader, chunks[c], chunk_sampling(c)),
        dist or DistEnv(),
    )
    return summarize(counts, sampling.n, name, extra_ks)
