"""Run an evaluation: sample n answers per problem, grade them, report Avg@n
/ Pass@k, keep the files.

The same `run_suite` serves both callers:
- training (`in_training.evaluate_policy`, when ``eval.benchmarks`` is set): the live policy, at
  step 0, every ``eval.every`` steps and at the end; tables and samples go to
  ``<run_dir>/eval/step_<N>/`` and to the run's MLflow artifacts under ``eval/step_<N>``;
- `python -m quadrants.evaluate` (`quadrants.launch.evaluate.run_evaluation`): a checkpoint, a model
  directory, the embedded ``tiny`` or a hub id, in its own MLflow run (same store as training; its
  tags and parameters: `eval_tags`, `eval_params`), metrics at the checkpoint's step, files under
  ``<outputs>/<study>/eval/<target>/<time>/``.

Sampling is the config's (``eval.temperature``, ``eval.top_p``, ``eval.max_new_tokens``); each
generate call holds about ``eval.batch_size`` sequences (prompts x n; unset: a rank's whole share
of the benchmark when the engine schedules its own batches, as vLLM does: eval/sizing.py) and is
seeded (`call_seeds`: no two samples of a problem share a seed), so a run is reproducible.
Metrics and files are described in `quadrants.eval.results`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quadrants import seeds
from quadrants.distributed.collectives import DistEnv, dealt, run_dealt
from quadrants.eval.results import (
    FAILURE_OUTCOMES,
    BenchmarkResult,
    ProblemResult,
    SampleResult,
    suite_metrics,
    write_benchmark,
)
from quadrants.eval.sizing import call_size
from quadrants.eval.suite import BenchmarkPlan, build_plans
from quadrants.eval.target import EvalTarget
from quadrants.progress import Progress
from quadrants.rewards.grader import Grader
from quadrants.rewards.rules import AnswerRule
from quadrants.rollout.engine import RolloutEngine, SamplingSettings
from quadrants.tasks.base import Problem
from quadrants.tracking import keys
from quadrants.tracking.base import Tracker

if TYPE_CHECKING:  # the training stack (but for its collectives) is not imported at run time
    from quadrants.config import EvalConfig, PromptConfig, TaskConfig

__all__ = [
    "EvalSettings",
    "SuiteReport",
    "evaluate_in_training",
    "eval_params",
    "eval_tags",
    "format_table",
    "run_suite",
    "too_long_params",
]

log = logging.getLogger("quadrants.eval")


@dataclass(frozen=True)
class EvalSettings:
    """What an evaluation reads of a run: the `eval`, `task` and `prompt` sections, the run `seed`,
    the `run_dir` an in-training evaluation writes under (None: no files) and the `study` an
    evaluation command's run is tagged with. The caller hands them from its run plan
    (`EvalSettings.of`)."""

    eval: EvalConfig
    task: TaskConfig
    prompt: PromptConfig
    seed: int
    run_dir: str | None = None
    study: str = ""

    @classmethod
    def of(cls, plan: Any) -> EvalSettings:
        """The settings of `plan`: a `RunPlan` (quadrants/run_plan, above this layer, which takes
        its sections), or anything with the same section attributes."""
        return cls(
            eval=plan.eval,
            task=plan.task,
            prompt=plan.prompt,
            seed=plan.seed,
            run_dir=plan.run_dir,
            study=plan.study,
        )


@dataclass
class SuiteReport:
    """What an evaluation produced: metric key -> value, per-benchmark results, written files, and
    per benchmark how many problems were left out for a prompt over ``task.max_prompt_tokens``
    (`BenchmarkPlan.too_long`)."""

    metrics: dict[str, float] = field(default_factory=dict)
    results: list[BenchmarkResult] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    too_long: dict[str, int] = field(default_factory=dict)


def too_long_params(report: SuiteReport) -> dict[str, int]:
    """``eval.too_long.<benchmark>``: the problems each benchmark lost to the prompt-length limit
    (eval/suite.py `within_prompt_limit`), as run params, the way the training task's own count
    reaches the run as ``task.too_long`` (run/records.py `log_task`). The plan is the same at
    every evaluation of a run, so logging them again logs the same values (kept once by
    MLflow)."""
    return {f"eval.too_long.{name}": count for name, count in report.too_long.items()}


def sampling_for(eval_cfg: EvalConfig, n: int, seed: int) -> SamplingSettings:
    return SamplingSettings(
        n=n,
        temperature=eval_cfg.temperature,
        top_p=eval_cfg.top_p,
        max_new_tokens=eval_cfg.max_new_tokens,
        seed=seed,
    )


@dataclass(frozen=True)
class GenerateCall:
    """One generate call of a benchmark: problems [start, stop) of the plan,
    `samples` answers each."""

    start: int
    stop: int
    samples: int


def generate_calls(problems: int, samples: int, batch_size: int) -> list[GenerateCall]:
    """The generate calls of `problems` x `samples` answers, in order, each at most `batch_size`
    sequences: several prompts x n when n is small, or one prompt's n samples split over several
    calls when n is larger (pass@256)."""
    draw = min(samples, batch_size)  # samples of one prompt per call
    per_call = max(1, batch_size // draw)  # prompts per call
    return [
        GenerateCall(start, min(start + per_call, problems), min(draw, samples - first))
        for start in range(0, problems, per_call)
        for first in range(0, samples, draw)
    ]


def call_seeds(calls: list[GenerateCall], seed: int, benchmark: int) -> list[int]:
    """The sampling seed of each of `calls` of the `benchmark`-th benchmark: stream `evaluation` of
    (benchmark, call) of the run seed (quadrants/seeds.py). The HF engine seeds torch once per call;
    vLLM gives each request of a call a seed of its own, and its samples the next values
    (seeds.vllm_request), so no two samples of a benchmark share a seed: not those of one problem
    split over several calls (n > ``eval.batch_size``), nor those of two problems (equal seeds draw
    equal noise in vLLM, which couples the two problems' answers).
    """
    return [seeds.evaluation(seed, benchmark, i) for i in range(len(calls))]


def generate_and_grade(
    engine: RolloutEngine,
    grader: Grader,
    problems: tuple[Problem, ...],
    sampling: SamplingSettings,
    rules: tuple[AnswerRule, ...] = (),
) -> list[tuple[int, SampleResult]]:
    """One generate call: (index of the problem in `problems`, its graded sample) per sequence, a
    prompt's samples consecutive. With `rules` (one per problem) each answer is graded by its
    problem's rule, in this process (rules are pure Python and bounded); else by `grader`."""
    rollouts = engine.generate([p.prompt for p in problems], sampling)
    group_ids = rollouts.group_ids.tolist()  # [B]
    if rules:
        outcomes = [rules[g].grade(text) for g, text in zip(group_ids, rollouts.texts)]
    else:
        outcomes = grader.grade(rollouts.texts, [problems[g].answer for g in group_ids]).outcomes
    lengths = rollouts.response_mask.sum(-1).tolist()  # [B]
    finished = rollouts.finished.tolist()  # [B]
    return [
        (
            group,
            SampleResult(rollouts.texts[b], outcomes[b].value, bool(finished[b]), int(lengths[b])),
        )
        for b, group in enumerate(group_ids)
    ]


def grade_benchmark(
    engine: RolloutEngine,
    grader: Grader,
    plan: BenchmarkPlan,
    eval_cfg: EvalConfig,
    seed: int,
    dist: DistEnv | None = None,
    index: int = 0,
) -> BenchmarkResult:
    """Generate ``plan.samples`` answers for every problem of `plan` and grade them.

    A generate call holds at most ``eval.batch_size`` sequences, or a rank's whole share when that
    is unset and the engine schedules its own batches (eval/sizing.py; `generate_calls`), seeded
    by `call_seeds` of the run `seed` and the benchmark's `index` in the suite (distinct seeds for
    all samples of a problem, also with vLLM). With `dist` sharded, call i is made by rank i % W
    and every rank gets every call's samples (a collective: every rank calls this), so the result
    is the one-process result.
    """
    dist = dist or DistEnv()
    size = call_size(
        engine,
        [p.prompt for p in plan.problems],
        eval_cfg.batch_size,
        plan.samples,
        dist,
    )
    calls = generate_calls(len(plan.problems), plan.samples, size)
    call_seed = call_seeds(calls, seed, index)
    bar = Progress(
        total=len(dealt(len(calls), dist)),
        desc=f"eval {plan.name}",
        unit="batch",
        logger=log,
        every=10 if dist.is_main else None,  # one rank's lines (its share of the calls) suffice
        leave=False,
    )

    def work(i: int) -> list[tuple[int, SampleResult]]:
        call = calls[i]
        drawn = generate_and_grade(
            engine,
            grader,
            plan.problems[call.start : call.stop],
            sampling_for(eval_cfg, call.samples, call_seed[i]),
            plan.rules[call.start : call.stop],
        )
        bar.update()
        return drawn

    drawn = run_dealt(len(calls), work, dist)
    bar.close()
    samples: list[list[SampleResult]] = [[] for _ in plan.problems]
    for call, results in zip(calls, drawn):
        for group, sample in results:
            samples[call.start + group].append(sample)
    problems = tuple(
        ProblemResult(p.id, p.prompt, p.answer, tuple(s)) for p, s in zip(plan.problems, samples)
    )
    if plan.rules:
        problems = tuple(
            replace(p, chance=rule.chance, rule=rule.describe())
            for p, rule in zip(problems, plan.rules)
        )
    if plan.groups:
        problems = tuple(replace(p, group=group) for p, group in zip(problems, plan.groups))
    return BenchmarkResult(
        name=plan.name, problems=problems, group_kind=plan.group_kind, whole=plan.whole
    )


def run_suite(
    engine: RolloutEngine,
    grader: Grader,
    eval_cfg: EvalConfig,
    task_cfg: TaskConfig,
    *,
    tokenizer: Any,
    seed: int,
    out_dir: Path | None = None,
    dist: DistEnv | None = None,
    prompt_cfg: PromptConfig | None = None,
) -> SuiteReport:
    """Evaluate every benchmark of the config; write its files under `out_dir` when given.

    With `dist` sharded every rank calls this (the generate calls are dealt, see `grade_benchmark`)
    and every rank gets the full report; give `out_dir` on one rank only."""
    started = time.perf_counter()
    report = SuiteReport()
    for index, plan in enumerate(build_plans(eval_cfg, task_cfg, tokenizer, prompt_cfg)):
        result = grade_benchmark(engine, grader, plan, eval_cfg, seed=seed, dist=dist, index=index)
        report.results.append(result)
        report.too_long[plan.name] = plan.too_long
        if out_dir is not None:
            report.files.extend(write_benchmark(result, out_dir))
    report.metrics = suite_metrics(
        report.results, extra_ks=list(eval_cfg.ks), confidence=eval_cfg.confidence
    )
    report.seconds = time.perf_counter() - started
    if out_dir is not None:
        summary = Path(out_dir) / "metrics.json"
        summary.write_text(json.dumps(report.metrics, indent=1, sort_keys=True))
        report.files.append(summary)
    return report


def evaluate_in_training(
    engine: RolloutEngine,
    grader: Grader,
    tokenizer: Any,
    settings: EvalSettings,
    dist: DistEnv,
    step: int,
    tracker: Tracker | None = None,
) -> dict[str, float]:
    """The configured benchmarks on the live policy (`eval.in_training.evaluate_policy` calls this).

    Files go to ``<run_dir>/eval/step_<step>/`` and, with a tracker, to the run's artifacts. Under
    torch.distributed every rank calls this and generates its share of the calls (`dist`); rank 0
    writes the files and returns the metrics, the other ranks return {}.
    """
    is_main = dist.is_main
    run_dir = settings.run_dir
    out_dir = Path(run_dir) / "eval" / f"step_{step:07d}" if run_dir and is_main else None
    report = run_suite(
        engine,
        grader,
        settings.eval,
        settings.task,
        tokenizer=tokenizer,
        seed=settings.seed,
        prompt_cfg=settings.prompt,
        out_dir=out_dir,
        dist=dist,
    )
    if not is_main:
        return {}
    if tracker is not None:
        tracker.log_params(too_long_params(report))
    if out_dir is not None and tracker is not None:
        tracker.log_artifact(out_dir, f"eval/step_{step:07d}")
    log.info("step %d evaluation (%.1f s):\n%s", step, report.seconds, format_table(report))
    return report.metrics


def format_table(report: SuiteReport) -> str:
    """One line per benchmark: problems, n, Avg@n +/- stderr, Pass@1 and Pass@n, the chance level of
    Avg@n and Pass@n (uniform guessing; "-" where answers are not guessable from a list), failure
    counts; then one indented line per group (MMLU-Pro domain, GraphWiz task)
    of grouped benchmarks."""
    lines = [
        f"{'benchmark':<28}{'problems':>9}{'n':>5}{'avg@n':>8}{'+/-se':>7}{'pass@n':>8}{'chance':>8}"
        f"{'chance@n':>9}{'no_answer':>10}{'timeout':>8}{'error':>6}{'truncated':>10}"
    ]
    m = report.metrics
    for result in report.results:
        lines.append(
            _table_line(
                m, result.name, result.name, len(result.problems), result.samples, counts=True
            )
        )
        for group, part in result.groups().items():
            name = keys.eval_group(result.name, result.group_kind or "group", group)
            lines.append(
                _table_line(
                    m,
                    name,
                    f"  {result.group_kind or 'group'} {group}",
                    len(part.problems),
                    result.samples,
                    counts=False,
                )
            )
    if keys.paper_avg() in m:
        lines.append(f"paper avg column (mean of the six Avg@k): {m[keys.paper_avg()]:.4f}")
    partial = [r.name for r in report.results if not r.whole]
    if partial:
        lines.append(
            f"eval.limit: {', '.join(partial)} evaluated on their first problems only; no avg "
            "column counts them (the paper's columns average whole benchmarks)"
        )
    if keys.ood_avg() in m:
        lines.append(
            f"ood avg column (mean Avg@k of the out-of-domain benchmarks): {m[keys.ood_avg()]:.4f}"
        )
    if any(keys.evaluation(r.name, "chance") in m for r in report.results):
        lines.append(
            "chance = Avg@n of uniform guessing (25 % GPQA, 10 % MMLU-Pro, 50 % yes/no tasks), "
            "chance@n = its Pass@n: scores near them carry no signal"
        )
    return "\n".join(lines)


def _table_line(
    m: dict[str, float], name: str, label: str, problems: int, n: int, *, counts: bool
) -> str:
    def chance(metric: str) -> str:
        key = keys.evaluation(name, metric)
        return f"{m[key]:.3f}" if key in m else "-"

    line = (
        f"{label:<28}{problems:>9}{n:>5}{m[keys.evaluation(name, keys.avg_at(n))]:>8.3f}"
        f"{m[keys.evaluation(name, keys.stderr(keys.avg_at(n)))]:>7.3f}"
        f"{m[keys.evaluation(name, keys.pass_at(n))]:>8.3f}{chance('chance'):>8}"
        f"{chance(f'chance_{keys.pass_at(n)}'):>9}"
    )
    if counts:
        line += "".join(
            f"{int(m[keys.evaluation(name, f'{o}_count')]):>{w}}"
            for o, w in zip(FAILURE_OUTCOMES, (10, 8, 6))
        )
        line += f"{m[keys.evaluation(name, 'truncated_frac')]:>10.2f}"
    return line


# --- python -m quadrants.evaluate (launch/evaluate.py): its run's tags and parameters -----------


def eval_tags(settings: EvalSettings, target: EvalTarget) -> dict[str, str]:
    tags = {
        "quadrants.study": settings.study,
        "quadrants.role": "eval",
        "quadrants.eval_target": settings.eval.target or target.model,
        "quadrants.eval_kind": target.kind,
        "model": target.model,
        "task": settings.task.name,
    }
    if target.kind == "checkpoint":
        tags["quadrants.checkpoint_step"] = str(target.step)
        run = target.run_config or {}
        for key in ("quadrants.sweep_id", "seed", "objective", "quadrant"):
            value = {
                "quadrants.sweep_id": run.get("sweep_id"),
                "seed": run.get("seed"),
                "objective": (run.get("objective") or {}).get("name"),
                "quadrant": (run.get("quadrant") or {}).get("keep"),
            }[key]
            if value is not None:
                tags[key] = str(value)
    if target.source_run_id:
        tags["quadrants.source_run_id"] = target.source_run_id
    return tags


def eval_params(settings: EvalSettings, target: EvalTarget) -> dict[str, Any]:
    params: dict[str, Any] = {
        "target": settings.eval.target or target.model,
        "model": target.model,
        "checkpoint_step": target.step,
        "eval.temperature": settings.eval.temperature,
        "eval.top_p": settings.eval.top_p,
        "eval.max_new_tokens": settings.eval.max_new_tokens,
        "eval.limit": settings.eval.limit,
        "prompt.format": settings.prompt.format,
        "prompt.instruction": settings.prompt.instruction,
        "eval.source": settings.eval.source,
        "eval.ks": list(settings.eval.ks),
        "seed": settings.seed,
    }
    from quadrants.eval.suite import suite

    params.update(
        {f"eval.benchmarks.{name}": n for name, n in suite(settings.eval, settings.task).items()}
    )
    return params
