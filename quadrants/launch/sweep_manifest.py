"""The sweep manifest: `<outputs>/<study>/<sweep_id>/sweep.json`, what a sweep
is and where its parts are.

Every sweep writes it (the Hydra callback, before its jobs start: study, sweep id, tracking URI,
MLflow parent run). A detached SLURM submission (`python -m quadrants.submit`) writes it only after
SLURM has accepted the job array, in one atomic rename, and adds what `python -m quadrants.status`
needs: the SLURM job ids, each job's overrides, run directory and log files, and the submission
history. A rejected submission leaves the previous manifest (or none) untouched.

The parent run's bookkeeping does not depend on the submitting process: each detached job, when it
ends (finished or failed; not when it is requeued), closes the parent run if every child run of the
sweep has ended (`close_parent_if_done`); jobs that die without reaching that point (scancel, node
failure, out of memory) are covered by `quadrants.status`, which closes the parent once SLURM
reports every job of the sweep ended.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("quadrants.sweep")

MANIFEST = "sweep.json"
TERMINAL_RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")


@dataclass(frozen=True)
class JobRecord:
    """One job of a detached sweep."""

    index: int
    job_id: str  # as squeue/sacct/scancel name it: `<array id>_<index>`, or `<id>` for a single job
    name: str  # the job's run name (what varies across the sweep), e.g. "quadrant=PHR"
    overrides: list[str]  # the job's own overrides (the sweep's shared ones included)
    run_dir: str
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Manifest:
    """A detached sweep as submitted (see the module docstring)."""

    sweep_id: str
    study: str
    sweep_dir: str
    tracking_uri: str
    parent_run_id: str | None
    command: list[str]
    array_job_id: str
    submitted_at: str
    slurm_conf: str | None
    jobs: list[JobRecord]
    previous_submissions: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "detached"

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Manifest:
        known = set(Manifest.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        values["jobs"] = [JobRecord(**job) for job in data.get("jobs", [])]
        return Manifest(**values)


def read_record(sweep_dir: Path) -> dict[str, Any]:
    """The sweep's sweep.json as a dict ({} if there is none)."""
    path = Path(sweep_dir) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def write_manifest(manifest: Manifest) -> Path:
    """Write `manifest` atomically (temporary file, fsync, rename): readers see
    the old or the new one."""
    path = Path(manifest.sweep_dir) / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{MANIFEST}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(asdict(manifest), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def find_manifest(sweep: str, outputs: str = "outputs") -> Path:
    """The manifest of `sweep`: a sweep directory, a sweep.json, or a sweep id under `outputs`."""
    given = Path(sweep).expanduser()
    for candidate in (given, given / MANIFEST):
        if candidate.is_file():
            return candidate.resolve()
    root = Path(outputs).expanduser()
    found = sorted(root.glob(f"*/{sweep}/{MANIFEST}")) if root.is_dir() else []
    if len(found) == 1:
        return found[0].resolve()
    if len(found) > 1:
        raise FileNotFoundError(
            f"sweep id {sweep!r} exists in several studies: "
            f"{', '.join(str(p.parent) for p in found)}; pass the sweep directory"
        )
    raise FileNotFoundError(
        f"no sweep {sweep!r}: not a sweep directory, and no {outputs}/<study>/{sweep}/"
        f"{MANIFEST} (pass the sweep directory printed at submission, or --outputs DIR)"
    )


def child_runs(tracking_uri: str, parent_run_id: str) -> list[Any]:
    """The MLflow child runs of a parent run (any status)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    parent = client.get_run(parent_run_id)
    return client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_run_id}'"
    )


def close_parent_if_done(tracking_uri: str, parent_run_id: str | None, jobs: int) -> str | None:
    """End the parent run if at least `jobs` child runs exist and all have
    ended; return the status set.

    FINISHED if every child finished, FAILED otherwise. Safe to call from several jobs at once (the
    last ones to end may both close it, with the same result)."""
    if not parent_run_id:
        return None
    from quadrants.tracking.mlflow_tracker import end_parent_run

    runs = child_runs(tracking_uri, parent_run_id)
    if len(runs) < jobs or any(r.info.status not in TERMINAL_RUN_STATUSES for r in runs):
        return None
    status = "FINISHED" if all(r.info.status == "FINISHED" for r in runs) else "FAILED"
    end_parent_run(tracking_uri, parent_run_id, status)
    log.info("all %d runs of the sweep ended: parent run %s %s", len(runs), parent_run_id, status)
    return status
