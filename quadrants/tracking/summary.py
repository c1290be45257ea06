"""The table printed at the end of a sweep: one row per run, read back from MLflow."""

from __future__ import annotations

import mlflow
import pandas as pd

_COLUMNS = {
    "tags.mlflow.runName": "run",
    "status": "status",
    "tags.quadrant": "quadrant",
    "tags.objective": "objective",
    "tags.seed": "seed",
    "metrics.train/step": "step",
    "metrics.train/solve_rate": "solve_rate",
    "metrics.train/entropy": "entropy",
}


def sweep_runs(tracking_uri: str, study: str, sweep_id: str) -> pd.DataFrame:
    """The child runs of one sweep (tag quadrants.sweep_id), as MLflow's search_runs frame."""
    client_uri = mlflow.get_tracking_uri()
    try:
        mlflow.set_tracking_uri(tracking_uri)
        experiment = mlflow.get_experiment_by_name(study)
        if experiment is None:
            return pd.DataFrame()
        runs = mlflow.search_runs(
            experiment_ids=[experiment.experiment_id],
            filter_string=(
                f"tags.`quadrants.sweep_id` = '{sweep_id}' and tags.`mlflow.parentRunId` != ''"
            ),
        )
        if runs.empty:
            runs = mlflow.search_runs(
                experiment_ids=[experiment.experiment_id],
                filter_string=f"tags.`quadrants.sweep_id` = '{sweep_id}'",
            )
            runs = (
                runs[runs.get("tags.mlflow.runName", pd.Series(dtype=str)) != sweep_id]
                if not runs.empty
                else runs
            )
        return runs
    finally:
        mlflow.set_tracking_uri(client_uri)


def _eval_columns(names: pd.Index) -> dict[str, str]:
    """Per benchmark, Avg@n and Pass@n at its largest logged k only (not every k of the Pass@k curve
    nor the standard errors): e.g. `metrics.eval/aime24/avg_at_32` -> `aime24/avg_at_32`."""
    largest: dict[tuple[str, str], int] = {}
    for name in names:
        if not name.startswith("metrics.eval/") or name.endswith("_stderr"):
            continue
        bench, _, metric = name.removeprefix("metrics.eval/").rpartition("/")
        for kind in ("avg_at_", "pass_at_"):
            if metric.startswith(kind) and metric.removeprefix(kind).isdigit():
                k = int(metric.removeprefix(kind))
                largest[(bench, kind)] = max(k, largest.get((bench, kind), 0))
    return {
        f"metrics.eval/{bench}/{kind}{k}": f"{bench}/{kind}{k}"
        for (bench, kind), k in sorted(largest.items())
    }


def sweep_summary(tracking_uri: str, study: str, sweep_id: str) -> str:
    """A plain-text table of the sweep's runs: last step, final held-out
    accuracy, solve rate, entropy."""
    runs = sweep_runs(tracking_uri, study, sweep_id)
    if runs.empty:
        return f"quadrants: no runs found for sweep {sweep_id} in {tracking_uri}"
    columns = dict(_COLUMNS)
    columns.update(_eval_columns(runs.columns))
    table = runs[[c for c in columns if c in runs.columns]].rename(columns=columns)
    table = table.sort_values("run").reset_index(drop=True)
    table["run"] = table["run"].map(lambda name: name if len(name) <= 40 else "…" + name[-39:])
    return f"quadrants: sweep {sweep_id} ({len(table)} runs)\n" + table.to_string(
        index=False, float_format=lambda v: f"{v:.3f}"
    )
