"""The paper presets' training set as the Hub serves it: DeepScaleR-Preview's rows carry only
`problem`, `answer` and `solution` (no `index`, which our offline subset has). Each paper preset's
task loads a local copy of exactly that shape through the Hub path itself (`datasets.load_dataset`
on a local dataset directory, then the row reader every source shares,
`DatasetTask._problems`), and through a local file; a row without an id gets a hash of its problem.
"""

from __future__ import annotations

import pandas as pd
import pytest

from quadrants.launch.hydra_setup import compose_run_config
from quadrants.tasks import make_task, validate_task
from quadrants.tasks.dataset import normalise_text, problem_hash

PAPER_PRESETS = ("paper_quadrants_qwen7b", "paper_main_qwen7b", "paper_main_dsr1p5b")
ROWS = 520  # above the presets' task.heldout_size = 500


def hub_shaped(directory):
    """A dataset directory as the Hub lays out DeepScaleR-Preview: one Parquet file of the train
    split with exactly its three columns."""
    (directory / "data").mkdir(parents=True)
    frame = pd.DataFrame(
        {
            "problem": [f"What is {i} + {i + 1}?" for i in range(ROWS)],
            "answer": [str(2 * i + 1) for i in range(ROWS)],
            "solution": [f"{i} + {i + 1} = \\boxed{{{2 * i + 1}}}" for i in range(ROWS)],
        }
    )
    frame.to_parquet(directory / "data" / "train-00000-of-00001.parquet")
    return directory


def test_the_hash_id_is_stable_and_never_an_index():
    # the same problem however it is spaced or cased; "h" + 12 hex digits
    assert problem_hash("What is  1 + 2?") == problem_hash("what is 1 + 2?")
    assert problem_hash("What is 1 + 2?") != problem_hash("What is 1 + 3?")
    assert problem_hash("x").startswith("h") and len(problem_hash("x")) == 13
    assert normalise_text("What is  1 + 2?") == "what is 1 + 2?"


@pytest.mark.parametrize("experiment", PAPER_PRESETS)
def test_each_paper_preset_loads_hub_shaped_rows_through_the_hub_path(
    experiment, tmp_path, monkeypatch
):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    cfg = compose_run_config([f"experiment={experiment}", "seed=0", "objective=dapo"])
    assert cfg.task.name == "deepscaler" and cfg.task.params["source"] == "hub"
    # the paper's prompt limit for the 1.5B runs (the 7B presets keep the schema's 1,024)
    assert cfg.task.max_prompt_tokens == (2048 if experiment == "paper_main_dsr1p5b" else 1024)
    params = {**cfg.task.params, "hub": str(hub_shaped(tmp_path / "dsr")), "decontaminate": []}
    validate_task(cfg.task.name, cfg.task.heldout_size, params)
    task = make_task(cfg.task.name, cfg.task.heldout_size, params)
    assert len(task) == ROWS - 500 and len(task.heldout()) == 500
    problem = task.heldout()[0]
    assert problem.id == f"deepscaler/{problem_hash(problem.prompt)}"
    # the gold is the answer column (gold=plain), the solution column is not read
    number = int(problem.prompt.split()[2])
    assert problem.answer == str(2 * number + 1)


def test_a_local_file_of_the_hubs_columns_loads_and_the_offline_ids_stay(tmp_path):
    path = hub_shaped(tmp_path / "dsr") / "data" / "train-00000-of-00001.parquet"
    params = {"path": str(path), "decontaminate": []}
    validate_task("deepscaler", 10, params)  # compose time: the id column is not required
    task = make_task("deepscaler", 10, params)
    assert len(task) == ROWS - 10
    assert all(p.id == f"deepscaler/{problem_hash(p.prompt)}" for p in task.heldout())
    # rows that carry the preset's id key (the offline subset's `index`) keep it
    indexed = tmp_path / "indexed.jsonl"
    indexed.write_text('{"problem": "What is 1 + 1?", "answer": "2", "index": 7}\n' * 3)
    assert make_task("deepscaler", 1, {"path": str(indexed), "decontaminate": []}).heldout()[
        0
    ].id == ("deepscaler/7")
