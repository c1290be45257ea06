"""How the runner splits generation into calls, on the real tiny-random model and the real grader."""

from __future__ import annotations

import pytest
import torch

from quadrants.config import EvalConfig
from quadrants.eval.generation import TextEngine
from quadrants.eval.plan import BenchmarkPlan
from quadrants.eval.runner import GenerateCall, call_seeds, generate_calls, grade_benchmark
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
        # n = 5 <= 10: 10 // 5 = 2 prompts per call -> problems {0, 1}, then {2}; call i is seeded
        # 100 + 10 i (call_seeds: stride = 2 prompts x 5 samples, the most sequences of a call)
        (10, [(2, 5, 100), (1, 5, 110)]),
        # n = 5 > 4: one prompt per call, its samples as 4 + 1 -> 2 calls per problem, 6 in all;
        # stride 4, so call i is seeded 100 + 4 i (was 100 + i, whose per-sample seeds overlapped)
        (4, [(1, 4, 100), (1, 1, 104), (1, 4, 108), (1, 1, 112), (1, 4, 116), (1, 1, 120)]),
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


def vllm_seeds_per_problem(problems: int, calls: list[GenerateCall], seeds: list[int]):
    """Per problem, the seed vLLM derives for each of its samples: sample j of the r-th prompt of a
    call seeded s gets s + r * n + j, n the call's samples per prompt (quadrants/rollout/vllm.py)."""
    per_problem: list[list[int]] = [[] for _ in range(problems)]
    for call, seed in zip(calls, seeds):
        for r, problem in enumerate(range(call.start, call.stop)):
            per_problem[problem].extend(seed + r * call.samples + j for j in range(call.samples))
    return per_problem


@pytest.mark.parametrize(
    ("samples", "batch_size"),
    [
        # 1 prompt per call, 256 = 4 x 64: problem p is calls 4p..4p+3, seeds 256 p + 64 c + j,
        # c < 4, j < 64 -> 256 p .. 256 p + 255
        (256, 64),
        # 1 prompt per call, 128 = 2 x 64: calls 2p, 2p + 1, seeds 128 p .. 128 p + 127
        (128, 64),
        # 64 // 32 = 2 prompts per call, each problem in one call: seeds 64 c + 32 r + j, j < 32
        (32, 64),
        # 10 // 5 = 2 prompts per call: call c seeded 10 c, its problems 10 c + {0..4}, {5..9}
        (5, 10),
        # 1 prompt per call, 5 = 2 + 2 + 1: calls 3p..3p+2 seeded 6p, 6p + 2, 6p + 4 (stride 2)
        # -> 6p + {0, 1}, 6p + {2, 3}, 6p + {4}: five seeds
        (5, 2),
    ],
)
def test_no_two_samples_of_a_problem_share_a_vllm_seed(samples, batch_size):
    calls = generate_calls(3, samples, batch_size)
    per_problem = vllm_seeds_per_problem(3, calls, call_seeds(calls, seed=1000))
    for seeds in per_problem:
        assert len(seeds) == samples
        assert len(set(seeds)) == samples  # distinct
    # nor two samples of different problems (equal seeds couple their draws in vLLM)
    assert len({s for seeds in per_problem for s in seeds}) == 3 * samples


def test_call_seeds_by_hand():
    # n = 256 in calls of 64: stride 64, problem 0 is calls 0..3 seeded 7, 71, 135, 199, so its
    # samples get 7 .. 7 + 255; problem 1 starts at 7 + 4 * 64 = 263
    calls = generate_calls(2, 256, 64)
    assert call_seeds(calls, seed=7) == [7, 71, 135, 199, 263, 327, 391, 455]
    assert vllm_seeds_per_problem(2, calls, call_seeds(calls, seed=7))[0] == list(range(7, 263))
    # seeding call i with seed + i (the old rule) gave problem 0 the seeds 7 + i + j,
    # i < 4, j < 64 -> 7 .. 7 + 66: 67 distinct of 256
    old = vllm_seeds_per_problem(2, calls, [7 + i for i in range(len(calls))])
    assert len(set(old[0])) == 67
    # n = 5 <= 10: calls of 2 prompts x 5 then 1 x 5 -> stride 10, seeds 0, 10: the first call's
    # sequences take 0..9 (problem 0: 0..4, problem 1: 5..9), the second's 10..14
    assert call_seeds(generate_calls(3, 5, 10), seed=0) == [0, 10]
    # no problems: no calls, no seeds
    assert call_seeds(generate_calls(0, 5, 10), seed=0) == []
