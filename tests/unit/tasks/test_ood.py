"""The out-of-domain loaders read files in each dataset's exact hub schema (written here; nothing is
shipped), shuffle GPQA's options by a seed per question, and fail naming the file or the row."""

from __future__ import annotations

import csv
import json
import sys
import types

import pytest

from quadrants.rewards.choice import ChoiceRule
from quadrants.rewards.graph import GraphRule
from quadrants.rewards.outcome import Outcome
from quadrants.tasks.ood import (
    CHOICE_INSTRUCTION,
    GRAPHWIZ_TASKS,
    get_ood_spec,
    gpqa_permutation,
    known_ood_benchmarks,
    load_ood_benchmark,
)
from tests.ood_samples import GPQA_ROWS, write_ood_samples


@pytest.fixture
def data_dir(tmp_path):
    write_ood_samples(tmp_path)
    return tmp_path


def test_registry_and_files():
    assert known_ood_benchmarks() == ["gpqa", "mmlu_pro", "graphwiz"]
    assert get_ood_spec("gpqa").local_files == ("gpqa/gpqa_diamond.csv",)
    assert get_ood_spec("graphwiz").local_files == tuple(
        f"graphwiz/{t}.jsonl" for t in GRAPHWIZ_TASKS
    )
    with pytest.raises(
        ValueError, match=r"unknown out-of-domain benchmark 'gpqa_main'; known: \['gpqa'"
    ):
        get_ood_spec("gpqa_main")


def test_gpqa_options_are_shuffled_by_a_seed_per_question_and_the_permutation_is_kept(data_dir):
    gpqa = load_ood_benchmark("gpqa", data_dir=data_dir)
    assert (
        len(gpqa) == 6
        and [item.group for item in gpqa.items]
        == ["physics"] * 2 + ["chemistry"] * 2 + ["biology"] * 2
    )
    first = gpqa.items[0]
    # "recSample01": random.Random("gpqa/recSample01") shuffles [0, 1, 2, 3] to [1, 3, 0, 2]: letter A shows
    # Incorrect Answer 1 (joule), B Incorrect Answer 3 (pascal), C the correct answer (newton), D Incorrect 2 (watt)
    assert gpqa_permutation("recSample01") == (1, 3, 0, 2)
    assert first.problem.id == "gpqa/recSample01" and first.problem.answer == "C"
    assert first.problem.prompt == (
        "What is the SI unit of force?\n\n(A) joule\n(B) pascal\n(C) newton\n(D) watt\n"
        + CHOICE_INSTRUCTION
    )
    assert (
        first.rule == ChoiceRule(gold="C", options=4, permutation=(1, 3, 0, 2))
        and first.rule.chance == 0.25
    )
    # every question: the gold letter shows the correct answer, the same order on every load
    again = load_ood_benchmark("gpqa", data_dir=data_dir)
    for item, repeat, row in zip(gpqa.items, again.items, GPQA_ROWS):
        assert f"({item.problem.answer}) {row['Correct Answer']}\n" in item.problem.prompt
        assert item.problem.prompt == repeat.problem.prompt
    # the shuffle is per question: not every question has its correct answer under the same letter
    assert len({item.problem.answer for item in gpqa.items}) > 1


def test_gpqa_reads_the_hub_csv_with_a_byte_order_mark_and_extra_columns(tmp_path):
    (tmp_path / "gpqa").mkdir()
    columns = [
        "Canary String",
        "Question",
        "Correct Answer",
        "Incorrect Answer 1",
        "Incorrect Answer 2",
        "Incorrect Answer 3",
        "Record ID",
        "High-level domain",
        "Subdomain",
        "Writer's Difficulty Estimate",
    ]
    with (tmp_path / "gpqa" / "gpqa_diamond.csv").open(
        "w", encoding="utf-8-sig", newline=""
    ) as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerow(
            [
                "x",
                "Multi-line\nquestion, with a comma?",
                "yes",
                "no",
                "maybe",
                "never",
                "rec9",
                "Physics",
                "Optics",
                "hard",
            ]
        )
    (item,) = load_ood_benchmark("gpqa", data_dir=tmp_path).items
    assert (
        item.question.startswith("Multi-line\nquestion, with a comma?\n\n(A) ")
        and item.group == "physics"
    )
    assert item.rule.grade(f"\\boxed{{{item.problem.answer}}}") is Outcome.correct


def test_gpqa_row_without_an_option_names_the_row(tmp_path):
    (tmp_path / "gpqa").mkdir()
    row = {**GPQA_ROWS[0], "Incorrect Answer 3": ""}
    with (tmp_path / "gpqa" / "gpqa_diamond.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    with pytest.raises(
        ValueError,
        match=r"gpqa row 'recSample01': empty or missing column\(s\) \['Incorrect Answer 3'\]",
    ):
        load_ood_benchmark("gpqa", data_dir=tmp_path)


def test_missing_gpqa_file_says_it_is_gated_and_never_shipped(tmp_path):
    with pytest.raises(FileNotFoundError, match="gpqa: no data file at") as err:
        load_ood_benchmark("gpqa", data_dir=tmp_path)
    assert str(tmp_path / "gpqa" / "gpqa_diamond.csv") in str(err.value) and "gated" in str(
        err.value
    )


def test_mmlu_pro_keeps_the_dataset_order_groups_by_category_and_counts_options(data_dir):
    mmlu = load_ood_benchmark("mmlu_pro", data_dir=data_dir)
    assert [item.group for item in mmlu.items] == [
        "math",
        "math",
        "computer_science",
        "computer_science",
        "history",
        "history",
    ]
    first, four_options = mmlu.items[0], mmlu.items[2]
    assert (
        first.problem.id == "mmlu_pro/70001" and first.problem.answer == "E"
    )  # 2 + 3 = 5, option E
    assert "(E) 5\n(F) 6" in first.problem.prompt and first.rule.chance == 0.1
    assert four_options.rule == ChoiceRule(gold="B", options=4) and four_options.rule.chance == 0.25
    assert "(D) tree\n" + CHOICE_INSTRUCTION in four_options.problem.prompt


def test_mmlu_pro_answer_and_index_must_agree(tmp_path):
    (tmp_path / "mmlu_pro").mkdir()
    row = {
        "question_id": 5,
        "question": "q",
        "options": ["a", "b", "c"],
        "answer": "B",
        "answer_index": 2,
        "cot_content": "",
        "category": "law",
        "src": "x",
    }
    (tmp_path / "mmlu_pro" / "test.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="mmlu_pro question 5: answer 'B' but answer_index 2"):
        load_ood_benchmark("mmlu_pro", data_dir=tmp_path)


def test_graphwiz_reads_nine_task_files_and_picks_each_rule_from_the_reference(data_dir):
    graphwiz = load_ood_benchmark("graphwiz", data_dir=data_dir)
    assert len(graphwiz) == 18 and [item.group for item in graphwiz.items[::2]] == list(
        GRAPHWIZ_TASKS
    )
    kinds = {item.group: item.rule.kind for item in graphwiz.items}
    assert kinds == {
        "cycle": "yes_no",
        "connectivity": "yes_no",
        "bipartite": "yes_no",
        "topology": "orders",
        "shortest": "number",
        "triangle": "number",
        "flow": "number",
        "hamilton": "yes_no",
        "substructure": "yes_no",
    }
    topology = graphwiz.items[6]
    assert topology.problem.id == "graphwiz/topology/0" and isinstance(topology.rule, GraphRule)
    assert (
        topology.rule.grade("\\boxed{0, 2, 1, 3}") is Outcome.correct
    )  # valid, and not the first listed


def test_missing_graphwiz_task_file_names_it(data_dir):
    (data_dir / "graphwiz" / "flow.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="graphwiz: no data file at .*graphwiz/flow.jsonl"):
        load_ood_benchmark("graphwiz", data_dir=data_dir)


def test_item_text_is_the_question_with_its_options_and_the_prompt_adds_the_instruction(data_dir):
    (item, *_) = load_ood_benchmark("mmlu_pro", data_dir=data_dir).items
    assert item.question.startswith("What is 2 + 3?\n\n(A) 1\n(B) 2") and item.question.endswith(
        "(J) 10"
    )
    assert item.problem.prompt == f"{item.question}\n{CHOICE_INSTRUCTION}"


def test_hub_reads_the_documented_datasets(monkeypatch):
    calls = []

    class DatasetDict(dict):
        pass

    def load_dataset(path, config, split):
        calls.append((path, config, split))
        if path == "Idavidrein/gpqa":
            return [GPQA_ROWS[0]]
        return DatasetDict(
            test=[
                {
                    "index": 0,
                    "input_prompt": "Is it? Q: The nodes are numbered from 0 to 1, and "
                    "the edges are: (0, 1).",
                    "answer": "### Yes",
                }
            ]
        )

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert load_ood_benchmark("gpqa", source="hub").items[0].problem.id == "gpqa/recSample01"
    graphwiz = load_ood_benchmark("graphwiz", source="hub")
    assert [item.problem.id for item in graphwiz.items] == [
        f"graphwiz/{task}/0" for task in GRAPHWIZ_TASKS
    ]
    assert calls == [
        ("Idavidrein/gpqa", "gpqa_diamond", "train"),
        *[("GraphWiz/GraphInstruct-Test", task, None) for task in GRAPHWIZ_TASKS],
    ]
