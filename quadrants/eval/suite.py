"""What an evaluation will run: benchmarks, problems and samples, checked before any generation.

An evaluation is a mapping benchmark name -> n, the samples drawn per problem
(`EvalConfig.benchmarks`). A name is a benchmark of `quadrants.tasks.benchmarks` (AIME24, ...,
GSM8K, read from local files or the hub), an out-of-domain benchmark of `quadrants.tasks.ood` (GPQA,
MMLU-Pro, GraphWiz: graded by their own answer rules, with per-domain or per-task groups) or a task
of `quadrants.tasks` (its held-out split, e.g. the embedded ``arithmetic``). An empty mapping means
the run's own task, ``eval.problems`` problems x ``eval.samples``. ``eval.limit`` takes the first
problems of each benchmark, and of each group of a grouped one (so that a quick run sees every
domain and task).

`validate_eval` runs inside `RunPlan.parse` (quadrants/run_plan), so a sweep's pre-flight and
`python -m quadrants.evaluate` both reject an unknown benchmark (listing the known ones), a missing
data file (naming the path and the fix), or a k larger than a benchmark's n, before a model loads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quadrants.config_ranges import Range, check_section
from quadrants.rewards.rules import AnswerRule
from quadrants.tasks import known_tasks, make_task
from quadrants.tasks.base import Problem
from quadrants.tasks.benchmarks import (
    DATA_ENV_VAR,
    default_data_dir,
    get_spec,
    known_benchmarks,
    load_benchmark,
)
from quadrants.tasks.data_files import fetch_command, file_for_path
from quadrants.tasks.ood import get_ood_spec, known_ood_benchmarks, load_ood_benchmark, missing_note
from quadrants.tasks.prompt_length import prompt_token_counter

if TYPE_CHECKING:
    from quadrants.config import EvalConfig, PromptConfig, TaskConfig

log = logging.getLogger(__name__)

__all__ = ["BenchmarkPlan", "build_plans", "check_eval_files", "suite", "validate_eval"]


@dataclass(frozen=True)
class BenchmarkPlan:
    """One benchmark of an evaluation.

    Attributes:
        name: benchmark or task name, the `<benchmark>` of `eval/<benchmark>/...` metric keys.
        problems: the problems, in file (or held-out) order, prompts already templated.
        samples: n, answers sampled per problem.
        rules: one answer rule per problem (out-of-domain benchmarks); empty =
            the math-verify grader.
        groups: one group (domain, task) per problem; empty = no groups.
        group_kind: what the groups are ("domain", "task"), when there are groups.
        whole: False when ``eval.limit`` or the prompt-length limit left out some of a
            benchmark's problems (a task's held-out split is whole at the size the run asked for).
        too_long: problems left out because their rendered prompt is longer than
            ``task.max_prompt_tokens`` (`within_prompt_limit`).
    """

    name: str
    problems: tuple[Problem, ...]
    samples: int
    rules: tuple[AnswerRule, ...] = ()
    groups: tuple[str, ...] = ()
    group_kind: str | None = None
    whole: bool = True
    too_long: int = 0


def suite(eval_cfg: EvalConfig, task_cfg: TaskConfig) -> dict[str, int]:
    """Benchmark name -> samples per problem: `eval_cfg.benchmarks`, or the
    run's task when empty."""
    if eval_cfg.benchmarks:
        return {str(name): int(n) for name, n in eval_cfg.benchmarks.items()}
    return {task_cfg.name: int(eval_cfg.samples)}


def _data_dir(eval_cfg: EvalConfig) -> Path:
    return Path(eval_cfg.data_dir).expanduser() if eval_cfg.data_dir else default_data_dir()


def validate_eval(eval_cfg: EvalConfig, task_cfg: TaskConfig, *, files: bool = True) -> None:
    """Raise ValueError / FileNotFoundError naming the key and the fix; reads no
    data, loads no model. ``files=False`` leaves out the check that the local data files exist
    (printing a configuration needs no data; running it does)."""
    check_section(eval_cfg, "eval")  # the ranges and choices its fields declare (eval.source)
    known = [*known_benchmarks(), *known_ood_benchmarks(), *known_tasks()]
    for name, samples in suite(eval_cfg, task_cfg).items():
        if name not in known:
            raise ValueError(
                f"eval.benchmarks: unknown benchmark {name!r}; known benchmarks: {known}"
            )
        Range(1, why="samples per problem").check(f"eval.benchmarks.{name}", samples)
        too_large = [k for k in eval_cfg.ks if k > samples]
        if too_large:
            # the override that raises n, as typed: the benchmark's entry, or eval.samples when
            # eval.benchmarks is empty (the run's own task)
            fix = (
                f"eval.benchmarks.{name}={max(too_large)}"
                if eval_cfg.benchmarks
                else f"eval.samples={max(too_large)}"
            )
            kept = [k for k in eval_cfg.ks if k <= samples]
            if kept:
                fix += f", or eval.ks=[{','.join(str(k) for k in kept)}]"
            raise ValueError(
                f"eval.ks={list(eval_cfg.ks)}: pass@k needs k <= n, but {name} draws "
                f"n={samples} samples per problem. Fix: {fix}"
            )
    if files:
        check_eval_files(eval_cfg, task_cfg)


def check_eval_files(eval_cfg: EvalConfig, task_cfg: TaskConfig) -> None:
    """Raise FileNotFoundError naming the fetch command when a benchmark of a validated `eval`
    section reads local files (`eval.source=local`) that are not under its data directory."""
    if eval_cfg.source != "local":
        return
    for name in suite(eval_cfg, task_cfg):
        _check_local_files(name, _data_dir(eval_cfg))


def _local_files(name: str) -> tuple[str, ...]:
    if name in known_benchmarks():
        return (get_spec(name).local_file,)
    if name in known_ood_benchmarks():
        return get_ood_spec(name).local_files
    return ()


def _check_local_files(name: str, data_dir: Path) -> None:
    for relative in _local_files(name):
        path = data_dir / relative
        if not path.is_file():
            entry = file_for_path(relative)
            fetch = f"Run {fetch_command(entry)}; or set" if entry else "Set"
            raise FileNotFoundError(
                f"eval.benchmarks.{name}: no data file at {path}. {fetch} eval.data_dir (or "
                f"${DATA_ENV_VAR}) to the directory that holds {relative}, or use eval.source=hub "
                "on a machine with network." + missing_note(name)
            )


def _first_of_each_group(indices_by_group: dict[str, list[int]], limit: int | None) -> list[int]:
    """Indices of the first `limit` problems of every group, in file order."""
    kept = [i for members in indices_by_group.values() for i in members[:limit]]
    return sorted(kept)


def _ood_plan(
    name: str, samples: int, eval_cfg: EvalConfig, render: Callable[[str], str]
) -> BenchmarkPlan:
    """An out-of-domain benchmark: the first ``eval.limit`` problems of each group, each problem
    with its answer rule and group; `render` turns a problem's text (question and options) into its
    prompt."""
    benchmark = load_ood_benchmark(name, data_dir=_data_dir(eval_cfg), source=eval_cfg.source)  # type: ignore[arg-type]
    by_group: dict[str, list[int]] = {}
    for index, item in enumerate(benchmark.items):
        by_group.setdefault(str(item.group), []).append(index)
    items = [benchmark.items[i] for i in _first_of_each_group(by_group, eval_cfg.limit)]
    return BenchmarkPlan(
        name=name,
        problems=tuple(replace(item.problem, prompt=render(item.question)) for item in items),
        samples=samples,
        rules=tuple(item.rule for item in items if item.rule is not None),
        groups=tuple(str(item.group) for item in items),
        group_kind=get_ood_spec(name).group_kind,
        whole=len(items) == len(benchmark.items),
    )


def build_plans(
    eval_cfg: EvalConfig,
    task_cfg: TaskConfig,
    tokenizer: Any | None = None,
    prompt_cfg: PromptConfig | None = None,
) -> list[BenchmarkPlan]:
    """Load every benchmark of the suite (the first `eval.limit` problems of
    each), prompts rendered.

    Args:
        eval_cfg: the evaluation settings (validated by `validate_eval`).
        task_cfg: the run's task (the default suite; its params when a benchmark names it).
        tokenizer: the policy's tokenizer (chat templates).
        prompt_cfg: the run's prompt format (`prompt.format`, `prompt.instruction`), the one
            training uses: every prompt goes through `tasks.prompts.render_prompt`. None = ``auto``:
            a task's own format (raw for the embedded world), else the chat template if the
            tokenizer has one, else plain.
    """
    from quadrants.tasks.prompts import make_renderer

    validate_eval(eval_cfg, task_cfg)
    prompt_format = prompt_cfg.format if prompt_cfg is not None else "auto"
    instruction = prompt_cfg.instruction if prompt_cfg is not None else None
    plans = []
    for name, samples in suite(eval_cfg, task_cfg).items():
        if name in known_ood_benchmarks():
            # the benchmark's own instruction (the letter of the option, for multiple choice) unless
            # the run sets prompt.instruction
            own = get_ood_spec(name).instruction if instruction is None else instruction
            plans.append(
                _ood_plan(
                    name,
                    samples,
                    eval_cfg,
                    make_renderer(prompt_format, tokenizer=tokenizer, instruction=own),
                )
            )
            continue
        if name in known_benchmarks():
            render = make_renderer(prompt_format, tokenizer=tokenizer, instruction=instruction)
            benchmark = load_benchmark(name, data_dir=_data_dir(eval_cfg), source=eval_cfg.source)  # type: ignore[arg-type]
            problems = [
                replace(item.problem, prompt=render(item.question))
                for item in benchmark.items[: eval_cfg.limit]
            ]
            whole = len(problems) == len(benchmark.items)
        else:
            params = dict(task_cfg.params) if name == task_cfg.name else {}
            asked = eval_cfg.problems if not eval_cfg.benchmarks else task_cfg.heldout_size
            count = asked if eval_cfg.limit is None else min(asked, eval_cfg.limit)
            task = make_task(name, max(count, task_cfg.heldout_size), params)
            render = make_renderer(
                prompt_format,
                tokenizer=tokenizer,
                instruction=instruction,
                task_format=getattr(task, "prompt_format", None),
            )
            problems = [
                replace(problem, prompt=render(problem.prompt)) for problem in task.heldout(count)
            ]
            whole = count == asked
        plans.append(
            BenchmarkPlan(name=name, problems=tuple(problems), samples=samples, whole=whole)
        )
    if tokenizer is None:
        return plans
    count_tokens = prompt_token_counter(tokenizer)
    return [within_prompt_limit(plan, count_tokens, task_cfg.max_prompt_tokens) for plan in plans]


def within_prompt_limit(
    plan: BenchmarkPlan, count_tokens: Callable[[str], int], max_tokens: int
) -> BenchmarkPlan:
    """`plan` without the problems whose rendered prompt is longer than `max_tokens` tokens
    (`task.max_prompt_tokens`, as training's tasks are cut: tasks/prompt_length.py): the engine's
    `max_model_len` is that limit plus the longest response, so under vLLM a longer evaluation
    prompt would be refused on one rank while the others wait in the next collective. How many
    were left out is logged and kept (`too_long`; the run's param `eval.too_long.<benchmark>`:
    eval/runner.py `too_long_params`); a benchmark that lost any is not whole."""
    fits = [count_tokens(problem.prompt) <= max_tokens for problem in plan.problems]
    keep = [i for i, ok in enumerate(fits) if ok]
    dropped = len(plan.problems) - len(keep)
    if not dropped:
        return plan
    log.info(
        "eval benchmark %s: %d of %d problems dropped, their prompts longer than "
        "task.max_prompt_tokens=%d tokens",
        plan.name,
        dropped,
        len(plan.problems),
        max_tokens,
    )
    return replace(
        plan,
        problems=tuple(plan.problems[i] for i in keep),
        rules=tuple(plan.rules[i] for i in keep) if plan.rules else (),
        groups=tuple(plan.groups[i] for i in keep) if plan.groups else (),
        whole=False,
        too_long=dropped,
    )
