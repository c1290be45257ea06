"""How the runner splits generation into calls, on the real tiny-random model and the real grader."""

from __future__ import annotations

import pytest
import torch

from quadrants.config import EvalConfig
from quadrants.eval.generation import TextEngine
from quadrants.eval.plan import BenchmarkPlan
from quadrants.eval.runner import GenerateCall, generate_calls, grade_benchmark
from quadrants.models.loading import load_policy
from quadrants.rewards.grader import Grader, Outcome
from quadrants.tasks.synthetic import ArithmeticTask


class RecordingEngine(TextEngine):
    """The real engine, remembering (prompts, n, seed) of every call."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.calls: list[tuple[int, int, int]] = []

    def generate(self, prompts, sampling):
        self.calls.append((len(prompts), sampling.n, sampling.seed))
        return super().generate(prompts, sampling)


@pytest.fixture(scope="module")
def engine_and_grader():
    torch.set_num_threads(1)
    with Grader(num_workers=0) as grader:
        yield RecordingEngine(*load_policy("tiny-random", seed=0)), grader


@pytest.mark.parametrize(
    ("batch_size", "expected_calls"),
    [
        # n = 5 <= 10: 10 // 5 = 2 prompts per call -> problems {0, 1}, then {2}
        (10, [(2, 5, 100), (1, 5, 101)]),
        # n = 5 > 4: one prompt per call, its samples as 4 + 1 -> 2 calls per problem, 6 in all
        (4, [(1, 4, 100), (1, 1, 101), (1, 4, 102), (1, 1, 103), (1, 4, 104), (1, 1, 105)]),
    ],
)
def test_calls_hold_at_most_batch_size_sequences_and_every_problem_gets_n(
    engine_and_grader, batch_size, expected_calls
):
    engine, grader = engine_and_grader
    engine.calls.clear()
    problems = tuple(ArithmeticTask().heldout(3))
    plan = BenchmarkPlan("arithmetic", problems, samples=5)
    result = grade_benchmark(
        engine, grader, plan, EvalConfig(batch_size=batch_size, max_new_tokens=6), seed=100
    )
    assert engine.calls == expected_calls
    assert [p.problem_id for p in result.problems] == [p.id for p in problems]
    assert [p.n for p in result.problems] == [5, 5, 5]
    outcomes = {s.outcome for p in result.problems for s in p.samples}
    assert outcomes <= {o.value for o in Outcome}
    assert all(0 < s.num_tokens <= 6 for p in result.problems for s in p.samples)


def test_generate_calls_by_hand():
    # 3 problems x n = 5 in calls of 10 sequences: 2 prompts x 5, then 1 prompt x 5
    assert generate_calls(3, 5, 10) == [GenerateCall(0, 2, 5), GenerateCall(2, 3, 5)]
    # calls of 4 sequences: each prompt's 5 samples as 4 + 1
    assert generate_calls(2, 5, 4) == [
        GenerateCall(0, 1, 4),
        GenerateCall(0, 1, 1),
        GenerateCall(1, 2, 4),
        GenerateCall(1, 2, 1),
    ]
