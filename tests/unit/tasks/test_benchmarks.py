"""Benchmark registry, gold extraction, prompts, errors, and the grader's agreement.

The session's data home holds the fixture files of tests/data_fixtures.py (a few rows per benchmark
in its real format, with its quirks; tests/conftest.py), so every test here runs on a bare machine.
The tests marked ``full_data`` read the complete real files of the ``$QUADRANTS_DATA`` the session
started with (.ci/run's full-data stage): sizes, the quirks at their real rows, and the agreement
over every small benchmark in full and seeded subsets of the large ones
(`benchmarks/grading_agreement.py` runs all of them).
"""

from __future__ import annotations

import json
import random
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.agreement import run_agreement
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
from tests.unit.tasks.full_data import skip_if_never_fetched

# Problems graded per benchmark in the full-data agreement test (None: all); well under 60 s.
AGREEMENT_SUBSET = {"math500": 150, "minerva": 80, "olympiadbench": 150, "gsm8k": 200}


def load(name: str) -> Benchmark:
    """Benchmark `name` from the session's data home (the fixture files)."""
    return load_benchmark(name)


# --- registry -----------------------------------------------------------------------------------


def test_known_benchmarks():
    assert known_benchmarks() == [
        "aime24",
        "aime25",
        "amc",
        "math500",
        "minerva",
        "olympiadbench",
        "amc23",
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
        "amc": 32,
        "math500": 4,
        "minerva": 4,
        "olympiadbench": 4,
        "amc23": 32,
        "gsm8k": 4,
    }


def test_missing_file_names_the_path_and_the_fix(tmp_path: Path):
    with pytest.raises(FileNotFoundError) as error:
        load_benchmark("aime24", data_dir=tmp_path)
    message = str(error.value)
    assert str(tmp_path / "aime24" / "test.jsonl") in message
    assert "QUADRANTS_DATA" in message and "data_dir" in message
    assert "python -m quadrants.data download aime24" in message
    assert "python -m quadrants.data import aime24 FILE" in message


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


def test_default_data_dir_is_under_the_model_caches_root(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("QUADRANTS_DATA", raising=False)
    monkeypatch.setenv("QUADRANTS_CACHE", str(tmp_path / "cache"))
    assert default_data_dir() == tmp_path / "cache" / "data"
    monkeypatch.delenv("QUADRANTS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dir() == tmp_path / "home" / ".cache" / "quadrants" / "data"
    from quadrants.models.cache import default_cache_root

    assert default_data_dir() == default_cache_root() / "data"  # one root for models and data


# --- the Task protocol --------------------------------------------------------------------------


def test_benchmark_is_an_evaluation_only_task():
    benchmark = load("aime24")
    assert isinstance(benchmark, Task)
    assert benchmark.name == "aime24" and len(benchmark) == 3  # the fixture's 3 rows
    assert benchmark.heldout() == benchmark.problems
    assert benchmark.heldout(2) == benchmark.problems[:2]
    assert benchmark.heldout(2) == load("aime24").heldout(2)  # deterministic
    with pytest.raises(ValueError, match="asked for 4 problems, aime24 has 3"):
        benchmark.heldout(4)
    with pytest.raises(NotImplementedError, match="evaluation benchmark"):
        benchmark.train_batch(2, random.Random(0))


@pytest.mark.parametrize("name", known_benchmarks())
def test_every_fixture_row_becomes_a_problem_with_a_unique_id(name: str, fixture_data_dir: Path):
    rows = (fixture_data_dir / get_spec(name).local_file).read_text().splitlines()
    benchmark = load(name)
    assert len(benchmark) == len(rows) >= 3
    assert len({p.id for p in benchmark.problems}) == len(rows)
    assert all(p.id.startswith(f"{name}/") and p.answer for p in benchmark.problems)


# --- gold extraction: the quirks of each format, on the fixture rows ------------------------------


def test_aime_golds():
    aime24 = load("aime24")
    assert [p.id for p in aime24.problems] == ["aime24/60", "aime24/61", "aime24/62"]  # own ids
    assert [p.answer for p in aime24.problems] == ["24", "25", "304"]  # "024", "025": padding gone
    aime25 = load("aime25")
    assert [p.id for p in aime25.problems] == ["aime25/0", "aime25/1", "aime25/2"]  # no id: index
    assert [p.answer for p in aime25.problems] == ["21", "336", "7"]  # "336^\circ", "007"


def test_amc_float_golds_of_both_sets():
    # AI-MO's 83-problem set (the paper's AMC column) and AMC23 store answers as floats
    assert [p.answer for p in load("amc").problems] == ["9", "-3", "3.5"]
    assert [p.id for p in load("amc").problems] == ["amc/0", "amc/1", "amc/2"]


def test_amc_float_golds():
    # stored as the floats 27.0, -1.0 and 2.5
    assert [p.answer for p in load("amc23").problems] == ["27", "-1", "2.5"]


def test_math500_golds_are_verbatim():
    problem = load("math500").problems[0]
    assert problem.id == "math500/test/precalculus/807.json"
    assert problem.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"


def test_minerva_gold_is_the_last_box_of_the_solution():
    items = load("minerva").items
    # "First \boxed{2} is wrong; ... d=\boxed{1.6} \mathrm{~cm}": the last box, and its unit
    assert (items[0].problem.id, items[0].problem.answer, items[0].unit) == (
        "minerva/0",
        "1.6",
        "cm",
    )
    # "\boxed{4.5e33} \mathrm{ergs}": math-verify would read 4.5e33 as 4.5 * e * 33
    assert (items[1].problem.answer, items[1].unit) == ("4.5 \\times 10^{33}", "ergs")
    assert items[2].problem.answer == "\\arcsin(10/13)"  # np.arcsin(10/13)
    assert items[3].problem.answer == "-1/3"  # the Python float -1./3
    # the box holds "x_{0} \cos (\omega t)+$ $\dot{x}_{0} ...": the stray $ $ would split the maths
    assert (
        items[4].problem.answer
        == "x_{0} \\cos (\\omega t)+ \\dot{x}_{0} \\sin (\\omega t) / \\omega"
    )
    assert (items[5].problem.answer, items[5].unit) == ("12", "years")  # \text{ years }


def test_olympiadbench_golds():
    by_id = {item.problem.id: item for item in load("olympiadbench").items}
    assert by_id["olympiadbench/1606"].problem.answer == "2"
    assert by_id["olympiadbench/1664"].problem.answer == "69,84"  # ["$69$,$84$"]: the $ removed
    assert by_id["olympiadbench/1970"].problem.answer == "(-\\infty, 0) \\cup\\{1\\}"  # "." gone
    assert by_id["olympiadbench/2045"].problem.answer == "(0,4]"  # "$t(0,4]$", corrected
    assert by_id["olympiadbench/1782"].problem.answer == "n^{2}-n-1"  # "m_{\\max }=...", corrected
    assert by_id["olympiadbench/1965"].problem.answer == "f(x)=a x+b"  # prose dropped
    assert (by_id["olympiadbench/2419"].problem.answer, by_id["olympiadbench/2419"].unit) == (
        "166",
        "cm^2",  # unit "$cm^2$"
    )
    assert by_id["olympiadbench/1606"].unit is None


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


def test_gsm8k_gold_follows_the_hashes():
    # "...\n#### 18", "#### 3", and "#### 2,125" (thousands comma; a tab earlier in the answer)
    assert [p.answer for p in load("gsm8k").problems] == ["18", "3", "2125"]


# --- prompts ------------------------------------------------------------------------------------


def test_plain_prompt():
    problem = load("aime25").problems[0]
    assert problem.prompt == (
        "Find the sum of all integer bases $b>9$ with $b<12$.\n"
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


def test_chat_prompt_wraps_the_plain_prompt():
    plain = load("aime25").problems[0].prompt
    chat = load_benchmark("aime25", tokenizer=FakeChatTokenizer())
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


@pytest.mark.slow
@pytest.mark.parametrize("name", known_benchmarks())
def test_grader_agrees_with_equivalent_and_different_answers(name: str, grader: Grader):
    report = run_agreement(load(name), grader, max_problems=None, seed=0)
    disagreements = "\n".join(
        f"{c.problem_id} [{c.form}] gold {c.gold!r} answer {c.answer!r}: {c.outcome.value}"
        for c in report.disagreements
    )
    assert report.num_problems == len(load(name))  # every fixture row
    assert report.correct_as_correct == 1.0, disagreements
    assert report.wrong_as_correct == 0.0, disagreements
    assert len(report.different_cases) == report.num_problems  # every problem got a partner


# --- the complete real files (.ci/run's full-data stage) ------------------------------------------


@pytest.mark.full_data
@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("aime24", 30),
        ("aime25", 30),
        ("amc", 83),
        ("amc23", 40),
        ("math500", 500),
        ("minerva", 272),
        ("olympiadbench", 675),
        ("gsm8k", 1319),
    ],
)
def test_full_sizes_and_unique_ids(name: str, size: int, full_data_dir: Path):
    skip_if_never_fetched(name, full_data_dir)
    benchmark = load_benchmark(name, data_dir=full_data_dir)
    assert len(benchmark) == size
    assert len({p.id for p in benchmark.problems}) == size
    assert all(p.id.startswith(f"{name}/") and p.answer for p in benchmark.problems)


@pytest.mark.full_data
def test_full_golds_at_the_real_rows(full_data_dir: Path):
    def real(name: str) -> Benchmark:
        return load_benchmark(name, data_dir=full_data_dir)

    aime24 = real("aime24")
    assert aime24.problems[0].id == "aime24/60"  # the row's own id
    assert aime24.problems[7].answer == "25"  # stored as "025"
    assert real("aime25").problems[19].answer == "336"  # stored as "336^\circ"
    amc = real("amc23")
    assert (amc.problems[0].answer, amc.problems[15].answer) == ("27", "-1")  # 27.0, -1.0
    problem = real("math500").problems[0]
    assert problem.id == "math500/test/precalculus/807.json"
    assert problem.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    items = real("minerva").items
    assert (items[0].problem.answer, items[0].unit) == ("1.6", "cm")
    assert (items[1].problem.answer, items[1].unit) == ("4.5 \\times 10^{33}", "ergs")
    assert items[5].problem.answer == "\\arcsin(10/13)"  # np.arcsin(10/13)
    assert items[38].problem.answer == "-1/3"  # -1./3
    assert (
        items[72].problem.answer
        == "x_{0} \\cos (\\omega t)+ \\dot{x}_{0} \\sin (\\omega t) / \\omega"
    )
    by_id = {item.problem.id: item for item in real("olympiadbench").items}
    assert by_id["olympiadbench/1606"].problem.answer == "2"
    assert by_id["olympiadbench/1664"].problem.answer == "69,84"
    assert by_id["olympiadbench/1970"].problem.answer == "(-\\infty, 0) \\cup\\{1\\}"
    assert by_id["olympiadbench/2045"].problem.answer == "(0,4]"
    assert by_id["olympiadbench/1782"].problem.answer == "n^{2}-n-1"
    assert by_id["olympiadbench/1965"].problem.answer == "f(x)=a x+b"
    assert (by_id["olympiadbench/2419"].problem.answer, by_id["olympiadbench/2419"].unit) == (
        "166",
        "cm^2",
    )
    gsm8k = real("gsm8k").problems
    assert (gsm8k[0].answer, gsm8k[146].answer) == ("18", "2125")  # "#### 18", "#### 2,125"
    assert real("aime25").problems[0].prompt == (
        "Find the sum of all integer bases $b>9$ for which $17_{b}$ is a divisor of $97_{b}$.\n"
        "Please reason step by step, and put your final answer within \\boxed{}."
    )


@pytest.mark.full_data
@pytest.mark.parametrize("name", known_benchmarks())
def test_full_grader_agrees_with_equivalent_and_different_answers(
    name: str, grader: Grader, full_data_dir: Path
):
    skip_if_never_fetched(name, full_data_dir)
    benchmark = load_benchmark(name, data_dir=full_data_dir)
    report = run_agreement(benchmark, grader, max_problems=AGREEMENT_SUBSET.get(name), seed=0)
    disagreements = "\n".join(
        f"{c.problem_id} [{c.form}] gold {c.gold!r} answer {c.answer!r}: {c.outcome.value}"
        for c in report.disagreements
    )
    assert report.correct_as_correct >= 0.99, disagreements
    assert report.wrong_as_correct <= 0.01, disagreements
    assert len(report.different_cases) == report.num_problems  # every problem got a partner
