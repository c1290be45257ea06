"""Evaluation benchmarks: AIME24/25, AMC, MATH500, Minerva Math, OlympiadBench, AMC23 and GSM8K.

Each benchmark reads its test split from a local jsonl file (``<data_dir>/<name>/test.jsonl``; the
default ``data_dir`` is the data home, `quadrants.home.default_data_dir`: ``$QUADRANTS_DATA``, else
``~/.cache/quadrants/data``, filled by ``python -m quadrants.data``) or, only when asked for with
``source="hub"``, from the Hugging Face hub through `datasets` (imported lazily; the ``hub``
extra). It turns every row into a `Problem` whose ``answer`` is a gold that the grader (math-verify,
gold wrapped in ``$...$``) can parse. The dataset quirks this handles:

- AIME24: answers are zero-padded strings (``"025"``) -> ``"25"``.
- AIME25: one answer is ``336^\\circ`` -> ``"336"`` (the official answer).
- AMC (the paper's AMC column: AI-MO's 83-problem ``aimo-validation-amc``, AMC 2022 and 2023)
  and AMC23 (40 problems of AMC 2023, another set): answers are floats (``27.0``) -> ``"27"``.
- Minerva Math: no answer field; the gold is the last ``\\boxed{}`` of the solution, as in the
  Qwen2.5-Math evaluation. Some of those are written as code, which math-verify reads differently:
  ``4.5e33`` (read as 4.5 * e * 33) -> ``4.5 \\times 10^{33}``, ``-1./3`` -> ``-1/3``,
  ``np.arcsin(x)`` -> ``\\arcsin(x)``; stray ``$`` inside a box are dropped.
- OlympiadBench: ``final_answer`` is a list of ``$...$`` strings, one item possibly holding several
  (``$69$,$84$`` -> ``"69,84"``); the ``$`` go, items are joined by ``", "``, trailing periods are
  dropped. One gold lost its ``\\in`` (``$t(0,4]$``, id 2045) and is corrected to ``(0,4]``, and two
  others do not parse as written (ids 1782, 1965): see `GOLD_CORRECTIONS`.
- GSM8K: the gold follows ``####`` at the end of the worked answer; thousands commas are removed.

Prompts use `INSTRUCTION` after the problem, as plain text, or, when a tokenizer is given, that same
text as the user turn of the tokenizer's chat template. The number of samples per problem of the
paper's protocol (docs/science.md, "Evaluation protocol") is `Benchmark.samples`: 32 on AIME and
AMC, 4 on the others; GSM8K is not in the paper and gets 4.

Hugging Face hub copies (``source="hub"``; the local files are the reference copies, see the data
README; the hub schemas come from the dataset cards and were not exercised offline):

    aime24          HuggingFaceH4/aime_2024                      split train
    aime25          math-ai/aime25                               split test
    amc             AI-MO/aimo-validation-amc                    split train
    amc23           math-ai/amc23                                split test
    math500         HuggingFaceH4/MATH-500                       split test
    minerva         math-ai/minervamath                          split test
    olympiadbench   Hothan/OlympiadBench, OE_TO_maths_en_COMP    split train
    gsm8k           openai/gsm8k, main                           split test

AMC has no reference copy here: its Hub copy (83 rows, fields id, problem, answer as a float, url;
the Hub's dataset viewer) is the one `python -m quadrants.data download amc` writes.

Widely used copies of math-ai/aime25 have broken ``\\f``/``\\t`` escapes in the problem text (the
local file does not), and math-ai/minervamath carries an ``answer`` field, which is then used
instead of the last box of the solution.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from quadrants.home import DATA_ENV, default_data_dir
from quadrants.rewards.extract import last_boxed
from quadrants.rewards.normalize import normalize_answer
from quadrants.rewards.rules import AnswerRule
from quadrants.tasks.base import Problem
from quadrants.tasks.read_log import note_read

__all__ = [
    "DATA_ENV_VAR",
    "GOLD_CORRECTIONS",
    "GOLD_RULES",
    "INSTRUCTION",
    "Benchmark",
    "BenchmarkItem",
    "BenchmarkSpec",
    "HubSource",
    "check_row",
    "default_data_dir",
    "get_spec",
    "known_benchmarks",
    "load_benchmark",
    "normalise_gold",
    "plain_prompt",
    "read_hub",
]

DATA_ENV_VAR = DATA_ENV
"""Environment variable naming the data home (one sub-directory per benchmark;
`quadrants.home`)."""

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""Appended to every problem on its own line (the Qwen2.5-Math "boxed" prompt)."""

GOLD_CORRECTIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("olympiadbench", "2045"): ("(0,4]", "gold '$t(0,4]$' lost its \\in: 't \\in (0,4]'"),
    ("olympiadbench", "1782"): (
        "n^{2}-n-1",
        "'m_{\\max }=n^{2}-n-1' does not parse (the \\max subscript): only that exact string "
        "matched",
    ),
    ("olympiadbench", "1965"): (
        "f(x)=a x+b",
        "the gold's prose ('where b is an arbitrary integer, ...') made math-verify read it as 0, "
        "so \\boxed{0} matched; the formula is what a box holds",
    ),
}
"""(benchmark, row id) -> (corrected gold, why). Only golds that no correct answer could match."""

Source = Literal["local", "hub"]


class ChatTokenizer(Protocol):
    """What we use of a Hugging Face tokenizer: its chat template."""

    chat_template: Any

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class HubSource:
    """Where a benchmark lives on the Hugging Face hub: ``load_dataset(path,
    config, split=split)``."""

    path: str
    config: str | None
    split: str | None  # None: the dataset's only split


@dataclass(frozen=True)
class BenchmarkSpec:
    """How to read one benchmark.

    Attributes:
        name: registry key, also the prefix of problem ids (``"aime24/60"``).
        local_file: path of the jsonl file relative to the data directory.
        hub: the Hugging Face hub copy.
        question_fields: row fields holding the problem statement, the first present is used.
        id_field: row field with a stable id; None (or absent on a row) uses the row index.
        gold: row -> gold answer as math-verify-parsable LaTeX.
        unit: row -> the unit the answer is given in, when the dataset says so, else None.
        samples: samples per problem in the paper's protocol (Avg@k / Pass@k with k = samples).
    """

    name: str
    local_file: str
    hub: HubSource
    question_fields: tuple[str, ...]
    id_field: str | None
    gold: Callable[[Mapping[str, Any]], str]
    unit: Callable[[Mapping[str, Any]], str | None]
    samples: int


@dataclass(frozen=True)
class BenchmarkItem:
    """One benchmark problem plus what the dataset says about it besides the prompt.

    Attributes:
        problem: id, templated prompt and gold answer.
        question: the problem statement, without the template.
        unit: the unit of the answer (OlympiadBench ``unit``, the unit after
            Minerva's box), or None.
        rule: how answers are graded when it is not math-verify (multiple choice, graph answers;
            `quadrants.tasks.ood`); None = the math-verify grader.
        group: the problem's domain or task within the benchmark (MMLU-Pro domain), or None.
    """

    problem: Problem
    question: str
    unit: str | None
    rule: AnswerRule | None = None
    group: str | None = None


@dataclass(frozen=True)
class Benchmark:
    """An evaluation-only task: `heldout` gives the whole test split, in file order."""

    name: str
    items: tuple[BenchmarkItem, ...]
    samples: int

    @property
    def problems(self) -> list[Problem]:
        """All problems, in file order."""
        return [item.problem for item in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def heldout(self, n: int | None = None) -> list[Problem]:
        """The first `n` problems (all when `n` is None), in file order."""
        if n is None:
            return self.problems
        if not 0 <= n <= len(self.items):
            raise ValueError(f"asked for {n} problems, {self.name} has {len(self.items)}")
        return self.problems[:n]

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        """Benchmarks are for evaluation only; training on them would leak the test set."""
        raise NotImplementedError(f"{self.name} is an evaluation benchmark with no training split")


# --- gold answers -------------------------------------------------------------------------------

_INTEGER = re.compile(r"[+-]?\d+")
_DEGREES = re.compile(r"\s*\^\s*\{?\s*\\circ\s*\}?\s*$")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_UNIT_AFTER_BOX = re.compile(r"\s*\\(?:mathrm|text)\s*\{([^{}]*)\}")
_BOX_OPEN = re.compile(r"\\boxed\s*\{")


def _canonical_integer(text: str) -> str:
    """``"025"`` -> ``"25"``; anything but a plain integer comes back unchanged."""
    return str(int(text)) if _INTEGER.fullmatch(text) else text


def _aime_gold(row: Mapping[str, Any]) -> str:
    return _canonical_integer(_DEGREES.sub("", str(row["answer"]).strip()))


def _amc_gold(row: Mapping[str, Any]) -> str:
    answer = row["answer"]
    if isinstance(answer, float):
        return str(int(answer)) if answer.is_integer() else format(answer, ".15g")
    return _canonical_integer(str(answer).strip())


def _math500_gold(row: Mapping[str, Any]) -> str:
    return str(row["answer"]).strip()


def _minerva_gold(row: Mapping[str, Any]) -> str:
    answer = row.get("answer") or last_boxed(row["solution"])
    if not answer:
        raise ValueError(f"Minerva row without a \\boxed{{}} answer: {row.get('idx')!r}")
    return normalize_answer(answer)  # the grader applies the same to predictions


def _minerva_unit(row: Mapping[str, Any]) -> str | None:
    """The ``\\mathrm{~cm}`` (or ``\\text{ years }``) right after the solution's last box."""
    if row.get("answer") or "solution" not in row:
        return None
    solution = row["solution"]
    opens = list(_BOX_OPEN.finditer(solution))
    if not opens:
        return None
    depth = 0
    for index in range(opens[-1].end() - 1, len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[index], 0)
        if depth == 0:
            match = _UNIT_AFTER_BOX.match(solution, index + 1)
            unit = match.group(1).replace("~", " ").strip() if match else ""
            return unit or None
    return None


def _olympiad_gold(row: Mapping[str, Any]) -> str:
    final = row["final_answer"]
    items = [final] if isinstance(final, str) else list(final)
    parts = [_UNESCAPED_DOLLAR.sub("", item).strip().rstrip(".").strip() for item in items]
    return ", ".join(part for part in parts if part)


def _olympiad_unit(row: Mapping[str, Any]) -> str | None:
    unit = _UNESCAPED_DOLLAR.sub("", row.get("unit") or "").strip()
    return unit or None


def _gsm8k_gold(row: Mapping[str, Any]) -> str:
    answer = str(row["answer"])
    if "####" not in answer:
        raise ValueError(f"GSM8K answer without '####': {answer[-80:]!r}")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def _no_unit(row: Mapping[str, Any]) -> None:
    return None


GOLD_RULES: dict[str, Callable[[Any], str]] = {
    "plain": lambda value: str(value).strip(),
    "number": lambda value: _amc_gold({"answer": value}),  # 27.0 -> "27", "025" -> "25"
    "aime": lambda value: _aime_gold({"answer": value}),  # "025" -> "25", 336^\circ -> "336"
    "gsm8k": lambda value: _gsm8k_gold({"answer": value}),  # "... #### 1,234" -> "1234"
    "boxed": lambda value: _minerva_gold({"solution": value}),  # a worked solution -> its last box
    "olympiad": lambda value: _olympiad_gold({"final_answer": value}),  # ["$69$,$84$"] -> "69,84"
}
"""Gold normalisations of the benchmark loaders, by name, for dataset tasks (`task.params.gold`)."""


def normalise_gold(value: Any, rule: str) -> str:
    """`value` (a dataset's answer field) as a math-verify-parsable gold
    under `rule`; "" when empty.

    Raises:
        ValueError: an unknown rule (listing the known ones), or a value the rule cannot read.
    """
    if rule not in GOLD_RULES:
        raise ValueError(f"unknown gold rule {rule!r}; choose one of {list(GOLD_RULES)}")
    if value is None or (isinstance(value, str) and not value.strip()):
        return ""
    return GOLD_RULES[rule](value)


_SPECS: dict[str, BenchmarkSpec] = {
    spec.name: spec
    for spec in (
        BenchmarkSpec(
            name="aime24",
            local_file="aime24/test.jsonl",
            hub=HubSource("HuggingFaceH4/aime_2024", None, "train"),
            question_fields=("problem",),
            id_field="id",
            gold=_aime_gold,
            unit=_no_unit,
            samples=32,
        ),
        BenchmarkSpec(
            name="aime25",
            local_file="aime25/test.jsonl",
            hub=HubSource("math-ai/aime25", None, "test"),
            question_fields=("problem",),
            id_field=None,
            gold=_aime_gold,
            unit=_no_unit,
            samples=32,
        ),
        BenchmarkSpec(
            name="amc",
            local_file="amc/test.jsonl",
            hub=HubSource("AI-MO/aimo-validation-amc", None, "train"),
            question_fields=("problem",),
            id_field="id",
            gold=_amc_gold,
            unit=_no_unit,
            samples=32,
        ),
        BenchmarkSpec(
            name="math500",
            local_file="math500/test.jsonl",
            hub=HubSource("HuggingFaceH4/MATH-500", None, "test"),
            question_fields=("problem",),
            id_field="unique_id",
            gold=_math500_gold,
            unit=_no_unit,
            samples=4,
        ),
        BenchmarkSpec(
            name="minerva",
            local_file="minerva_math/test.jsonl",
            hub=HubSource("math-ai/minervamath", None, "test"),
            question_fields=("problem", "question"),
            id_field="idx",
            gold=_minerva_gold,
            unit=_minerva_unit,
            samples=4,
        ),
        BenchmarkSpec(
            name="olympiadbench",
            local_file="olympiadbench/test.jsonl",
            hub=HubSource("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
            question_fields=("question",),
            id_field="id",
            gold=_olympiad_gold,
            unit=_olympiad_unit,
            samples=4,
        ),
        BenchmarkSpec(
            name="amc23",
            local_file="amc23/test.jsonl",
            hub=HubSource("math-ai/amc23", None, "test"),
            question_fields=("problem", "question"),
            id_field="id",
            gold=_amc_gold,
            unit=_no_unit,
            samples=32,  # not the paper's AMC column (that is `amc`); kept under its own name
        ),
        BenchmarkSpec(
            name="gsm8k",
            local_file="gsm8k/test.jsonl",
            hub=HubSource("openai/gsm8k", "main", "test"),
            question_fields=("question",),
            id_field=None,
            gold=_gsm8k_gold,
            unit=_no_unit,
            samples=4,  # not in the paper; an easy set
        ),
    )
}


# --- registry and loading -----------------------------------------------------------------------


def known_benchmarks() -> list[str]:
    """Names accepted by `load_benchmark`: the paper's six in the order of its tables, then AMC23
    and GSM8K."""
    return list(_SPECS)


def get_spec(name: str) -> BenchmarkSpec:
    """The spec of benchmark `name`; an unknown name lists the known ones."""
    if name not in _SPECS:
        raise ValueError(f"unknown benchmark {name!r}; known benchmarks: {known_benchmarks()}")
    return _SPECS[name]


def plain_prompt(question: str) -> str:
    """The problem followed by `INSTRUCTION` on its own line."""
    return f"{question}\n{INSTRUCTION}"


def load_benchmark(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    source: Source = "local",
    tokenizer: ChatTokenizer | None = None,
) -> Benchmark:
    """Read benchmark `name` and build its problems.

    Args:
        name: one of `known_benchmarks()`.
        data_dir: directory holding ``<name>/test.jsonl`` files; default `default_data_dir()`.
            Ignored with ``source="hub"``.
        source: ``"local"`` reads the jsonl file; ``"hub"`` downloads the copy named in the module
            docstring with `datasets` (needs network and ``pip install datasets``).
        tokenizer: when given, each prompt is `plain_prompt` as the user turn of its chat template,
            with the generation prompt appended; it must have a chat template.

    Returns:
        The benchmark; problem ids are ``"<name>/<row id>"`` (the row index where rows have none).

    Raises:
        ValueError: unknown name or source, a tokenizer without a chat template, a row without gold.
        FileNotFoundError: the local file is missing (the message names the path and the fix).
        ImportError: ``source="hub"`` without `datasets` installed.
    """
    spec = get_spec(name)
    if tokenizer is not None and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the tokenizer has no chat template; pass tokenizer=None for plain prompts"
        )
    if source == "local":
        rows = _local_rows(spec, Path(data_dir) if data_dir is not None else default_data_dir())
    elif source == "hub":
        rows = _hub_rows(spec)
    else:
        raise ValueError(f"unknown source {source!r}; use 'local' or 'hub'")
    items = tuple(_item(spec, index, row, tokenizer) for index, row in enumerate(rows))
    ids = [item.problem.id for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name}: problem ids are not unique")
    return Benchmark(name=name, items=items, samples=spec.samples)


def check_row(name: str, index: int, row: Mapping[str, Any]) -> None:
    """Whether row `index` of benchmark `name` makes a problem (a question, a gold the grader
    reads); ValueError as `load_benchmark` raises it, for `quadrants.data import` to name the
    row's line in the user's file."""
    _item(get_spec(name), index, row, None)


def _item(
    spec: BenchmarkSpec, index: int, row: Mapping[str, Any], tokenizer: ChatTokenizer | None
) -> BenchmarkItem:
    row_id = row.get(spec.id_field) if spec.id_field else None
    key = str(index if row_id is None else row_id)
    question = next((row[f] for f in spec.question_fields if row.get(f)), None)
    if question is None:
        raise ValueError(f"{spec.name} row {key}: none of the fields {spec.question_fields}")
    gold = spec.gold(row)
    gold = GOLD_CORRECTIONS.get((spec.name, key), (gold, ""))[0]
    if not gold:
        raise ValueError(f"{spec.name} row {key}: empty gold answer")
    prompt = plain_prompt(question)
    if tokenizer is not None:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
    problem = Problem(id=f"{spec.name}/{key}", prompt=prompt, answer=gold)
    return BenchmarkItem(problem=problem, question=question, unit=spec.unit(row))


def _local_rows(spec: BenchmarkSpec, data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / spec.local_file
    if not path.is_file():
        raise FileNotFoundError(
            f"{spec.name}: no data file at {path}. Run `python -m quadrants.data download "
            f"{spec.name}` on a machine with network (`python -m quadrants.data import {spec.name} "
            f"FILE` for a copy brought by hand), or set {DATA_ENV_VAR} (or pass data_dir=) to the "
            f"directory that holds {spec.local_file}, or load with source='hub' ({spec.hub.path})."
        )
    note_read(path)
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _hub_rows(spec: BenchmarkSpec) -> list[dict[str, Any]]:
    return read_hub(spec.hub)


def read_hub(hub: HubSource) -> list[dict[str, Any]]:
    """The rows of a Hugging Face hub dataset (`datasets`, imported here; the hub token of
    ``huggingface-cli login`` or ``$HF_TOKEN`` is used for gated datasets)."""
    try:
        import datasets  # optional: only this path needs it
    except ImportError as error:
        raise ImportError(
            f"source='hub' needs the `datasets` package (pip install datasets) to download "
            f"{hub.path}; or use the local copy with source='local'"
        ) from error
    table = datasets.load_dataset(hub.path, hub.config, split=hub.split)
    if hub.split is None:  # a DatasetDict: take its only split
        if len(table) != 1:
            raise ValueError(
                f"{hub.path} ({hub.config}) has splits {list(table)}; expected exactly one"
            )
        table = next(iter(table.values()))
    return [dict(row) for row in table]
