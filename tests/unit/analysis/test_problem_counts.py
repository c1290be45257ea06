"""Runs evaluated on different problems (`eval.limit` takes the first N; `eval/<benchmark>/problems`
says how many) are shown but never compared: no bold, no avg comparison, no paired difference.

Every store is a real MLflow store (conftest.py); one seed per row, so no interval.
"""

from __future__ import annotations

import pytest
from mlflow.entities import Metric

from quadrants.analysis import load, tables
from quadrants.analysis.report import ReportOptions, build_report

from .conftest import eval_metrics, make_child, make_parent, new_store


@pytest.fixture
def store(template_db, tmp_path):
    uri, client = new_store(template_db, tmp_path / "store")
    exp_id, parent = make_parent(client, tmp_path / "store")
    return uri, client, exp_id, parent


def log_problems(client, run_id: str, problems: dict[str, int], steps=(60,)) -> None:
    """`eval/<benchmark>/problems` at `steps`, as the evaluation runner logs it next to Avg@k."""
    client.log_batch(
        run_id,
        metrics=[
            Metric(f"eval/{bench}/problems", float(n), 1, step)
            for bench, n in problems.items()
            for step in steps
        ],
    )


def _report(uri, tmp_path, **options):
    return build_report(
        load.Selection(uri, "study", "sw1"),
        tmp_path / "out",
        ReportOptions(log_to_parent=False, figures=False, **options),
    )


def test_limited_run_is_footnoted_not_bold_and_left_out_of_compare(store, tmp_path):
    # the reviewer's case: PHR evaluated all 500 MATH-500 problems (40 %), NHR with eval.limit=5
    # solved all 5 (100 %); both evaluated the 30 AIME24 problems (PHR 50 / 80, NHR 40 / 70)
    uri, client, exp_id, parent = store
    full = make_child(
        client,
        exp_id,
        parent,
        "PHR",
        0,
        eval_metrics({"aime24": (0.5, 0.8), "math500": (0.4, 0.4)}),
    )
    limited = make_child(
        client,
        exp_id,
        parent,
        "NHR",
        0,
        eval_metrics({"aime24": (0.4, 0.7), "math500": (1.0, 1.0)}),
    )
    log_problems(client, full, {"aime24": 30, "math500": 500})
    log_problems(client, limited, {"aime24": 30, "math500": 5})
    report = _report(uri, tmp_path, compare=("NHR", "PHR"))
    table = report.table
    assert dict(table.problems) == {"aime24": 30, "math500": 500}
    assert table.uncompared == {(limited, "math500")}
    note = (
        "math500: evaluated on 5 of 500 problems in run(s) ['quadrant=NHR,seed=0']: "
        "not compared (no bold, avg or --compare)"
    )
    avg_note = (
        "avg not compared where a row's runs were evaluated on fewer problems (or an unknown "
        "number) in one of its benchmarks"
    )
    assert table.footnotes == (note, avg_note)
    # math500: NHR's 100 % is not compared, so PHR's 40 % is the only compared value: nothing bold
    assert not any(cell.best for (_, bench, _), cell in table.cells.items() if bench == "math500")
    assert not table.cells[("NHR", "math500", "avg")].compared
    # aime24 is compared as usual: PHR 50 > 40, 80 > 70
    assert (
        table.cells[("PHR", "aime24", "avg")].best and table.cells[("PHR", "aime24", "pass")].best
    )
    # avg: NHR (0.4 + 1.0) / 2 = 0.70 is shown, footnoted, not compared; PHR (0.5 + 0.4) / 2 = 0.45
    # is then the only compared avg: not bold either
    assert table.avg["NHR"].estimate.mean == pytest.approx(0.70, abs=1e-12)
    assert not table.avg["NHR"].compared and not table.avg["NHR"].best
    assert table.avg["PHR"].estimate.mean == pytest.approx(0.45, abs=1e-12)
    assert not table.avg["PHR"].best
    md = (tmp_path / "out" / "table.md").read_text()
    lines = md.splitlines()
    assert "problems per benchmark: aime24 30, math500 500" in lines[0]
    assert lines[4] == "| NHR | 40.0 / 70.0 | 100.0[1] / 100.0[1] | 70.0[2] | 1 (no CI) |"
    assert lines[5] == "| PHR | **50.0** / **80.0** | 40.0 / 40.0 | 45.0 | 1 (no CI) |"
    assert f"[1] {note}" in md
    csv = tables.to_frame(table).set_index(["row", "benchmark", "metric"])
    assert not csv.loc[("NHR", "math500", "avg"), "compared"]
    assert csv.loc[("NHR", "math500", "avg"), "problems"] == 500
    # --compare NHR PHR: only aime24 is a difference (0.4 - 0.5, 0.7 - 0.8); math500 is left out
    # with a note, and the mean over benchmarks is aime24's alone
    comparison = report.comparison
    assert {line.benchmark for line in comparison.lines} == {"aime24", "mean over benchmarks"}
    for line in comparison.lines:
        assert line.differences == pytest.approx((-0.1,), abs=1e-12)
    assert comparison.notes == (
        "one common seed: differences are shown without an interval",
        "math500: evaluated on fewer problems than the table's column (or an unknown number) for "
        "seed(s) ['0'], left out",
    )
    assert "| math500 |" not in (tmp_path / "out" / "paired.md").read_text()


def test_runs_without_the_problem_count(store, tmp_path):
    # PHR logged 500 MATH-500 problems; NHR is an older run without any count (nor does PHR have
    # one for aime24): NHR's math500 cannot be checked against 500 and is not compared (its 90 %
    # would have been bold); aime24, where no run has a count, is compared as before, and says so
    uri, client, exp_id, parent = store
    counted = make_child(
        client,
        exp_id,
        parent,
        "PHR",
        0,
        eval_metrics({"aime24": (0.5, 0.8), "math500": (0.7, 0.9)}),
    )
    old = make_child(
        client,
        exp_id,
        parent,
        "NHR",
        0,
        eval_metrics({"aime24": (0.4, 0.7), "math500": (0.9, 0.95)}),
    )
    log_problems(client, counted, {"math500": 500})
    table = _report(uri, tmp_path).table
    assert dict(table.problems) == {"aime24": None, "math500": 500}
    assert table.uncompared == {(old, "math500")}
    assert table.footnotes == (
        "math500: run(s) ['quadrant=NHR,seed=0'] logged no problem count, the others 500: "
        "not compared (no bold, avg or --compare)",
        "aime24: no run logged its problem count (eval/<benchmark>/problems; older runs): "
        "compared as if every run covered the same problems",
        "avg not compared where a row's runs were evaluated on fewer problems (or an unknown "
        "number) in one of its benchmarks",
    )
    assert table.cells[("PHR", "aime24", "avg")].best  # 0.5 > 0.4, compared without counts
    assert not table.cells[("NHR", "math500", "avg")].best
    assert not table.cells[("NHR", "math500", "avg")].compared
    lines = (tmp_path / "out" / "table.md").read_text().splitlines()
    assert "problems per benchmark: math500 500" in lines[0]
    # avg: NHR (0.4 + 0.9) / 2 = 0.65 not compared; PHR (0.5 + 0.7) / 2 = 0.60 alone: not bold
    assert lines[4] == "| NHR | 40.0 / 70.0 | 90.0[1] / 95.0[1] | 65.0[3] | 1 (no CI) |"
    assert lines[5] == "| PHR | **50.0** / **80.0** | 70.0 / 90.0 | 60.0 | 1 (no CI) |"


def test_base_row_keeps_the_problem_count_of_its_runs(store, tmp_path):
    # both runs evaluated all 500 MATH-500 problems at step 0 and at step 60: the base row (their
    # step-0 evaluation, 0.1 everywhere) is counted 500 too, so it is compared like the others
    uri, client, exp_id, parent = store
    for quadrant, values in (("PHR", (0.7, 0.9)), ("NHR", (0.6, 0.8))):
        run = make_child(client, exp_id, parent, quadrant, 0, eval_metrics({"math500": values}))
        log_problems(client, run, {"math500": 500}, steps=(0, 60))
    table = _report(uri, tmp_path, base_row=True).table
    assert table.rows == ("NHR", "PHR", "base (step 0)")
    assert table.uncompared == frozenset() and table.footnotes == ()
    assert table.problems == {"math500": 500}
    assert table.cells[("PHR", "math500", "avg")].best
