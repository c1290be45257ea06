"""Where a run is tracked: the MLflow URI and artifact location of a run config, the sweep's
directory and sweep.json, the run's tags, and `tracked` (how a run ends: FINISHED, FAILED or open).

Used by the training job (launch/job.py), `python -m quadrants.evaluate`, `python -m
quadrants.probe`, `python -m quadrants.submit` and the distributed entry point alike.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quadrants.config import RunConfig
from quadrants.tracking.base import Tracker
from quadrants.tracking.run_info import run_tags

SWEEP_FILE = "sweep.json"


def tracking_uri(cfg: RunConfig) -> str:
    """The configured MLflow URI, or the default SQLite store under the outputs directory."""
    if cfg.tracking.uri:
        return cfg.tracking.uri
    return f"sqlite:///{(Path(cfg.outputs).expanduser().resolve() / 'mlflow.db')}"


def artifact_location(cfg: RunConfig) -> str | None:
    """Artifacts of the default local store go next to it (not into ./mlruns of whatever the cwd
    is); a tracking server decides for itself."""
    if cfg.tracking.uri:
        return None
    return (Path(cfg.outputs).expanduser().resolve() / "mlartifacts").as_uri()


def sweep_dir(cfg: RunConfig) -> Path:
    return Path(cfg.outputs).expanduser().resolve() / cfg.study / cfg.sweep_id


def read_sweep_file(cfg: RunConfig) -> dict[str, Any]:
    path = sweep_dir(cfg) / SWEEP_FILE
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
    SystemExit (submitit's preemption/timeout handler, which requeues the job) or Ctrl-C, deliver
    what was logged and leave the run open: the requeued or re-run job resumes into it."""
    try:
        yield
    except Exception:
        tracker.finish("FAILED")
        raise
    except BaseException:
        tracker.flush()
        raise
    tracker.finish("FINISHED")


def check_delivered(tracker: Tracker, uri: str, spool_dir: Path) -> None:
    """Raise when the run's records never reached MLflow (no run exists there: the store refused
    them, or went away after the preflight and never came back). A run that exits 0 with nothing
    tracked reads as a success; its records wait in the spool, which a tracker started on it
    delivers first."""
    if tracker.run_id is None:
        raise RuntimeError(
            f"nothing was delivered to the MLflow store at {uri}: no run was created there. The "
            f"run's records are kept in {spool_dir}; send them once the store answers with "
            f"`python -m quadrants.tracking deliver {spool_dir.parent}` (add --tracking-uri URI "
            "for another store), or run the same command again: it resumes from the newest "
            "checkpoint and delivers them first"
        )


def make_tracker(cfg: RunConfig, run_dir: Path, parent_run_id: str | None = None) -> Any:
    """The run's MLflow tracker; its parent is `parent_run_id`, else the one in
    the sweep's sweep.json."""
    from quadrants.tracking.links import ROLE_TAG, TRAIN_ROLE
    from quadrants.tracking.mlflow_tracker import MlflowTracker

    parent = parent_run_id or read_sweep_file(cfg).get("parent_run_id")
    tracker = MlflowTracker(
        tracking_uri(cfg),
        cfg.study,
        run_name=Path(run_dir).name,
        tags={**run_tags(cfg), **slurm_tags(), ROLE_TAG: TRAIN_ROLE},
        parent_run_id=parent,
        spool_dir=run_dir / "tracking",
        artifact_location=artifact_location(cfg),
    )
    if cfg.tracking.sinks:
        from quadrants.tracking.sinks import MirroredTracker, make_sinks

        sinks = make_sinks(
            [name for name in cfg.tracking.sinks if name != "mlflow"],
            run_dir,
            project=cfg.study,
            name=Path(run_dir).name,
            group=cfg.sweep_id,
        )
        tracker = MirroredTracker(tracker, sinks)
    if cfg.tracking.system_metrics:
        from quadrants.tracking.system import SystemMetricsTracker, SystemSampler

        return SystemMetricsTracker(tracker, SystemSampler(cfg.tracking.system_metrics_interval_s))
    return tracker
