"""The in-training evaluation with its generate calls dealt to 2 gloo ranks equals the 1-process
evaluation exactly: the same samples, graded the same, so the same eval/* metrics and the same files.

The runs (tests/distributed/worker.py) train the cached tiny policy for 1 step and evaluate at
step 0 and after step 1:
- grpo_eval: the task's held-out split, 16 problems x 2 samples in 4 generate calls of 4 problems
  (eval.batch_size=8 sequences): calls 0 and 2 on rank 0, calls 1 and 3 on rank 1;
- grpo_bench: the same split as a benchmark (eval.benchmarks={arithmetic: 2}, eval.limit=8) in 4 calls
  of 2 problems (eval.batch_size=4), tables and samples written by rank 0 under run_dir/eval.
At step 1 the policies differ by float summation order only (<= 2e-5, test_equivalence.py), which
does not change a sample here (observed: identical samples).
"""

from __future__ import annotations

import pytest

CASES = ["grpo_eval", "grpo_bench"]


def eval_metrics(logged: dict, step: str) -> dict[str, float]:
    return {k: v for k, v in logged["steps"][step].items() if k.startswith("eval/")}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_two_ranks_evaluate_exactly_as_one_process(evaluated_runs, worker, case):
    one, two = (
        worker.logged(evaluated_runs / "one" / case),
        worker.logged(evaluated_runs / "two" / case),
    )
    assert (one["world_size"], two["world_size"]) == (1, 2)
    for step in ("0", "1"):
        expected = eval_metrics(one, step)
        assert "eval/arithmetic/pass_at_2" in expected
        assert eval_metrics(two, step) == expected, (case, step)  # exactly: no tolerance
    assert (
        eval_metrics(one, "0")["eval/arithmetic/avg_at_2"] > 0
    )  # the warmed-up policy solves some


@pytest.mark.slow
def test_rank_0_writes_the_benchmark_files_of_one_process(evaluated_runs):
    for step in ("step_0000000", "step_0000001"):
        one, two = (
            evaluated_runs / runs / "grpo_bench" / "eval" / step / "arithmetic"
            for runs in ("one", "two")
        )
        for name in ("counts.csv", "samples.jsonl"):
            assert (two / name).read_text() == (one / name).read_text(), (step, name)
        assert (
            len((one / "counts.csv").read_text().splitlines()) == 1 + 8
        )  # a header, one row per problem
