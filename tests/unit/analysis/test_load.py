"""Reading runs back from a real MLflow store: selection, final values, standalone evaluations,
per-problem tables, samples."""

from __future__ import annotations

import pytest
from mlflow.entities import Metric

from quadrants.analysis import load, tables
from quadrants.analysis.report import pass_at_k_by_run

from .conftest import eval_metrics, make_child, make_parent, new_store


def test_selection_excludes_the_parent_and_finds_it(study_store):
    client = study_store["client"]
    runset = load.select_runs(client, load.Selection(study_store["uri"], "study", "sw1"))
    assert set(runset.run_ids) == set(study_store["runs"].values())
    assert runset.parent_run_id == study_store["parent"]
    assert list(runset.runs["run_name"]) == sorted(runset.runs["run_name"])
    assert load.latest_sweep(client) == ("study", "sw1")
    by_tag = load.select_runs(
        client, load.Selection(study_store["uri"], tags=(("quadrant", "PLR"),))
    )
    assert by_tag.run_ids == [study_store["runs"][("PLR", 0)]]
    by_parent = load.select_runs(
        client, load.Selection(study_store["uri"], parent_run_id=study_store["parent"])
    )
    assert set(by_parent.run_ids) == set(runset.run_ids)


def test_final_values_are_those_of_the_largest_step(study_store):
    client, run_id = study_store["client"], study_store["runs"][("PHR", 0)]
    points = load.eval_points(load.final_metrics(client, [run_id]))
    got = {(p.benchmark, p.kind, p.k): (p.step, p.value) for p in points.itertuples()}
    assert got == {
        ("aime24", "avg", 4): (60, 0.5),
        ("aime24", "pass", 4): (60, 0.8),
        ("math500", "avg", 4): (60, 0.7),
        ("math500", "pass", 4): (60, 0.9),
    }


def test_problem_tables_take_the_newest_csv(study_store):
    client, run_id = study_store["client"], study_store["runs"][("PHR", 0)]
    tables = load.problem_tables(client, run_id, ["aime24", "math500"])
    step, table = tables["aime24"]
    assert step == 60 and table.to_dict("list") == {"n": [4, 4], "c": [2, 0]}
    assert set(tables) == {"aime24"}


def test_pass_at_k_curve_from_the_table_else_from_logged_points(study_store, study_frames):
    client = study_store["client"]
    runset, points = study_frames
    curves, sources = pass_at_k_by_run(client, runset, points)
    phr0, nhr0 = study_store["runs"][("PHR", 0)], study_store["runs"][("NHR", 0)]
    # (4, 2), (4, 0): pass@1 = (2/4 + 0) / 2 = 0.25; pass@2 = (1 - C(2,2)/C(4,2) + 0) / 2 = (5/6) / 2;
    # pass@4 = (1 + 0) / 2 = 0.5
    assert curves[phr0]["aime24"] == pytest.approx({1: 0.25, 2: 5 / 12, 4: 0.5}, abs=1e-12)
    assert curves[phr0]["math500"] == {4: 0.9}  # no table: the logged point
    assert sources[phr0] == "(n, c) table" and sources[nhr0] == "logged points"
    assert curves[nhr0] == {"aime24": {4: 0.7}, "math500": {4: 0.95}}


def test_samples_records_carry_their_step(study_store):
    records = load.load_samples(study_store["client"], study_store["runs"][("NHR", 1)])
    assert [r["step"] for r in records] == [3, 3]
    assert [r["reward"] for r in records] == [1.0, 0.0]
    assert records[1]["tokens"][1] == {"text": "&", "entropy": 0.02, "quadrant": "NLR"}


def test_standalone_evaluations_count_for_their_training_run(template_db, tmp_path):
    uri, client = new_store(template_db, tmp_path)
    exp_id, parent = make_parent(client, tmp_path)
    train = make_child(
        client, exp_id, parent, "PHR", 0, eval_metrics({"aime24": (0.5, 0.8)}), step=30
    )
    # python -m quadrants.evaluate <run dir>: its own run, tagged with the source run, logged at the
    # checkpoint's step; it re-evaluates aime24 at n = 8 and overrides nothing at k = 4
    tags = {
        "quadrants.role": "eval",
        "quadrants.source_run_id": train,
        "quadrants.sweep_id": "sw1",
        "quadrant": "PHR",
        "seed": "0",
        "quadrants.checkpoint_step": "30",
    }
    evaluation = client.create_run(exp_id, run_name="eval run", tags=tags).info.run_id
    client.log_batch(
        evaluation,
        metrics=[
            Metric(k, v, 5, 30) for k, v in eval_metrics({"aime24": (0.6, 0.95)}, k=8).items()
        ],
    )
    # an evaluation of the base model (no source run) is a row of its own
    base = client.create_run(
        exp_id,
        run_name="eval tiny",
        tags={
            "quadrants.role": "eval",
            "quadrants.sweep_id": "sw1",
            "quadrant": "base",
            "seed": "0",
        },
    ).info.run_id
    runset = load.select_runs(client, load.Selection(uri, "study", "sw1"))
    assert set(runset.run_ids) == {train, base}
    assert runset.eval_runs == {train: [evaluation]}
    # selected as the parent's children, the training run still finds its (parentless) evaluation
    by_parent = load.select_runs(client, load.Selection(uri, parent_run_id=parent))
    assert by_parent.run_ids == [train] and by_parent.eval_runs == {train: [evaluation]}
    # an evaluation of a model (no training tags) is labelled by its run name
    untagged = client.create_run(
        exp_id, run_name="eval Qwen", tags={"quadrants.role": "eval"}
    ).info.run_id
    runs = load.select_runs(client, load.Selection(uri, "study")).runs
    assert dict(zip(runs["run_id"], tables.row_labels(runs, ["quadrant"])))[untagged] == "eval Qwen"
    points = load.eval_points(load.final_metrics(client, [train], runset.eval_runs))
    got = {(p.kind, p.k): p.value for p in points.itertuples()}
    assert got == {("avg", 4): 0.5, ("pass", 4): 0.8, ("avg", 8): 0.6, ("pass", 8): 0.95}


def test_a_probe_run_of_the_sweep_is_not_a_row(template_db, tmp_path):
    """`python -m quadrants.probe` on a sweep's checkpoint logs a run carrying the sweep id (and the
    quadrant and seed of its source); tagged quadrants.role = probe, it is left out of the tables,
    as training runs tagged quadrants.role = train (and older untagged ones) are kept."""
    uri, client = new_store(template_db, tmp_path)
    exp_id, parent = make_parent(client, tmp_path)
    untagged = make_child(client, exp_id, parent, "PHR", 0, eval_metrics({"aime24": (0.5, 0.8)}))
    tagged = make_child(client, exp_id, parent, "NHR", 0, eval_metrics({"aime24": (0.4, 0.7)}))
    client.set_tag(tagged, "quadrants.role", "train")
    tags = {"quadrants.role": "probe", "quadrants.sweep_id": "sw1", "quadrant": "PHR", "seed": "0"}
    client.create_run(exp_id, run_name="probe", tags=tags)
    runset = load.select_runs(client, load.Selection(uri, "study", "sw1"))
    assert set(runset.run_ids) == {untagged, tagged}
    assert sorted(runset.runs["quadrant"]) == ["NHR", "PHR"]
