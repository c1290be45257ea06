"""How the runner splits generation into calls, on the real tiny-random model and the real grader."""

from __future__ import annotations

import pytest
import torch

from quadrants import seeds
from quadrants.config import EvalConfig
from quadrants.eval.generation import TextEngine
from quadrants.eval.runner import GenerateCall, call_seeds, generate_calls, grade_benchmark
from quadrants.eval.suite import BenchmarkPlan
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
        # by the stream `evaluation` of (benchmark 0, call i) of the run seed 100
        (10, [(2, 5, 0), (1, 5, 1)]),
        # n = 5 > 4: one prompt per call, its samples as 4 + 1 -> 2 calls per problem, 6 in all
        (4, [(1, 4, 0), (1, 1, 1), (1, 4, 2), (1, 1, 3), (1, 4, 4), (1, 1, 5)]),
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
    assert engine.calls == [
        (prompts, n, seeds.evaluation(100, 0, call)) for prompts, n, call in expected_calls
    ]
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


def vllm_seeds_per_problem(problems: int, calls: list[GenerateCall], call_seed: list[int]):
    """Per problem, the seed vLLM derives for each of its samples: sample j of the r-th prompt of a
    call seeded s gets seeds.vllm_sample(seeds.vllm_request(s, r, n), j) (quadrants/rollout/vllm.py,
    vLLM's own offset j: vllm/v1/engine/parallel_sampling.py)."""
    per_problem: list[list[int]] = [[] for _ in range(problems)]
    for call, seed in zip(calls, call_seed):
        for r, problem in enumerate(range(call.start, call.stop)):
            request = seeds.vllm_request(seed, r, call.samples)
            per_problem[problem].extend(seeds.vllm_sample(request, j) for j in range(call.samples))
    return per_problem


@pytest.mark.parametrize(
    ("samples", "batch_size"),
    [
        # 1 prompt per call, 256 = 4 x 64: problem p is calls 4p..4p+3
        (256, 64),
        # 1 prompt per call, 128 = 2 x 64: calls 2p, 2p + 1
        (128, 64),
        # 64 // 32 = 2 prompts per call, each problem in one call
        (32, 64),
        # 10 // 5 = 2 prompts per call
        (5, 10),
        # 1 prompt per call, 5 = 2 + 2 + 1: calls 3p..3p+2
        (5, 2),
    ],
)
def test_no_two_samples_of_a_problem_share_a_vllm_seed(samples, batch_size):
    calls = generate_calls(3, samples, batch_size)
    per_problem = vllm_seeds_per_problem(3, calls, call_seeds(calls, seed=1000, benchmark=0))
    for drawn in per_problem:
        assert len(drawn) == samples
        assert len(set(drawn)) == samples  # distinct
    # nor two samples of different problems (equal seeds couple their draws in vLLM)
    assert len({s for drawn in per_problem for s in drawn}) == 3 * samples


def test_call_seeds_are_the_evaluation_stream():
    # n = 256 in calls of 64: problem 0 is calls 0..3; call i of benchmark b is the stream
    # `evaluation` of (b, i), so another benchmark of the suite draws other seeds
    calls = generate_calls(2, 256, 64)
    assert call_seeds(calls, seed=7, benchmark=0) == [seeds.evaluation(7, 0, i) for i in range(8)]
    assert not set(call_seeds(calls, seed=7, benchmark=0)) & set(
        call_seeds(calls, seed=7, benchmark=1)
    )
    # problem 0's 256 samples have 256 distinct vLLM seeds (the old seed + i per call: 67)
    assert len(set(vllm_seeds_per_problem(2, calls, call_seeds(calls, 7, 0))[0])) == 256
    # no problems: no calls, no seeds
    assert call_seeds(generate_calls(0, 5, 10), seed=0, benchmark=0) == []


@pytest.mark.slow
def test_the_problems_the_prompt_limit_left_out_are_a_param_of_the_run(engine_and_grader, tmp_path):
    """The in-training evaluation keeps how many problems each benchmark lost to
    task.max_prompt_tokens as the run's param `eval.too_long.<benchmark>`, in a real MLflow store.
    The prompts are counted by the tokenizer passed in, here one token a character
    (char_tokenizer): plain prompts are the question, a newline and the 70-character INSTRUCTION,
    38 + 1 + 70 = 109, 20 + 1 + 70 = 91 and 14 + 1 + 70 = 85 tokens, so at the limit 100 gsm8k
    loses 1 of its 3 (tests/unit/eval/test_suite.py counts the same file). Two evaluations (step 0
    and 1) log the same value twice; MLflow keeps it once."""
    import json

    from mlflow.tracking import MlflowClient

    from quadrants.config import PromptConfig, RunConfig, TaskConfig
    from quadrants.distributed.collectives import DistEnv
    from quadrants.eval.runner import EvalSettings, evaluate_in_training
    from quadrants.models.tokenizer import char_tokenizer
    from quadrants.tasks.benchmarks import INSTRUCTION
    from quadrants.tracking.mlflow_tracker import MlflowTracker

    assert len(INSTRUCTION) == 70
    rows = [
        {"question": "Ann has 2 apples and buys 3. How many?", "answer": "#### 5"},  # 38 chars
        {"question": "What is 1,000 + 234?", "answer": "#### 1,234"},  # 20
        {"question": "What is 7 - 7?", "answer": "#### 0"},  # 14
    ]
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = RunConfig(
        eval=EvalConfig(benchmarks={"gsm8k": 1}, data_dir=str(tmp_path), max_new_tokens=2),
        task=TaskConfig(max_prompt_tokens=100),
        prompt=PromptConfig(format="plain"),
    )
    engine, grader = engine_and_grader
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "unit", spool_dir=tmp_path / "spool", flush_every_s=0.2)
    run_id = tracker.start()
    for step in (0, 1):
        evaluate_in_training(
            engine, grader, char_tokenizer(), EvalSettings.of(cfg), DistEnv(), step, tracker
        )
    tracker.finish("FINISHED")
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"eval.too_long.gsm8k": "1"}


@pytest.mark.slow
def test_off_a_terminal_the_evaluation_prints_a_line_every_ten_percent(engine_and_grader, capsys):
    # stderr captured by pytest is not a terminal, as in a SLURM log; nothing configures logging,
    # as in `python -m quadrants.evaluate`: the lines go to stderr
    engine, grader = engine_and_grader
    problems = tuple(ArithmeticTask().heldout(12))
    plan = BenchmarkPlan("arithmetic", problems, samples=1)
    grade_benchmark(engine, grader, plan, EvalConfig(batch_size=1, max_new_tokens=2), seed=100)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("eval ")]
    # batch size 1, n = 1: 12 calls; done * 10 // 12 = 0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9 after calls
    # 1..11, then the end: a line after calls 2, 3, 4, 5, 6, 8, 9, 10, 11 and 12 (10 lines)
    assert [line.split(" (")[0] for line in lines] == [
        f"eval arithmetic: {done}/12 batches" for done in (2, 3, 4, 5, 6, 8, 9, 10, 11, 12)
    ]
    assert all(", ETA " in line and " elapsed" in line for line in lines)
    assert "\r" not in err
