"""Run the sweep command in a directory and read what it left in that directory's MLflow store.

The sweep tests (tests/e2e/) share these: `sweep` starts `python -m quadrants.sweep ARGS` in `cwd`
(tests/commands.py), the store is `cwd/outputs/mlflow.db` (the default tracking URI), and
`sweep_arms` runs a two-job multirun of the tiny sweep and returns its child runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests import commands
from tests.commands import TINY


def sweep(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return commands.run("quadrants.sweep", *args, cwd=cwd, timeout=timeout)


def client(cwd: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")


def runs_of(cwd: Path, study: str = "quadrants") -> list:
    c = client(cwd)
    experiment = c.get_experiment_by_name(study)
    assert experiment is not None, "no MLflow experiment was written"
    return c.search_runs([experiment.experiment_id])


def child_runs(cwd: Path, study: str = "quadrants") -> list:
    """The sweep's job runs (those under a parent run)."""
    return [r for r in runs_of(cwd, study) if "mlflow.parentRunId" in r.data.tags]


def steps_of(cwd: Path, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client(cwd).get_metric_history(run_id, key))


def history(cwd: Path, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client(cwd).get_metric_history(run_id, key)}


def sweep_arms(cwd: Path, *overrides: str) -> list:
    """`python -m quadrants.sweep -m OVERRIDES` on the tiny model with two parallel jobs; asserts
    that it exits 0 and returns the child runs."""
    done = sweep(cwd, "-m", *overrides, "hydra.launcher.n_jobs=2", *TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    return child_runs(cwd)
