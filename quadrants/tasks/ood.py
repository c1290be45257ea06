"""Out-of-domain benchmarks: GPQA Diamond, MMLU-Pro and the GraphWiz test set.

Each is read from local files in the dataset's own Hub schema (column names as on the Hub) under the
benchmark data directory, or with ``source="hub"`` from the Hugging Face hub (`datasets`). Every
problem carries its own answer rule (`quadrants.rewards.choice`, `quadrants.rewards.graph`): a
letter or a graph answer is not a math-verify expression. Problems have a group (the domain, or the
GraphWiz task) for per-group accuracy.

    name      local file(s) under the data dir    hub copy                        group
    gpqa      gpqa/gpqa_diamond.csv               Idavidrein/gpqa, gpqa_diamond,  High-level domain
                                                  split train
    mmlu_pro  mmlu_pro/test.jsonl                 TIGER-Lab/MMLU-Pro, split test  category
    graphwiz  graphwiz/<task>.jsonl (nine tasks)  GraphWiz/GraphInstruct-Test,    the task
                                                  config <task>

- GPQA (gated; its authors ask that examples not be republished, so quadrants ships none): columns
  ``Question``, ``Correct Answer``, ``Incorrect Answer 1..3``, ``Record ID``, ``High-level domain``.
  The four options are shuffled with a seed per question (the string ``"gpqa/<Record ID>"``), so
  every run shows the same order; the permutation is kept in the problem's rule.
- MMLU-Pro: columns ``question_id``, ``question``, ``options`` (a list, up to ten), ``answer`` (the
  letter), ``answer_index``, ``category``; options are shown in the dataset's order.
- GraphWiz: columns ``index``, ``input_prompt``, ``answer`` (``"### ..."``); one file (one hub
  config) per task, the task is not a column.

A problem's text (`BenchmarkItem.question`) is the question and its options as ``(A) ...`` lines, or
the GraphWiz prompt; its instruction (`OodSpec.instruction`) is `CHOICE_INSTRUCTION` or the math
`INSTRUCTION`. ``problem.prompt`` is the plain rendering, text then instruction on its own line; an
evaluation renders the text in the run's prompt format instead (`quadrants.eval.suite`), with this
instruction unless ``prompt.instruction`` is set.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quadrants.rewards.choice import LETTERS, ChoiceRule
from quadrants.rewards.graph import graph_rule
from quadrants.rewards.rules import AnswerRule
from quadrants.tasks.base import Problem
from quadrants.tasks.benchmarks import (
    DATA_ENV_VAR,
    INSTRUCTION,
    Benchmark,
    BenchmarkItem,
    HubSource,
    Source,
    default_data_dir,
    read_hub,
)

__all__ = [
    "CHOICE_INSTRUCTION",
    "GRAPHWIZ_TASKS",
    "OodSpec",
    "choice_text",
    "get_ood_spec",
    "known_ood_benchmarks",
    "load_ood_benchmark",
    "missing_note",
]

CHOICE_INSTRUCTION = (
    "Please reason step by step, and put the letter of the correct option within \\boxed{}."
)
"""Appended to every multiple-choice question, after its options."""

GRAPHWIZ_TASKS = (
    "cycle",
    "connectivity",
    "bipartite",
    "topology",
    "shortest",
    "triangle",
    "flow",
    "hamilton",
    "substructure",
)
"""The nine GraphWiz tasks, in the order of its paper's table; also the local
file and hub config names."""


@dataclass(frozen=True)
class OodSpec:
    """How to read one out-of-domain benchmark.

    Attributes:
        name: registry key, prefix of problem ids.
        local_files: paths relative to the data directory, all required.
        group_kind: what a group is ("domain", "task"); metric keys
            ``eval/<name>/<group_kind>/<group>/...``.
        samples: samples per problem of the `eval=paper_ood` preset.
        instruction: what follows the problem text in its prompt.
        read: (data_dir, source) -> [(group, row)], in file order.
        item: (group, row) -> the benchmark item.
    """

    name: str
    local_files: tuple[str, ...]
    group_kind: str
    samples: int
    instruction: str
    read: Callable[[Path, Source], list[tuple[str | None, Mapping[str, Any]]]]
    item: Callable[[str | None, Mapping[str, Any]], BenchmarkItem]


def group_name(text: str) -> str:
    """A domain as a metric-key segment: ``"computer science"`` -> ``"computer_science"``."""
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_") or "unknown"


def choice_text(question: str, options: list[str]) -> str:
    """The question, a blank line, then ``(A) option`` per line."""
    lines = [f"({letter}) {str(option).strip()}" for letter, option in zip(LETTERS, options)]
    return f"{question.strip()}\n\n" + "\n".join(lines)


def _item(
    problem_id: str, text: str, gold: str, instruction: str, rule: AnswerRule, group: str | None
) -> BenchmarkItem:
    """A benchmark item whose prompt is the plain rendering: `text`, then
    `instruction` on its own line."""
    return BenchmarkItem(
        Problem(problem_id, f"{text}\n{instruction}", gold), text, None, rule, group
    )


# --- GPQA Diamond --------------------------------------------------------------------------------

GPQA_HUB = HubSource("Idavidrein/gpqa", "gpqa_diamond", "train")
_GPQA_OPTIONS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def gpqa_permutation(record_id: str) -> tuple[int, ...]:
    """The shown order of GPQA's four options: ``permutation[i]`` is the option shown as letter i
    (0 = the correct answer), drawn with `random.Random` seeded by ``"gpqa/<record_id>"``."""
    order = [0, 1, 2, 3]
    random.Random(f"gpqa/{record_id}").shuffle(order)
    return tuple(order)


def _gpqa_read(data_dir: Path, source: Source) -> list[tuple[str | None, Mapping[str, Any]]]:
    if source == "hub":
        rows = read_hub(GPQA_HUB)
    else:
        path = _require(data_dir, "gpqa", "gpqa/gpqa_diamond.csv")
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.DictReader(handle))
    return [(group_name(row.get("High-level domain") or "unknown"), row) for row in rows]


def _gpqa_item(group: str | None, row: Mapping[str, Any]) -> BenchmarkItem:
    missing = [c for c in ("Question", *_GPQA_OPTIONS) if not str(row.get(c) or "").strip()]
    if missing:
        raise ValueError(f"gpqa row {row.get('Record ID')!r}: empty or missing column(s) {missing}")
    record_id = str(row.get("Record ID") or "").strip() or _stable_id(str(row["Question"]))
    permutation = gpqa_permutation(record_id)
    options = [str(row[_GPQA_OPTIONS[index]]) for index in permutation]
    rule = ChoiceRule(gold=LETTERS[permutation.index(0)], options=4, permutation=permutation)
    text = choice_text(str(row["Question"]), options)
    return _item(f"gpqa/{record_id}", text, rule.gold, CHOICE_INSTRUCTION, rule, group)


def _stable_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# --- MMLU-Pro ------------------------------------------------------------------------------------

MMLU_PRO_HUB = HubSource("TIGER-Lab/MMLU-Pro", None, "test")


def _mmlu_pro_read(data_dir: Path, source: Source) -> list[tuple[str | None, Mapping[str, Any]]]:
    rows = (
        read_hub(MMLU_PRO_HUB)
        if source == "hub"
        else _jsonl(_require(data_dir, "mmlu_pro", "mmlu_pro/test.jsonl"))
    )
    return [(group_name(row.get("category") or "unknown"), row) for row in rows]


def _mmlu_pro_item(group: str | None, row: Mapping[str, Any]) -> BenchmarkItem:
    key = row.get("question_id")
    options = list(row.get("options") or [])
    answer, index = str(row.get("answer") or "").strip(), row.get("answer_index")
    if not 2 <= len(options) <= len(LETTERS):
        raise ValueError(
            f"mmlu_pro question {key}: {len(options)} options, expected 2 to {len(LETTERS)}"
        )
    if index is not None and LETTERS[int(index)] != answer:
        raise ValueError(f"mmlu_pro question {key}: answer {answer!r} but answer_index {index}")
    rule = ChoiceRule(gold=answer, options=len(options))
    text = choice_text(str(row["question"]), options)
    return _item(f"mmlu_pro/{key}", text, answer, CHOICE_INSTRUCTION, rule, group)


# --- GraphWiz ------------------------------------------------------------------------------------

GRAPHWIZ_HUB_PATH = "GraphWiz/GraphInstruct-Test"


def _graphwiz_read(data_dir: Path, source: Source) -> list[tuple[str | None, Mapping[str, Any]]]:
    found = []
    for task in GRAPHWIZ_TASKS:
        if source == "hub":
            rows = read_hub(HubSource(GRAPHWIZ_HUB_PATH, task, None))
        else:
            rows = _jsonl(_require(data_dir, "graphwiz", f"graphwiz/{task}.jsonl"))
        found += [(task, row) for row in rows]
    return found


def _graphwiz_item(group: str | None, row: Mapping[str, Any]) -> BenchmarkItem:
    task = str(group)
    question = str(row["input_prompt"])
    rule = graph_rule(task, str(row["answer"]), question)
    return _item(
        f"graphwiz/{task}/{row['index']}", question, rule.reference, INSTRUCTION, rule, task
    )


# --- registry and loading ------------------------------------------------------------------------

_SPECS: dict[str, OodSpec] = {
    spec.name: spec
    for spec in (
        OodSpec(
            "gpqa",
            ("gpqa/gpqa_diamond.csv",),
            "domain",
            16,
            CHOICE_INSTRUCTION,
            _gpqa_read,
            _gpqa_item,
        ),
        OodSpec(
            "mmlu_pro",
            ("mmlu_pro/test.jsonl",),
            "domain",
            1,
            CHOICE_INSTRUCTION,
            _mmlu_pro_read,
            _mmlu_pro_item,
        ),
        OodSpec(
            "graphwiz",
            tuple(f"graphwiz/{t}.jsonl" for t in GRAPHWIZ_TASKS),
            "task",
            1,
            INSTRUCTION,
            _graphwiz_read,
            _graphwiz_item,
        ),
    )
}


def known_ood_benchmarks() -> list[str]:
    """Names accepted by `load_ood_benchmark`."""
    return list(_SPECS)


def get_ood_spec(name: str) -> OodSpec:
    """The spec of out-of-domain benchmark `name`; an unknown name lists the known ones."""
    if name not in _SPECS:
        raise ValueError(
            f"unknown out-of-domain benchmark {name!r}; known: {known_ood_benchmarks()}"
        )
    return _SPECS[name]


def load_ood_benchmark(
    name: str, *, data_dir: str | os.PathLike[str] | None = None, source: Source = "local"
) -> Benchmark:
    """Read out-of-domain benchmark `name` (see the module docstring); `data_dir` and `source` as
    in `load_benchmark`. Prompts are plain (`OodSpec`); evaluations render them in the run's format.

    Raises:
        ValueError: unknown name or source, a row the benchmark's rules cannot read (the message
            names the row).
        FileNotFoundError: a local file is missing (the message names the path and the fix).
    """
    spec = get_ood_spec(name)
    if source not in ("local", "hub"):
        raise ValueError(f"unknown source {source!r}; use 'local' or 'hub'")
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    items = tuple(spec.item(group, row) for group, row in spec.read(directory, source))
    ids = [item.problem.id for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name}: problem ids are not unique")
    return Benchmark(name=name, items=items, samples=spec.samples)


GPQA_GATED = (
    " GPQA is gated on the hub and never shipped: accept its terms on the hub and load "
    "it with your token (huggingface-cli login; eval.source=hub), or put your own copy "
    "of gpqa_diamond.csv there."
)


def missing_note(name: str) -> str:
    """What to add to a missing-file message of benchmark `name` (GPQA: gated, never shipped)."""
    return GPQA_GATED if name == "gpqa" else ""


def _require(data_dir: Path, name: str, relative: str) -> Path:
    path = data_dir / relative
    if not path.is_file():
        raise FileNotFoundError(
            f"{name}: no data file at {path}. Set {DATA_ENV_VAR} (or pass data_dir=) to the "
            f"directory that holds {relative}, or load with source='hub' on a machine with "
            f"network.{missing_note(name)}"
        )
    return path


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
