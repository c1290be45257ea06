"""Benchmark registry, gold extraction on real rows, prompts, errors, and the grader's agreement.

The data lives outside the repo: ``$QUADRANTS_DATA``, default ``<repo>/../shared/data``. Tests that
need it skip when it is absent. The agreement test grades every small benchmark in full and seeded
subsets of the large ones (`benchmarks/grading_agreement.py` runs all of them).
"""

from __future__ import annotations

import json
import os
import random
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from quadrants.eval.agreement import run_agreement
from quadrants.rewards.grader import Grader
from quadrants.tasks.base import Problem, Task
from quadrants.tasks.benchmarks import (
    INSTRUCTION,
    Benchmark,
    default_data_dir,
    get_spec,
    known_benchmarks,
    load_benchmark,
)

REPO = Path(__file__).resolve().parents[3]
DATA_DIR = Path(os.environ.get("QUADRANTS_DATA", REPO.parent / "shared" / "data"))
needs_data = pytest.mark.skipif(
    not DATA_DIR.is_dir(),
    reason=f"benchmark data not found at {DATA_DIR}; set QUADRANTS_DATA to the shared data dir",
)

# Problems graded per benchmark in the agreement test (None: all); keeps the test well under 60 s.
AGREEMENT_SUBSET = {"math500": 150, "minerva": 80, "olympiadbench": 150, "gsm8k": 200}


def load(name: str) -> Benchmark:
    return load_benchmark(name, data_dir=DATA_DIR)


# --- registry -----------------------------------------------------------------------------------


def test_known_benchmarks():
    assert known_benchmarks() == [
        "aime24",
        "aime25",
        "amc23",
        "math500",
        "minerva",
        "olympiadbench",
        "gsm8k",
    ]


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown benchmark 'aime23'.*'aime24', 'aime25'"):
        load_benchmark("aime23")


def test_protocol_samples():
    # docs/science.md: Avg@32/Pass@32 on AIME24, AIME25, AMC; Avg@4/Pass@4 on MATH500, Minerva, OlympiadBench
    assert {name: get_spec(name).samples for name in known_benchmarks()} == {
        "aime24": 32,
        "aime25": 32,
        "amc23": 32,
        "math500": 4,
        "minerva": 4,
        "olympiadbench": 4,
        "gsm8k": 4,
    }


def test_missing_file_names_the_path_and_the_fix(tmp_path: Path):
    with pytest.raises(FileNotFoundError) as error:
        load_benchmark("aime24", data_dir=tmp_path)
    message = str(error.value)
    assert str(tmp_path / "aime24" / "test.jsonl") in message
    assert "QUADRANTS_DATA" in message and "data_dir" in message


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_data_dir_defaults_to_the_environment_variable(tmp_path: Path, monkeypatch):
    write_jsonl(tmp_path / "aime25" / "test.jsonl", [{"problem": "Find $x$.", "answer": "7"}])
    monkeypatch.setenv("QUADRANTS_DATA", str(tmp_path))
    assert default_data_dir() == tmp_path
    assert load_benchmark("aime25").problems == [
        Problem("aime25/0", f"Find $x$.\n{INSTRUCTION}", "7")
    ]


def test_default_data_dir_without_the_variable(monkeypatch):
    monkeypatch.delenv("QUADRANTS_DATA", raising=False)
    assert default_data_dir() == REPO.parent / "shared" / "data"


# --- the Task protocol --------------------------------------------------------------------------


@needs_data
def test_benchmark_is_an_evaluation_only_task():
    benchmark = load("aime24")
    assert isinstance(benchmark, Task)
    assert benchmark.name == "aime24" and len(benchmark) == 30
    assert benchmark.heldout() == benchmark.problems
    assert benchmark.heldout(3) == benchmark.problems[:3]
    assert benchmark.heldout(3) == load("aime24").heldout(3)  # deterministic
    with pytest.raises(ValueError, match="asked for 31 problems, aime24 has 30"):
        benchmark.heldout(31)
    with pytest.raises(NotImplementedError, match="evaluation benchmark"):
        benchmark.train_batch(2, random.Random(0))


@needs_data
@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("aime24", 30),
        ("aime25", 30),
        ("amc23", 40),
        ("math500", 500),
        ("minerva", 272),
        ("olympiadbench", 675),
        ("gsm8k", 1319),
    ],
)
def test_sizes_and_unique_ids(name: str, size: int):
    benchmark = load(name)
    assert len(benchmark) == size
    assert len({p.id for p in benchmark.problems}) == size
    assert all(p.id.startswith(f"{name}/") and p.answer for p in benchmark.problems)


# --- gold extraction on real rows ---------------------------------------------------------------


@needs_data
def test_aime_golds():
    aime24 = load("aime24")
    assert aime24.problems[0].id == "aime24/60"  # the row's own id
    assert aime24.problems[7].answer == "25"  # stored as "025"
    assert load("aime25").problems[19].answer == "336"  # stored as "336^\circ"


@needs_data
def test_amc_float_golds():
    amc = load("amc23")
    assert amc.problems[0].answer == "27"  # stored as the float 27.0
    assert amc.problems[15].answer == "-1"  # -1.0


@needs_data
def test_math500_golds_are_verbatim():
    problem = load("math500").problems[0]
    assert problem.id == "math500/test/precalculus/807.json"
    assert problem.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"


@needs_data
def test_minerva_gold_is_the_last_box_of_the_solution():
    items = load("minerva").items
    # "...=\boxed{1.6} \mathrm{~cm}": the box, and the unit that follows it
    assert (items[0].problem.answer, items[0].unit) == ("1.6", "cm")
    # "\boxed{4.5e33} \mathrm{ergs}": math-verify would read 4.5e33 as 4.5 * e * 33
    assert (items[1].problem.answer, items[1].unit) == ("4.5 \\times 10^{33}", "ergs")
    assert items[5].problem.answer == "\\arcsin(10/13)"  # np.arcsin(10/13)
    assert items[38].problem.answer == "-1/3"  # the Python float -1./3
    # the box holds "x_{0} \cos (\omega t)+$ $\dot{x}_{0} ...": the stray $ $ would split the maths
    assert (
        items[72].problem.answer
        == "x_{0} \\cos (\\omega t)+ \\dot{x}_{0} \\sin (\\omega t) / \\omega"
    )


@needs_data
def test_olympiadbench_golds():
    by_id = {item.problem.id: item for item in load("olympiadbench").items}
    assert by_id["olympiadbench/1606"].problem.answer == "2"
    assert by_id["olympiadbench/1664"].problem.answer == "69,84"  # ["$69$,$84$"]: the $ removed
    assert (
        by_id["olympiadbench/1970"].problem.answer == "(-\\infty, 0) \\cup\\{1\\}"
    )  # trailing "."
    assert by_id["olympiadbench/2045"].problem.answer == "(0,4]"  # "$t(0,4]$", corrected
    assert by_id["olympiadbench/1782"].problem.answer == "n^{2}-n-1"  # "m_{\\max }=...", corrected
    assert by_id["olympiadbench/1965"].problem.answer == "f(x)=a x+b"  # prose dropped
    assert (by_id["olympiadbench/2419"].problem.answer, by_id["olympiadbench/2419"].unit) == (
        "166",
        "cm^2",  # unit "$cm^2$"
    )


@needs_data
def test_corrected_golds_take_the_right_answer_and_no_stray_number():
    # before the corrections olympiadbench/1965 took \boxed{0} and 1782 took only its own string
    from quadrants.rewards.grader import grade_one

    def grade(box: str, gold: str) -> str:
        return grade_one(f"\\boxed{{{box}}}", gold, 5.0, clock="cpu").value

    olympiad = {item.problem.id: item.problem.answer for item in load("olympiadbench").items}
    assert grade("n^2-n-1", olympiad["olympiadbench/1782"]) == "correct"
    assert grade("n^2-n", olympiad["olympiadbench/1782"]) == "wrong"
    assert grade("f(x)=ax+b", olympiad["olympiadbench/1965"]) == "correct"
    assert grade("0", olympiad["olympiadbench/1965"]) == "wrong"


@needs_data
def test_gsm8k_gold_follows_the_hashes():
    problems = load("gsm8k").problems
    assert problems[0].answer == "18"  # "...\n#### 18"
    assert problems[146].answer == "2125"  # "#### 2,125"


# --- prompts ------------------------------------------------------------------------------------


@needs_data
def test_plain_prompt():
    problem = load("aime25").problems[0]
    assert problem.prompt == (
        "Find the sum of all integer bases $b>9$ for which $17_{b}$ is a divisor of $97_{b}$.\n"
        "Please reason step by step, and put your final answer within \\boxed{}."
    )


class FakeChatTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, conversation, **kwargs):
        assert kwargs == {"tokenize": False, "add_generation_prompt": True}
        (message,) = conversation
        return f"<user>{message['content']}</user><assistant>"


class NoTemplateTokenizer:
    chat_template = None


@needs_data
def test_chat_prompt_wraps_the_plain_prompt():
    plain = load("aime25").problems[0].prompt
    chat = load_benchmark("aime25", data_dir=DATA_DIR, tokenizer=FakeChatTokenizer())
    assert chat.problems[0].prompt == f"<user>{plain}</user><assistant>"


def test_tokenizer_without_chat_template_is_an_error():
    with pytest.raises(ValueError, match="no chat template"):
        load_benchmark("aime24", tokenizer=NoTemplateTokenizer())


# --- the Hugging Face hub path (no network: a stand-in `datasets` module) --------------------------


def test_hub_source_uses_the_documented_ids(monkeypatch):
    calls = []
    hub_rows = {
        "math-ai/minervamath": [
            {"question": "What is 2+2?", "answer": "4", "solution": "so \\boxed{5}"}
        ],
        "Hothan/OlympiadBench": [
            {"id": 7, "question": "Find n.", "final_answer": ["$3$"], "unit": None}
        ],
    }

    def load_dataset(path, config, split):
        calls.append((path, config, split))
        return hub_rows[path]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    minerva = load_benchmark("minerva", source="hub")
    # the hub copy has "question" and an answer field, used instead of the solution's last box
    assert minerva.problems == [Problem("minerva/0", f"What is 2+2?\n{INSTRUCTION}", "4")]
    olympiad = load_benchmark("olympiadbench", source="hub")
    assert olympiad.problems == [Problem("olympiadbench/7", f"Find n.\n{INSTRUCTION}", "3")]
    assert calls == [
        ("math-ai/minervamath", None, "test"),
        ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
    ]


def test_hub_without_datasets_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(ImportError, match="pip install datasets"):
        load_benchmark("gsm8k", source="hub")


def test_unknown_source_is_an_error():
    with pytest.raises(ValueError, match="unknown source 'web'"):
        load_benchmark("gsm8k", source="web")  # type: ignore[arg-type]


# --- the grader agrees with the golds -----------------------------------------------------------


@pytest.fixture(scope="module")
def grader() -> Iterator[Grader]:
    with Grader(num_workers=2, timeout_s=5.0) as pool:
        yield pool


@needs_data
@pytest.mark.parametrize("name", known_benchmarks())
def test_grader_agrees_with_equivalent_and_different_answers(name: str, grader: Grader):
    report = run_agreement(load(name), grader, max_problems=AGREEMENT_SUBSET.get(name), seed=0)
    disagreements = "\n".join(
        f"{c.problem_id} [{c.form}] gold {c.gold!r} answer {c.answer!r}: {c.outcome.value}"
        for c in report.disagreements
    )
    assert report.correct_as_correct >= 0.99, disagreements
    assert report.wrong_as_correct <= 0.01, disagreements
    assert len(report.different_cases) == report.num_problems  # every problem got a partner
