"""Where a run is tracked: the MLflow URI and artifact location of a run, the sweep's directory and
sweep.json, the run's tracker, and `tracked` (how a run ends: FINISHED, FAILED or open).

A run here is anything with the four settings these read (`TrackedRun`: a `RunPlan`, or a
`RunConfig` before it is parsed); the tags a run carries are the run's own (run/run_info.py).

Used by the training job (launch/job.py), `python -m quadrants.evaluate`, `python -m
quadrants.probe`, `python -m quadrants.submit` and the distributed entry point alike.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from quadrants.config import TrackingConfig
from quadrants.tracking.base import Tracker

SWEEP_FILE = "sweep.json"


class TrackedRun(Protocol):
    """What the tracking set-up reads of a run: its tracking section, the outputs folder, the study
    (the MLflow experiment) and the sweep id. A `RunPlan` and a `RunConfig` both have them."""

    @property
    def tracking(self) -> TrackingConfig: ...

    @property
    def outputs(self) -> str: ...

    @property
    def study(self) -> str: ...

    @property
    def sweep_id(self) -> str: ...


def tracking_uri(run: TrackedRun) -> str:
    """The configured MLflow URI, or the default SQLite store under the outputs directory."""
    if run.tracking.uri:
        return run.tracking.uri
    return f"sqlite:///{(Path(run.outputs).expanduser().resolve() / 'mlflow.db')}"


def artifact_location(run: TrackedRun) -> str | None:
    """Where the experiments a run creates keep their artifacts (`store_artifact_location` of its
    store)."""
    return store_artifact_location(tracking_uri(run))


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` URI (None for any other store)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :]).expanduser().resolve()


def store_artifact_location(uri: str) -> str | None:
    """A SQLite store's artifacts go next to it, `<its folder>/mlartifacts`, set on each experiment
    when it is created. Left to MLflow, a client of a SQLite store puts them under `./mlruns` of
    whatever directory the command runs in: mlflow/tracking/_tracking_service/utils.py
    `_get_sqlalchemy_store` passes `DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH` ("./mlruns",
    mlflow/store/tracking/__init__.py) as the default artifact root, and
    mlflow/store/tracking/sqlalchemy_store.py `create_experiment` appends the experiment id to it
    when no artifact_location is given (mlflow 3.x). A tracking server decides for itself (None)."""
    path = sqlite_path(uri)
    return None if path is None else (path.parent / "mlartifacts").as_uri()


def run_outputs(run_dir: str | Path, outputs: str, study: str, sweep_id: str | None) -> Path | None:
    """The outputs folder a run directory was made under, absolute: the ancestor of `run_dir` laid
    out as ``<outputs>/<study>/<sweep_id>/...`` (`sweep_dir`; found wherever the tree has moved
    since), else `outputs` itself when it is absolute, else None. A run's config.yaml keeps
    `outputs` as it was given, often relative to the directory the sweep ran in, so a command that
    reads the run from another directory would otherwise open a store of its own there."""
    path = Path(run_dir).expanduser().resolve()
    for folder in path.parents:
        if folder.name == sweep_id and folder.parent.name == study and folder.parent != folder:
            return folder.parent.parent
    given = Path(outputs).expanduser()
    return given if given.is_absolute() else None


def sweep_dir(run: TrackedRun) -> Path:
    return Path(run.outputs).expanduser().resolve() / run.study / run.sweep_id


def read_sweep_file(run: TrackedRun) -> dict[str, Any]:
    path = sweep_dir(run) / SWEEP_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def slurm_tags() -> dict[str, str]:
    """Where a SLURM job runs ({} outside SLURM): `slurm.job_id` (`<array id>_<index>` for an array
    task, as squeue/sacct/scancel name it) and `slurm.node`. Set when the run is created."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return {}
    job_id = env["SLURM_JOB_ID"]
    if "SLURM_ARRAY_JOB_ID" in env and "SLURM_ARRAY_TASK_ID" in env:
        job_id = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return {"slurm.job_id": job_id, "slurm.node": env.get("SLURMD_NODENAME", "")}


@contextmanager
def tracked(tracker: Tracker) -> Iterator[None]:
    """End the run FINISHED when the block completes and FAILED when it raises an error. On
    SystemExit (a signal: SIGTERM, SLURM's preemption or time limit, submitit's requeue) or Ctrl-C,
    deliver what was logged and end the run KILLED at once, so that MLflow does not show a stopped
    run as RUNNING; the requeued or re-run job resumes into it and re-opens it as RUNNING
    (tracking/delivery.py `_open_run`)."""
    try:
        yield
    except Exception:
        tracker.finish("FAILED")
        raise
    except BaseException:
        tracker.finish("KILLED")
        raise
    tracker.finish("FINISHED")


def deliver_command(run_dir: Path) -> str:
    """The command that sends a run's stranded records (tracking/redeliver.py)."""
    return f"python -m quadrants.tracking deliver {run_dir}"


def check_delivered(tracker: Tracker, uri: str, spool_dir: Path) -> None:
    """Raise when the run's records never reached MLflow (no run exists there: the store refused
    them, or went away after the preflight and never came back). A run that exits 0 with nothing
    tracked reads as a success; its records wait in the spool, which a tracker started on it
    delivers first."""
    if tracker.run_id is None:
        raise RuntimeError(
            f"nothing was delivered to the MLflow store at {uri}: no run was created there. The "
            f"run's records are kept in {spool_dir}; send them once the store answers with "
            f"`{deliver_command(spool_dir.parent)}` (add --tracking-uri URI "
            "for another store), or run the same command again: it resumes from the newest "
            "checkpoint and delivers them first"
        )
    if getattr(tracker, "undelivered", False):
        raise UndeliveredError(
            f"run {tracker.run_id} trained to its end, but MLflow at {uri} did not take all of its "
            f"records before the process ended (the run shows RUNNING there, with steps missing). "
            f"They are kept in {spool_dir}; send them once the store answers with "
            f"`{deliver_command(spool_dir.parent)}`: it ends the run as this process did"
        )


class UndeliveredError(RuntimeError):
    """A run whose records are not all in MLflow when its process ends: the process exits non-zero
    (a run with records stranded is not done) and names the deliver command."""


def make_tracker(
    run: TrackedRun, run_dir: Path, tags: dict[str, str], parent_run_id: str | None = None
) -> Any:
    """The run's MLflow tracker, created with the run's `tags` (run/run_info.py `run_tags`), where
    SLURM runs it and its role; its parent is `parent_run_id`, else the one in the sweep's
    sweep.json."""
    from quadrants.tracking.links import ROLE_TAG, TRAIN_ROLE
    from quadrants.tracking.mlflow_tracker import MlflowTracker

    parent = parent_run_id or read_sweep_file(run).get("parent_run_id")
    tracker = MlflowTracker(
        tracking_uri(run),
        run.study,
        run_name=Path(run_dir).name,
        tags={**tags, **slurm_tags(), ROLE_TAG: TRAIN_ROLE},
        parent_run_id=parent,
        spool_dir=run_dir / "tracking",
        artifact_location=artifact_location(run),
    )
    if run.tracking.sinks:
        from quadrants.tracking.sinks import MirroredTracker, make_sinks

        sinks = make_sinks(
            [name for name in run.tracking.sinks if name != "mlflow"],
            run_dir,
            project=run.study,
            name=Path(run_dir).name,
            group=run.sweep_id,
        )
        tracker = MirroredTracker(tracker, sinks)
    if run.tracking.system_metrics:
        from quadrants.tracking.system import SystemMetricsTracker, SystemSampler

        return SystemMetricsTracker(tracker, SystemSampler(run.tracking.system_metrics_interval_s))
    return tracker
