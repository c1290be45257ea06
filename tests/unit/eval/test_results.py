"""Metrics of an evaluation from its (n, c) table and outcome counts, by hand; the files round-trip."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from quadrants.eval.metrics import PAPER_BENCHMARKS
from quadrants.eval.results import (
    BenchmarkResult,
    ProblemResult,
    SampleResult,
    benchmark_metrics,
    read_counts,
    suite_metrics,
    write_benchmark,
)


def problem(pid: str, outcomes: list[str], finished: list[bool] | None = None) -> ProblemResult:
    finished = finished or [True] * len(outcomes)
    samples = tuple(
        SampleResult(f"answer {i}", o, f, 3) for i, (o, f) in enumerate(zip(outcomes, finished))
    )
    return ProblemResult(pid, f"prompt {pid}", "42", samples)


def test_two_problems_four_samples_by_hand():
    # c = [2, 0], n = 4.  avg@4 = (2/4 + 0) / 2 = 0.25; scores [0.5, 0] -> sample var 0.125, se = sqrt(0.125 / 2) = 0.25
    # pass@2: problem 1 = 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6, problem 2 = 0 -> 5/12
    # pass@3 (extra k): problem 1 = 1 - C(2,3)/C(4,3) = 1 -> 0.5;  pass@4 likewise 0.5, scores [1, 0] -> se 0.5
    m = benchmark_metrics("b", [4, 4], [2, 0], extra_ks=[3])
    assert m["eval/b/avg_at_4"] == pytest.approx(0.25, abs=1e-15)
    assert m["eval/b/avg_at_4_stderr"] == pytest.approx(0.25, abs=1e-15)
    assert m["eval/b/pass_at_1"] == pytest.approx(0.25, abs=1e-15)
    assert m["eval/b/pass_at_2"] == pytest.approx(5 / 12, abs=1e-15)
    assert m["eval/b/pass_at_3"] == pytest.approx(0.5, abs=1e-15)
    assert m["eval/b/pass_at_4"] == pytest.approx(0.5, abs=1e-15)
    assert m["eval/b/pass_at_4_stderr"] == pytest.approx(0.5, abs=1e-15)
    # pass@2 scores [5/6, 0]: mean 5/12, sample var 2 * (5/12)^2 = 25/72, se = sqrt(25/144) = 5/12
    assert m["eval/b/pass_at_2_stderr"] == pytest.approx(5 / 12, abs=1e-15)
    assert m["eval/b/problems"] == 2 and m["eval/b/samples"] == 4
    assert sorted(k for k in m if "pass_at" in k and "stderr" not in k) == [
        "eval/b/pass_at_1",
        "eval/b/pass_at_2",
        "eval/b/pass_at_3",
        "eval/b/pass_at_4",
    ]


def test_one_problem_has_no_standard_error():
    m = benchmark_metrics("b", [2], [1])
    assert m["eval/b/avg_at_2"] == 0.5 and math.isnan(m["eval/b/avg_at_2_stderr"])


def test_outcomes_are_counted_apart_from_wrong_answers():
    # 8 samples: 2 correct, 2 wrong, 2 no_answer, 1 timeout, 1 error; 1 cut at max_new_tokens
    result = BenchmarkResult(
        "b",
        (
            problem("b/0", ["correct", "correct", "no_answer", "timeout"]),
            problem(
                "b/1", ["wrong", "error", "no_answer", "wrong"], finished=[True, True, False, True]
            ),
        ),
    )
    m = suite_metrics([result])
    assert m["eval/b/no_answer_count"] == 2 and m["eval/b/no_answer_frac"] == 2 / 8
    assert m["eval/b/timeout_count"] == 1 and m["eval/b/timeout_frac"] == 1 / 8
    assert m["eval/b/error_count"] == 1 and m["eval/b/error_frac"] == 1 / 8
    assert m["eval/b/truncated_frac"] == 1 / 8
    assert m["eval/b/avg_at_4"] == 0.25  # (2/4 + 0/4) / 2
    assert "eval/avg" not in m  # the paper's column needs all six benchmarks


def test_paper_avg_column_is_the_mean_of_the_six_avg_at_k():
    # Avg@k of the six: 1/4, 2/4, 3/4, 4/4, 0, 1/4 (one problem each) -> mean (0.25+0.5+0.75+1+0+0.25)/6 = 2.75/6
    corrects = [1, 2, 3, 4, 0, 1]
    results = [
        BenchmarkResult(name, (problem(f"{name}/0", ["correct"] * c + ["wrong"] * (4 - c)),))
        for name, c in zip(PAPER_BENCHMARKS, corrects)
    ]
    m = suite_metrics(results)
    assert m["eval/avg"] == pytest.approx(2.75 / 6, abs=1e-15)
    assert "eval/avg" not in suite_metrics(results[:5])
    # one of the six cut by eval.limit: its own metrics are logged, the paper's column is not
    partial = suite_metrics([*results[:5], replace(results[5], whole=False)])
    assert "eval/avg" not in partial and partial[f"eval/{PAPER_BENCHMARKS[5]}/avg_at_4"] == 0.25


def test_files_hold_the_table_and_every_sample_so_metrics_can_be_recomputed(tmp_path):
    result = BenchmarkResult(
        "b",
        (
            problem("b/0", ["correct", "wrong", "correct"]),
            problem("b/1", ["no_answer", "wrong", "wrong"]),
        ),
    )
    files = write_benchmark(result, tmp_path)
    assert [f.name for f in files] == ["counts.csv", "counts.json", "samples.jsonl"]
    ns, cs = read_counts(tmp_path / "b" / "counts.csv")
    assert (ns, cs) == ([3, 3], [2, 0])
    assert benchmark_metrics("b", ns, cs) == benchmark_metrics("b", *result.counts())
    lines = [
        json.loads(line) for line in (tmp_path / "b" / "samples.jsonl").read_text().splitlines()
    ]
    assert len(lines) == 6 and lines[3] == {
        "problem_id": "b/1",
        "sample": 0,
        "gold": "42",
        "response": "answer 0",
        "outcome": "no_answer",
        "finished": True,
        "num_tokens": 3,
    }
    table = json.loads((tmp_path / "b" / "counts.json").read_text())["problems"]
    assert (
        table[1]["no_answer"] == 1 and table[1]["wrong"] == 2 and table[1]["prompt"] == "prompt b/1"
    )
