"""Reference self-check: each reference solution graded against its own gold.

A benchmark whose gold is taken from its reference solutions (Minerva: the solution's last
``\\boxed{}``) gives a free test of the grader: the full solution, graded as if a model had written
it, must be correct. Minerva's boxes are partly written as code (``4.5e33``, ``-1./3``); the loader
rewrites its golds for math-verify, and the grader must then accept the original spelling in the
solution. The same check with math-verify alone (`math_verify.parse` of the solution against the
raw boxed answer, gold first, default settings) is the baseline the grader must not fall below.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import math_verify

from quadrants.rewards.extract import last_boxed
from quadrants.rewards.grader import Grader, Outcome
from quadrants.tasks.benchmarks import default_data_dir, get_spec, load_benchmark

__all__ = ["SelfCheckReport", "reference_self_check"]


@dataclass(frozen=True)
class SelfCheckReport:
    """How many reference solutions were graded correct against their own gold.

    Attributes:
        benchmark: the benchmark name.
        num_problems: problems with a reference solution.
        grader_correct: solutions the quadrants `Grader` graded correct (against the loaded gold).
        math_verify_correct: solutions math-verify alone accepted (against the raw boxed answer).
        grader_rejected: (problem id, raw boxed answer, outcome) of every solution the grader did
            not grade correct.
    """

    benchmark: str
    num_problems: int
    grader_correct: int
    math_verify_correct: int
    grader_rejected: tuple[tuple[str, str, str], ...]

    @property
    def grader_rate(self) -> float:
        return self.grader_correct / max(1, self.num_problems)

    @property
    def math_verify_rate(self) -> float:
        return self.math_verify_correct / max(1, self.num_problems)


def _math_verify_alone(solution: str, boxed: str) -> bool:
    """math-verify with its defaults: gold ``$boxed$`` first, the whole
    solution as the prediction."""
    try:
        return bool(
            math_verify.verify(math_verify.parse(f"${boxed}$"), math_verify.parse(solution))
        )
    except BaseException as error:  # its TimeoutException is a BaseException
        if isinstance(error, KeyboardInterrupt):
            raise
        return False


def reference_self_check(
    name: str, grader: Grader, *, data_dir: str | os.PathLike[str] | None = None
) -> SelfCheckReport:
    """Grade each reference solution of benchmark `name` against its own gold (local files only).

    Args:
        name: a benchmark whose rows carry a ``solution`` (minerva, math500).
        grader: the grader under test.
        data_dir: as in `load_benchmark`.

    Must run in a main thread (math-verify alone uses its alarms).
    """
    benchmark = load_benchmark(name, data_dir=data_dir)
    path = (
        Path(data_dir if data_dir is not None else default_data_dir()) / get_spec(name).local_file
    )
    with path.open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    if len(rows) != len(benchmark.items):
        raise ValueError(f"{name}: {len(rows)} rows but {len(benchmark.items)} problems")
    cases = [
        (item.problem.id, row["solution"], item.problem.answer, last_boxed(row["solution"]) or "")
        for item, row in zip(benchmark.items, rows)
        if row.get("solution")
    ]
    graded = grader.grade(
        [solution for _, solution, _, _ in cases], [gold for _, _, gold, _ in cases]
    )
    rejected = tuple(
        (problem_id, boxed, outcome.value)
        for (problem_id, _, _, boxed), outcome in zip(cases, graded.outcomes)
        if outcome is not Outcome.correct
    )
    alone = sum(_math_verify_alone(solution, boxed) for _, solution, _, boxed in cases if boxed)
    return SelfCheckReport(
        benchmark=name,
        num_problems=len(cases),
        grader_correct=graded.counts()["correct"],
        math_verify_correct=alone,
        grader_rejected=rejected,
    )
