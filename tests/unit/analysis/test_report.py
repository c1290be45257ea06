"""The whole report from a real store: every file written, logged on the parent run, and the command line."""

from __future__ import annotations

import pytest

from quadrants.analysis import load
from quadrants.analysis.report import ReportOptions, build_report
from quadrants.launch.analysis import main

from .conftest import eval_metrics, make_child, make_parent, new_store

FIGURES = (
    "train_solve_rate",
    "train_entropy",
    "dlogp_abs_by_quadrant",
    "flips_by_quadrant",
    "entropy_change_by_quadrant",
    "pass_at_k",
    "token_advantage_hist",
    "entropy_pos_vs_neg",
)


@pytest.mark.slow
def test_report_writes_and_logs_everything(study_store, tmp_path, capsys):
    uri, client, parent = study_store["uri"], study_store["client"], study_store["parent"]
    out = tmp_path / "out"
    assert (
        main(["--tracking-uri", uri, "--compare", "PHR", "NHR", "--base-row", "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "analysis: latest sweep sw1 of experiment study" in printed
    assert "| PHR | **55.0 ± 63.5** / **85.0 ± 63.5** |" in printed
    # 2 of 2 seeds ahead: sign-test p 2 x (1/2)^2 = 0.5
    assert "| aime24 | Avg@4 | +15.0 | [-48.5, +78.5] | 2/2 (0.5) |" in printed
    assert "| base (step 0) | 10.0 ± 0.0 / 10.0 ± 0.0 |" in printed
    assert f"logged under artifacts/analysis of run {parent}" in printed
    expected = {
        "table.md",
        "table.csv",
        "table.tex",
        "paired.md",
        "samples.html",
        "report.md",
        "report.html",
        "entropy_prediction.csv",
    }
    expected |= {f"figures/{stem}.{ext}" for stem in FIGURES for ext in ("png", "svg")}
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert written == expected
    for name in expected:
        assert (out / name).stat().st_size > 0, name
    assert (out / "figures" / "pass_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the study logs cov = 0.1 step (i + 1) and entropy_change = -0.01 step (i + 1): -cov and the
    # change rise together with the step, correlation 1 in every run and quadrant
    prediction = (out / "entropy_prediction.csv").read_text().splitlines()
    assert prediction[0] == (
        "row,seed,quadrant,steps,pearson,spearman,r_white,p_white,n_eff,pearson_state,"
        "spearman_state,r_white_state,p_white_state,n_eff_state,token_steps,token_r_mean,"
        "token_r_pos"
    )
    # 3 steps: too few for the prewhitened test (NaN, empty); no cov_state and no token_r logged
    assert len(prediction) == 1 + 4 * len(study_store["runs"]) and all(
        line.endswith(",3,1.0,1.0,,,,,,,,,0,,") for line in prediction[1:]
    )
    assert (out / "figures" / "train_entropy.svg").read_text().lstrip().startswith("<?xml")
    logged = {f.path for f in client.list_artifacts(parent, "analysis")}
    assert {
        "analysis/table.md",
        "analysis/table.csv",
        "analysis/table.tex",
        "analysis/samples.html",
        "analysis/figures",
        "analysis/report.md",
        "analysis/paired.md",
        "analysis/report.html",
    } <= logged
    assert len(client.list_artifacts(parent, "analysis/figures")) == 2 * len(FIGURES)
    # the table's means on the parent run itself (PHR: Avg@4 0.55, Pass@4 0.85 on aime24, as printed)
    parent_metrics = client.get_run(parent).data.metrics
    assert parent_metrics["PHR/aime24/avg_at_4"] == pytest.approx(0.55, abs=1e-12)
    assert parent_metrics["PHR/aime24/pass_at_4"] == pytest.approx(0.85, abs=1e-12)
    assert parent_metrics["PHR/seeds"] == 2.0
    page = (out / "samples.html").read_text()
    # tokens are escaped, shaded by entropy (0.9 of the 99th-percentile cap) and underlined by quadrant
    assert "&lt;" in page and "&amp;" in page and "⏎" in page
    assert 'title="H=0.900 nats · PHR"' in page and "border-bottom-color: #1b7837" in page
    assert page.count("<h2>") == 5
    report = (out / "report.md").read_text()
    assert (
        "![pass_at_k](figures/pass_at_k.png)" in report and "Paired comparison PHR − NHR" in report
    )
    # the page MLflow shows inline: every PNG figure embedded (no links to files it cannot reach), the table
    html_page = (out / "report.html").read_text()
    assert html_page.count("src='data:image/png;base64,") == len(FIGURES)
    assert "<td>PHR</td><td><b>55.0 ± 63.5</b> / <b>85.0 ± 63.5</b></td>" in html_page
    assert "figures/" not in html_page


@pytest.mark.slow
def test_missing_figure_data_is_reported_not_drawn(template_db, tmp_path):
    # two runs with eval metrics only: no training curves, telemetry or samples -> those figures are
    # skipped with a message; the table and the Pass@k figure (logged points) are still there
    uri, client = new_store(template_db, tmp_path / "store")
    exp_id, parent = make_parent(client, tmp_path / "store")
    make_child(client, exp_id, parent, "PHR", 0, eval_metrics({"aime24": (0.5, 0.8)}))
    make_child(client, exp_id, parent, "NHR", 0, eval_metrics({"aime24": (0.4, 0.7)}))
    out = tmp_path / "out"
    report = build_report(
        load.Selection(uri, "study", "sw1"), out, ReportOptions(log_to_parent=False)
    )
    names = {p.name for p in report.files}
    assert {"table.md", "pass_at_k.png", "pass_at_k.svg"} <= names
    assert (
        not (out / "figures" / "train_entropy.png").exists() and not (out / "samples.html").exists()
    )
    assert report.messages == (
        "skipped train_solve_rate: no run logged 'train/solve_rate': cannot draw train_solve_rate",
        "skipped train_entropy: no run logged 'train/entropy': cannot draw train_entropy",
        "skipped dlogp_abs_by_quadrant: no run logged train/quadrant/<Q>/dlogp_abs: cannot draw dlogp_abs",
        "skipped flips_by_quadrant: no run logged train/quadrant/<Q>/flip_frac_shared "
        "(train.measure_dlogp): cannot draw flips_by_quadrant",
        "skipped entropy_change_by_quadrant: no run logged train/quadrant/<Q>/entropy_change "
        "(train.measure_dlogp): cannot draw entropy_change_by_quadrant",
        "skipped token_advantage_hist: no sample artifacts in any run: cannot draw advantage histograms",
        "skipped entropy_pos_vs_neg: no sample artifacts in any run: cannot draw entropy distributions",
        "skipped samples.html: no run has sample artifacts (tracking.log_samples_every)",
    )
    assert not report.logged


def test_base_row_from_the_step_zero_evaluations(study_store, tmp_path):
    # every run logged 0.1 for each eval metric at step 0: per seed the base is 0.1 (seeds 0 and 1 ->
    # 10.0 ± 0.0); it is the worst row, so the best marks do not move; PHR - base on aime24 Avg@4:
    # seed 0 0.5 - 0.1, seed 1 0.6 - 0.1 -> +45.0, interval 0.45 ± t * 0.05 = [-18.5, +108.5]
    options = ReportOptions(
        base_row=True, compare=("PHR", "base (step 0)"), log_to_parent=False, figures=False
    )
    report = build_report(
        load.Selection(study_store["uri"], "study", "sw1"), tmp_path / "out", options
    )
    table = report.table
    assert (
        table.rows == ("NHR", "PHR", "PLR", "base (step 0)") and table.seeds["base (step 0)"] == 2
    )
    assert (
        "| base (step 0) | 10.0 ± 0.0 / 10.0 ± 0.0 | 10.0 ± 0.0 / 10.0 ± 0.0 | 10.0 ± 0.0 | 2 |"
        in (tmp_path / "out" / "table.md").read_text()
    )
    assert not any(cell.best for (row, _, _), cell in table.cells.items() if row == "base (step 0)")
    assert (
        "| aime24 | Avg@4 | +45.0 | [-18.5, +108.5] | 2/2 (0.5) |"
        in (tmp_path / "out" / "paired.md").read_text()
    )
    assert not (tmp_path / "out" / "figures").exists()
