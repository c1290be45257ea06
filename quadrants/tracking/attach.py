"""Records added to a run that already exists, from another command (the paired counterfactuals of
quadrants/launch/counterfactual.py): straight MLflow client calls, not the training tracker.

The training tracker (mlflow_tracker.py) re-opens a run through its spool and marks every step it
logs with the sentinel `tracking/step_logged`, which a resumed run reads back to know which steps
MLflow holds; a second writer through it would add sentinels at steps training never logged. These
calls write only the keys they are given (`MlflowClient.log_batch`, mlflow/tracking/client.py) and
the artifacts (`MlflowClient.log_artifact`), and leave the run's status as it is.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from quadrants.tracking.reachability import mlflow_problem

MAX_METRICS_PER_CALL = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH


def run_problem(uri: str, run_id: str) -> str | None:
    """Why the run `run_id` of the store at `uri` cannot take records (None: it can)."""
    problem = mlflow_problem(uri)
    if problem is not None:
        return problem
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(uri).get_run(run_id)
    except MlflowException as error:
        return f"no run {run_id} there ({str(error).splitlines()[0]})"
    return None


def log_to_run(
    uri: str,
    run_id: str,
    metrics: Mapping[str, float],
    step: int,
    files: Sequence[Path] = (),
    artifact_path: str | None = None,
) -> None:
    """Log `metrics` at `step` and upload `files` under `artifact_path` to the existing run."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    stamp = int(time.time() * 1000)
    entries = [Metric(key, float(value), stamp, step) for key, value in metrics.items()]
    for start in range(0, len(entries), MAX_METRICS_PER_CALL):
        client.log_batch(run_id, metrics=entries[start : start + MAX_METRICS_PER_CALL])
    for path in files:
        client.log_artifact(run_id, str(path), artifact_path)
