"""Graded evaluation results: per-problem (n, c) tables, their metrics, and their files.

A benchmark's result is one `ProblemResult` per problem: n samples, c correct, and how the other
n - c failed (wrong answer, no extractable answer, grader timeout, grader error), plus the graded
samples themselves. Everything reported is a function of the (n, c) table (`benchmark_metrics`), and
the table is written next to the samples (`write_benchmark`), so any k, interval or aggregate can
be recomputed later from the files alone (`read_counts`), without generating again.

Metric keys (built in `quadrants.tracking.keys`) for benchmark ``b`` with n samples per problem:
``eval/b/avg_at_<n>``, ``eval/b/pass_at_<k>`` for k = 1, 2, 4, ..., n (and any extra k asked for),
each with ``..._stderr``, the standard error of the mean over problems
(`metrics.standard_error_estimate`; a 95 % interval is value +/- 1.96 stderr); ``eval/b/problems``,
``eval/b/samples``; the outcome counts ``eval/b/<outcome>_count`` and fractions
``eval/b/<outcome>_frac`` for no_answer, timeout and error; ``eval/b/truncated_frac`` (answers cut
at max_new_tokens); and ``eval/avg``, the paper's column (mean of the six Avg@k), when all six
benchmarks were evaluated.

Out-of-domain benchmarks (problems graded by answer rules, `quadrants.tasks.ood`) add the chance
level, ``eval/b/chance`` (the Avg@n of uniform guessing) and ``eval/b/chance_pass_at_<n>``; per
group (MMLU-Pro domain, GraphWiz task) the same metrics under ``eval/b/<group_kind>/<group>/...``;
and ``eval/ood_avg``, the mean Avg@n of the out-of-domain benchmarks evaluated.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quadrants.eval.metrics import (
    OOD_BENCHMARKS,
    PAPER_BENCHMARKS,
    avg_at_k_estimate,
    chance_pass_at_k,
    curve_ks,
    ood_avg,
    paper_avg,
    pass_at_k_estimate,
)
from quadrants.tracking import keys

__all__ = [
    "COUNT_COLUMNS",
    "FAILURE_OUTCOMES",
    "BenchmarkResult",
    "ProblemResult",
    "SampleResult",
    "benchmark_metrics",
    "read_counts",
    "suite_metrics",
    "write_benchmark",
]

FAILURE_OUTCOMES = ("no_answer", "timeout", "error")
"""Outcomes counted apart from plain wrong answers (`quadrants.rewards.grader.Outcome` values)."""

COUNT_COLUMNS = (
    "problem_id",
    "n",
    "c",
    "wrong",
    "no_answer",
    "timeout",
    "error",
    "truncated",
    "gold",
    "group",
    "chance",
)


@dataclass(frozen=True)
class SampleResult:
    """One graded answer: the decoded response, its grader outcome, and whether EOS ended it."""

    response: str
    outcome: str
    finished: bool
    num_tokens: int


@dataclass(frozen=True)
class ProblemResult:
    """One problem: its id, prompt, gold and graded samples (n = len(samples)); for a problem graded
    by an answer rule also its chance level, the rule's description and its group."""

    problem_id: str
    prompt: str
    gold: str
    samples: tuple[SampleResult, ...]
    group: str | None = None
    chance: float | None = None
    rule: Mapping[str, Any] | None = None

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def c(self) -> int:
        return self.count("correct")

    def count(self, outcome: str) -> int:
        return sum(sample.outcome == outcome for sample in self.samples)

    @property
    def truncated(self) -> int:
        return sum(not sample.finished for sample in self.samples)


@dataclass(frozen=True)
class BenchmarkResult:
    """Every problem of one benchmark, in order, each with the same n; `group_kind` names what the
    problems' groups are ("domain", "task") when they have groups."""

    name: str
    problems: tuple[ProblemResult, ...]
    group_kind: str | None = None
    whole: bool = True  # False: ``eval.limit`` left out some of the benchmark's problems

    @property
    def samples(self) -> int:
        return min(problem.n for problem in self.problems)

    def counts(self) -> tuple[list[int], list[int]]:
        """(ns, cs), one entry per problem."""
        return [p.n for p in self.problems], [p.c for p in self.problems]

    @property
    def chance(self) -> float | None:
        """Avg@n of uniform guessing (the mean chance over problems); None unless
        every problem has one."""
        if not self.problems or any(p.chance is None for p in self.problems):
            return None
        return sum(p.chance for p in self.problems) / len(self.problems)  # type: ignore[misc]

    def groups(self) -> dict[str, BenchmarkResult]:
        """Group -> the benchmark restricted to that group's problems, in order
        of first appearance."""
        found: dict[str, list[ProblemResult]] = {}
        for problem in self.problems:
            if problem.group is not None:
                found.setdefault(problem.group, []).append(problem)
        return {
            group: BenchmarkResult(self.name, tuple(members)) for group, members in found.items()
        }


def benchmark_metrics(
    name: str,
    ns: Sequence[int],
    cs: Sequence[int],
    *,
    extra_ks: Sequence[int] = (),
    confidence: float = 0.95,
) -> dict[str, float]:
    """Avg@n and Pass@k (k = 1, 2, 4, ..., n and `extra_ks`) with standard
    errors, from (n, c) alone.

    n is the smallest n_i (every problem has the same n in our runs). Returns metric key -> value.
    """
    n = min(ns)
    metrics: dict[str, float] = {}
    avg = avg_at_k_estimate(ns, cs, confidence)
    metrics[keys.evaluation(name, keys.avg_at(n))] = avg.value
    metrics[keys.evaluation(name, keys.stderr(keys.avg_at(n)))] = avg.stderr
    for k in sorted({*curve_ks(n), *extra_ks}):
        estimate = pass_at_k_estimate(ns, cs, k, confidence)
        metrics[keys.evaluation(name, keys.pass_at(k))] = estimate.value
        metrics[keys.evaluation(name, keys.stderr(keys.pass_at(k)))] = estimate.stderr
    metrics[keys.evaluation(name, "problems")] = float(len(ns))
    metrics[keys.evaluation(name, "samples")] = float(n)
    return metrics


def _outcome_metrics(result: BenchmarkResult) -> dict[str, float]:
    total = sum(p.n for p in result.problems)
    metrics = {}
    for outcome in FAILURE_OUTCOMES:
        count = sum(p.count(outcome) for p in result.problems)
        metrics[keys.evaluation(result.name, f"{outcome}_count")] = float(count)
        metrics[keys.evaluation(result.name, f"{outcome}_frac")] = count / total
    metrics[keys.evaluation(result.name, "truncated_frac")] = (
        sum(p.truncated for p in result.problems) / total
    )
    return metrics


def _chance_metrics(name: str, result: BenchmarkResult) -> dict[str, float]:
    chances = [p.chance for p in result.problems if p.chance is not None]
    if len(chances) != len(result.problems) or not chances:
        return {}
    return {
        keys.evaluation(name, "chance"): result.chance,  # type: ignore[dict-item]
        keys.evaluation(name, f"chance_{keys.pass_at(result.samples)}"): chance_pass_at_k(
            chances, result.samples
        ),
    }


def suite_metrics(
    results: Sequence[BenchmarkResult], *, extra_ks: Sequence[int] = (), confidence: float = 0.95
) -> dict[str, float]:
    """Every benchmark's metrics and outcome counts, its chance level and per-group metrics when it
    has them, plus ``eval/avg`` when the paper's six are all there and ``eval/ood_avg`` when any
    out-of-domain benchmark is, each only over whole benchmarks: the paper's column averages over
    all problems, so a mean over an ``eval.limit`` subset is not logged under its key."""
    metrics: dict[str, float] = {}
    avg_by_name: dict[str, float] = {}
    for result in results:
        ns, cs = result.counts()
        metrics.update(
            benchmark_metrics(result.name, ns, cs, extra_ks=extra_ks, confidence=confidence)
        )
        metrics.update(_outcome_metrics(result))
        metrics.update(_chance_metrics(result.name, result))
        for group, part in result.groups().items():
            name = keys.eval_group(result.name, result.group_kind or "group", group)
            ks = [k for k in extra_ks if k <= part.samples]
            metrics.update(
                benchmark_metrics(name, *part.counts(), extra_ks=ks, confidence=confidence)
            )
            metrics.update(_chance_metrics(name, part))
        if result.whole:
            avg_by_name[result.name] = metrics[
                keys.evaluation(result.name, keys.avg_at(result.samples))
            ]
    if all(name in avg_by_name for name in PAPER_BENCHMARKS):
        metrics[keys.paper_avg()] = paper_avg(avg_by_name)
    if any(name in avg_by_name for name in OOD_BENCHMARKS):
        metrics[keys.ood_avg()] = ood_avg(avg_by_name)
    return metrics


def write_benchmark(result: BenchmarkResult, directory: Path) -> list[Path]:
    """Write ``counts.csv`` (one row per problem: n, c and the failure counts), ``counts.json`` (the
    same plus prompts) and ``samples.jsonl`` (every graded answer) under ``directory/<name>/``."""
    out = Path(directory) / result.name
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "problem_id": p.problem_id,
            "n": p.n,
            "c": p.c,
            "wrong": p.count("wrong"),
            **{outcome: p.count(outcome) for outcome in FAILURE_OUTCOMES},
            "truncated": p.truncated,
            "gold": p.gold,
            "group": p.group or "",
            "chance": "" if p.chance is None else p.chance,
        }
        for p in result.problems
    ]
    with (out / "counts.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COUNT_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = [
        {**row, "prompt": p.prompt, **({"rule": dict(p.rule)} if p.rule else {})}
        for row, p in zip(rows, result.problems)
    ]
    (out / "counts.json").write_text(
        json.dumps({"benchmark": result.name, "problems": table}, indent=1)
    )
    with (out / "samples.jsonl").open("w", encoding="utf-8") as handle:
        for p in result.problems:
            for index, sample in enumerate(p.samples):
                record = {
                    "problem_id": p.problem_id,
                    "sample": index,
                    "gold": p.gold,
                    **asdict(sample),
                }
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return [out / "counts.csv", out / "counts.json", out / "samples.jsonl"]


def read_counts(path: Path) -> tuple[list[int], list[int]]:
    """(ns, cs) from a ``counts.csv`` written by `write_benchmark` (recompute any k from them)."""
    with Path(path).open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [int(row["n"]) for row in rows], [int(row["c"]) for row in rows]
