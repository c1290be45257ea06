"""Dataset tasks on small files the tests write: JSONL, Parquet, nested (verl) keys, splits,
decontamination and bad input."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from quadrants.tasks import make_task, validate_task
from quadrants.tasks.dataset import DatasetTask, lookup, normalise_text


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


ROWS = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(10)]


def test_jsonl_rows_become_problems_with_a_seeded_heldout_split(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", ROWS)
    task = DatasetTask(3, path=str(path), decontaminate=[])
    held, train = task.heldout(), task.train_batch(len(task), random.Random(0))
    assert len(held) == 3 and len(task) == 7
    assert {p.prompt for p in held}.isdisjoint(p.prompt for p in train)  # disjoint, together all 10
    assert {p.prompt for p in held} | {p.prompt for p in train} == {r["problem"] for r in ROWS}
    # every problem keeps its own gold: "What is i + i?" -> 2i
    assert all(p.answer == str(2 * int(p.prompt.split()[2])) for p in held + train)
    # the split depends on split_seed only; the same seed gives the same split
    assert DatasetTask(3, path=str(path), decontaminate=[]).heldout() == held
    assert DatasetTask(3, path=str(path), decontaminate=[], split_seed=1).heldout() != held


def test_draws_are_deterministic_per_step_seed(tmp_path):
    task = DatasetTask(2, path=str(write_jsonl(tmp_path / "t.jsonl", ROWS)), decontaminate=[])
    first = task.train_batch(4, random.Random(17))
    assert task.train_batch(4, random.Random(17)) == first  # a resumed step draws the same prompts
    assert len({p.id for p in first}) == 4  # without replacement within a step


def test_parquet_with_verl_nested_keys(tmp_path):
    """verl format: the gold under reward_model.ground_truth, the user turn under prompt.0.content."""
    suffix = " Let's think step by step and output the final answer within \\boxed{}."
    frame = pd.DataFrame(
        [
            {
                "prompt": [{"role": "user", "content": f"Compute {i}*3.{suffix}"}],
                "reward_model": {"ground_truth": str(3 * i), "style": "rule"},
                "extra_info": {"index": 100 + i},
            }
            for i in range(5)
        ]
    )
    path = tmp_path / "verl.parquet"
    frame.to_parquet(path)
    task = DatasetTask(
        1,
        path=str(path),
        problem_key="prompt.0.content",
        answer_key="reward_model.ground_truth",
        id_key="extra_info.index",
        strip_suffix=suffix,
        decontaminate=[],
    )
    problems = task.heldout() + task.train_batch(4, random.Random(0))
    assert sorted(p.prompt for p in problems) == [
        f"Compute {i}*3." for i in range(5)
    ]  # suffix stripped
    assert {p.id: p.answer for p in problems}["dataset/102"] == "6"


def test_a_directory_of_files_and_a_heldout_file(tmp_path):
    (tmp_path / "data").mkdir()
    write_jsonl(tmp_path / "data" / "a.jsonl", ROWS[:5])
    write_jsonl(tmp_path / "data" / "b.jsonl", ROWS[5:])
    held = write_jsonl(tmp_path / "held.jsonl", [ROWS[0], {"problem": "New one?", "answer": "7"}])
    task = DatasetTask(0, path=str(tmp_path / "data"), heldout_path=str(held), decontaminate=[])
    assert [p.prompt for p in task.heldout()] == ["What is 0 + 0?", "New one?"]
    assert len(task) == 9  # the held-out file's problems never train ("What is 0 + 0?" removed)


def test_gold_rules_of_the_benchmark_loaders(tmp_path):
    rows = [
        {"question": "q1", "answer": "5 apples\n#### 1,234"},
        {"question": "q2", "answer": "x\n#### 7"},
    ]
    task = DatasetTask(
        1,
        path=str(write_jsonl(tmp_path / "g.jsonl", rows)),
        problem_key="question",
        gold="gsm8k",
        decontaminate=[],
    )
    assert sorted(p.answer for p in task.heldout() + task.train_batch(1, random.Random(0))) == [
        "1234",
        "7",
    ]
    boxed = [
        {"problem": "p", "solution": "so \\boxed{\\frac{1}{2}}."},
        {"problem": "r", "solution": "\\boxed{3}"},
    ]
    task = DatasetTask(
        0,
        path=str(write_jsonl(tmp_path / "m.jsonl", boxed)),
        answer_key="solution",
        gold="boxed",
        decontaminate=[],
    )
    assert sorted(p.answer for p in task.train_batch(2, random.Random(0))) == ["3", "\\frac{1}{2}"]


def test_rows_without_an_answer_are_skipped_and_counted(tmp_path):
    rows = [
        *ROWS[:4],
        {"problem": "no gold", "answer": ""},
        {"problem": "null gold", "answer": None},
    ]
    task = DatasetTask(1, path=str(write_jsonl(tmp_path / "e.jsonl", rows)), decontaminate=[])
    assert task.skipped_empty == 2 and len(task) + len(task.heldout()) == 4


def test_decontamination_drops_benchmark_problems(tmp_path):
    """gsm8k's test file holds 'Ann has 2 apples.' (spaced and cased differently in the training
    file): that row is dropped and counted; the other two stay."""
    bench = tmp_path / "bench"
    (bench / "gsm8k").mkdir(parents=True)
    write_jsonl(
        bench / "gsm8k" / "test.jsonl", [{"question": "Ann  has 2 apples.", "answer": "#### 2"}]
    )
    rows = [
        {"problem": "ann has 2\napples.", "answer": "2"},
        {"problem": "Bob?", "answer": "1"},
        {"problem": "Cy?", "answer": "3"},
    ]
    task = DatasetTask(
        0,
        path=str(write_jsonl(tmp_path / "t.jsonl", rows)),
        decontaminate=["gsm8k"],
        data_dir=str(bench),
    )
    assert task.decontaminated == 1
    assert sorted(p.prompt for p in task.train_batch(2, random.Random(0))) == ["Bob?", "Cy?"]
    assert normalise_text(" Ann  has\t2 Apples. ") == "ann has 2 apples."


def test_a_missing_file_names_the_path_and_the_data_variable(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"no dataset file or directory at .*nowhere.jsonl.*QUADRANTS_DATA"
    ):
        DatasetTask(1, path=str(tmp_path / "nowhere.jsonl"))
    with pytest.raises(FileNotFoundError, match="QUADRANTS_DATA"):  # at compose time too
        validate_task("dataset", 1, {"path": str(tmp_path / "nowhere.jsonl")})


def test_a_missing_key_names_the_key_the_file_and_the_keys_that_exist(tmp_path):
    path = write_jsonl(tmp_path / "k.jsonl", [{"question": "q", "reward_model": {"truth": "1"}}])
    with pytest.raises(
        KeyError,
        match=r"k.jsonl, row 0: no key 'problem' in the row \(it has \['question', 'reward_model'\]\)",
    ):
        DatasetTask(0, path=str(path), decontaminate=[])
    with pytest.raises(
        KeyError, match=r"no key 'ground_truth' in reward_model \(it has \['truth'\]\)"
    ):
        DatasetTask(
            0,
            path=str(path),
            problem_key="question",
            answer_key="reward_model.ground_truth",
            decontaminate=[],
        )
    assert lookup({"a": [{"b": 5}]}, "a.0.b") == 5


def test_presets_read_the_shared_files(tmp_path):
    """task=gsm8k reads gsm8k/train.jsonl under the data directory with its gold rule."""
    (tmp_path / "gsm8k").mkdir()
    write_jsonl(
        tmp_path / "gsm8k" / "train.jsonl",
        [{"question": f"q{i}", "answer": f"#### {i},000"} for i in range(4)],
    )
    task = make_task("gsm8k", 1, {"data_dir": str(tmp_path), "decontaminate": []})
    assert task.name == "gsm8k" and len(task) == 3
    assert task.heldout()[0].answer.endswith("000") and task.heldout()[0].id.startswith("gsm8k/")


def test_compose_time_checks_name_the_key():
    with pytest.raises(ValueError, match=r"task.params: unknown key\(s\) \['answer_field'\]"):
        validate_task("dataset", 1, {"path": "x", "answer_field": "a"})
    with pytest.raises(
        ValueError, match=r"task.params.gold='latex' is unknown; choose one of \['plain'"
    ):
        validate_task("gsm8k", 1, {"gold": "latex"})
    with pytest.raises(ValueError, match="task.params.source=hub needs task.params.hub"):
        validate_task("dataset", 1, {"source": "hub"})
    with pytest.raises(
        ValueError, match="task=arithmetic is the embedded character-level world.*task=gsm8k"
    ):
        validate_task("arithmetic", 10, {}, model="Qwen/Qwen2.5-Math-7B")
    validate_task("arithmetic", 10, {}, model="tiny")  # the embedded world and its model
    validate_task("math", 10, {})  # hub only: nothing to check offline
