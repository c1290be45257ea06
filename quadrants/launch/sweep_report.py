"""What the parent run of a finished sweep holds: the summary table as its description (shown on the
run's page) and the analysis report (`analysis/report.html`, table and figures in one page that
MLflow's artifact viewer shows inline, plus the Markdown, CSV and PNG files) as its artifacts.

Called by the sweep callback when a local or blocking sweep ends, by the last job of a submitted
sweep when it closes the parent, and by `quadrants.status` when it closes the
parent of jobs that died.
"""

from __future__ import annotations

from pathlib import Path


def report_on_parent(
    tracking_uri: str, study: str, sweep_id: str, parent_run_id: str, out_dir: Path | None
) -> int:
    """Set the parent's description to the sweep summary; with `out_dir`, build the analysis report
    there and log it under the parent's `analysis/` artifacts. Returns the
    number of report files."""
    from mlflow.tracking import MlflowClient

    from quadrants.tracking.summary import sweep_summary

    summary = sweep_summary(tracking_uri, study, sweep_id)
    MlflowClient(tracking_uri).set_tag(
        parent_run_id,
        "mlflow.note.content",
        f"Sweep `{sweep_id}` of study `{study}`. Figures: artifacts, "
        f"`analysis/report.html`.\n\n```\n{summary}\n```\n",
    )
    if out_dir is None:
        return 0
    # the report is quadrants.analysis's: imported only here, at the end of a sweep
    from quadrants.analysis.load import Selection
    from quadrants.analysis.report import ReportOptions, build_report

    report = build_report(
        Selection(tracking_uri, study, sweep_id, parent_run_id), out_dir, ReportOptions()
    )
    return len(report.files)
