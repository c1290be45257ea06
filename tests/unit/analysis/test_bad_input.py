"""Bad input: an empty selection, runs missing a metric, mixed k, ambiguous rows give a clear message
or an explicit blank cell with a footnote, never a silent wrong number."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from quadrants.analysis import load, tables
from quadrants.analysis.tables import build_table
from quadrants.launch.analysis import main

from .conftest import eval_metrics, make_child, make_parent, new_store


@pytest.fixture
def store(template_db, tmp_path):
    uri, client = new_store(template_db, tmp_path)
    exp_id, parent = make_parent(client, tmp_path)
    return uri, client, exp_id, parent


def _table(uri, client, **kwargs):
    runset = load.select_runs(client, load.Selection(uri, "study", "sw1"))
    return build_table(
        runset.runs, load.eval_points(load.final_metrics(client, runset.run_ids)), **kwargs
    )


@pytest.mark.slow
def test_empty_selection_names_what_exists(store, capsys):
    uri, client, exp_id, parent = store
    make_child(client, exp_id, parent, "PHR", 0, eval_metrics({"aime24": (0.5, 0.8)}))
    with pytest.raises(
        load.SelectionError,
        match=r"no runs match .*sweep_id=nope.*sweep ids in the store: \['sw1'\]",
    ):
        load.select_runs(client, load.Selection(uri, "study", "nope"))
    with pytest.raises(
        load.SelectionError,
        match=r"no experiment named 'other'; the store has: \['Default', 'study'\]",
    ):
        load.select_runs(client, load.Selection(uri, "other"))
    assert main(["--tracking-uri", uri, "--sweep-id", "nope", "--no-log"]) == 2
    assert "no runs match" in capsys.readouterr().err


@pytest.mark.slow
def test_runs_without_eval_metrics(store, tmp_path, capsys):
    uri, client, exp_id, parent = store
    make_child(client, exp_id, parent, "PHR", 0, {"train/solve_rate": 0.5})
    assert (
        main(
            ["--tracking-uri", uri, "--sweep-id", "sw1", "--out", str(tmp_path / "out"), "--no-log"]
        )
        == 2
    )
    assert (
        "none of the 1 selected runs logged an eval/<benchmark>/avg_at_<k>"
        in capsys.readouterr().err
    )


def test_missing_metric_blanks_the_cell_with_a_footnote(store):
    uri, client, exp_id, parent = store
    make_child(
        client,
        exp_id,
        parent,
        "PHR",
        0,
        eval_metrics({"aime24": (0.5, 0.8), "math500": (0.7, 0.9)}),
    )
    partial = eval_metrics({"aime24": (0.6, 0.9), "math500": (0.8, 1.0)})
    del partial["eval/math500/pass_at_4"]
    make_child(client, exp_id, parent, "PHR", 1, partial)
    make_child(
        client,
        exp_id,
        parent,
        "NHR",
        0,
        eval_metrics({"aime24": (0.4, 0.7), "math500": (0.75, 0.95)}),
    )
    table = _table(uri, client)
    blank = table.cells[("PHR", "math500", "pass")]
    assert blank.estimate is None and not blank.best
    assert table.footnotes[blank.notes[0] - 1] == (
        "math500 Pass@4 missing in run(s) ['quadrant=PHR,seed=1']: cell left blank"
    )
    # the PHR Avg@4 of math500 is still there (0.7, 0.8 -> 0.75) and so is the avg column (0.6, 0.7 -> 0.65)
    assert table.cells[("PHR", "math500", "avg")].estimate.mean == pytest.approx(0.75, abs=1e-12)
    assert table.avg["PHR"].estimate.mean == pytest.approx(0.65, abs=1e-12)
    # the best Pass@4 of math500 is NHR's (the only one), not a mark on a blank
    assert (
        table.cells[("NHR", "math500", "pass")].best is False
    )  # a single valued cell marks nothing
    md = tables.to_markdown(table)
    # math500 Avg@4: PHR 0.75 ties NHR 0.75 (both bold); PHR's avg (0.65) beats NHR's (0.4 + 0.75) / 2 = 0.575
    assert (
        "| PHR | **55.0 ± 63.5** / **85.0 ± 63.5** | **75.0 ± 63.5** / —[1] | **65.0 ± 63.5** | 2 |"
        in md
    )
    assert "[1] math500 Pass@4 missing in run(s) ['quadrant=PHR,seed=1']: cell left blank" in md
    csv = tables.to_frame(table).set_index(["row", "benchmark", "metric"])
    assert math.isnan(csv.loc[("PHR", "math500", "pass"), "mean"])
    assert "missing in run(s)" in csv.loc[("PHR", "math500", "pass"), "notes"]


def test_missing_benchmark_blanks_the_avg_column(store):
    uri, client, exp_id, parent = store
    make_child(
        client,
        exp_id,
        parent,
        "PHR",
        0,
        eval_metrics({"aime24": (0.5, 0.8), "math500": (0.7, 0.9)}),
    )
    make_child(client, exp_id, parent, "NHR", 0, eval_metrics({"aime24": (0.4, 0.7)}))
    table = _table(uri, client)
    assert table.avg["NHR"].estimate is None
    assert "avg left blank" in table.footnotes[table.avg["NHR"].notes[0] - 1]
    assert table.avg["PHR"].estimate.mean == pytest.approx(0.6, abs=1e-12)


def _frames(ks_by_run: dict[str, list[int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs r0, r1, ... (quadrants PHR, NHR, ...) logging aime24 Avg/Pass at the given k; value = k / 100."""
    quadrants = ["PHR", "NHR", "PLR", "NLR"]
    runs = pd.DataFrame(
        [
            {
                "run_id": r,
                "run_name": f"quadrant={quadrants[i]}",
                "status": "FINISHED",
                "quadrant": quadrants[i],
                "seed": "0",
            }
            for i, r in enumerate(ks_by_run)
        ]
    )
    points = pd.DataFrame(
        [
            {"run_id": r, "benchmark": "aime24", "kind": kind, "k": k, "step": 60, "value": k / 100}
            for r, ks in ks_by_run.items()
            for k in ks
            for kind in ("avg", "pass")
        ]
    )
    return runs, points


def test_mixed_k_uses_the_largest_common_k_and_says_so():
    table = build_table(*_frames({"r0": [1, 2, 4], "r1": [1, 2, 4, 8]}))
    assert table.ks["aime24"] == 4
    assert table.cells[("PHR", "aime24", "pass")].estimate.mean == 0.04  # not r1's k=8 point 0.08
    assert table.cells[("NHR", "aime24", "pass")].estimate.mean == 0.04
    assert table.footnotes == (
        (
            "aime24: runs logged different k (quadrant=NHR: [1, 2, 4, 8]; "
            "quadrant=PHR: [1, 2, 4]); compared at the largest common k=4"
        ),
    )


def test_no_common_k_blanks_the_column():
    table = build_table(*_frames({"r0": [4], "r1": [8]}))
    assert table.ks["aime24"] is None
    assert all(cell.estimate is None for cell in table.cells.values())
    assert (
        table.footnotes[0]
        == "aime24: the runs share no k, nothing is compared (quadrant=NHR: [8]; quadrant=PHR: [4])"
    )
    assert "aime24 (no common k)" in tables.to_markdown(table)


def test_asked_k_missing_in_a_run():
    table = build_table(*_frames({"r0": [4, 8], "r1": [4]}), k=8)
    assert table.cells[("PHR", "aime24", "avg")].estimate.mean == 0.08
    assert table.cells[("NHR", "aime24", "avg")].estimate is None
    assert table.footnotes[0] == "aime24: k=8 was asked for; run(s) without it (quadrant=NHR: [4])"


def test_two_runs_of_one_seed_in_a_row_is_an_error():
    runs, points = _frames({"r0": [4], "r1": [4]})
    runs["quadrant"] = "PHR"
    with pytest.raises(ValueError, match=r"put several runs of one seed in a row .*--rows swept"):
        build_table(runs, points, rows=["quadrant"])


def test_default_rows_fall_back_to_the_swept_keys():
    # an alpha sweep: the tags are identical, only the run names (Hydra overrides) tell the runs apart
    runs, points = _frames({"r0": [4], "r1": [4]})
    runs["quadrant"] = "all"
    runs["objective"] = "hapo"
    runs["run_name"] = ["objective.params.alpha=0.1,seed=0", "objective.params.alpha=0.2,seed=0"]
    table = build_table(runs, points)
    assert table.row_tags == ("swept",)
    assert table.rows == ("objective.params.alpha=0.1", "objective.params.alpha=0.2")


def test_unknown_row_tag_and_benchmark():
    runs, points = _frames({"r0": [4], "r1": [4]})
    with pytest.raises(
        ValueError, match=r"row tag\(s\) \['method'\] not on these runs; available: .*'quadrant'"
    ):
        build_table(runs, points, rows=["method"])
    with pytest.raises(
        ValueError,
        match=r"benchmark\(s\) \['aime25'\] not logged by these runs; logged: \['aime24'\]",
    ):
        build_table(runs, points, benchmarks=["aime25"])


def test_unfinished_runs_and_different_eval_steps_are_footnoted():
    runs, points = _frames({"r0": [4], "r1": [4]})
    runs.loc[1, "status"] = "FAILED"
    points.loc[points["run_id"] == "r1", "step"] = 20
    table = build_table(runs, points)
    assert table.footnotes == (
        "runs not FINISHED (their last logged values are used): quadrant=NHR (FAILED)",
        "aime24: final evaluations were at different steps [20, 60]",
    )
    assert table.cells[("PHR", "aime24", "avg")].notes == (2,)
