"""`python -m quadrants.status <sweep dir | sweep id>`: each job's SLURM state and latest metrics.

    python -m quadrants.status outputs/quadrants/s1a2b3c4d          # the directory submit printed
    python -m quadrants.status s1a2b3c4d --outputs /scratch/outputs # or the sweep id
    python -m quadrants.status s1a2b3c4d --json                     # one JSON object per job

Reads the sweep manifest written by `python -m quadrants.submit`, asks SLURM for the jobs' states
(`sacct`; `squeue` when there is no accounting) and MLflow for each job's run (status, last step,
latest metrics). When SLURM reports every job ended, it also does the parent run's bookkeeping that
the jobs could not do themselves: child runs of jobs that died without closing their run (scancel,
node failure, out of memory) are marked FAILED, and the parent run is closed (FINISHED if every job
COMPLETED, else FAILED). Resubmitting the sweep re-opens them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from quadrants.launch.sweep_manifest import (
    TERMINAL_RUN_STATUSES,
    Manifest,
    child_runs,
    find_manifest,
)

# SLURM job states after which nothing more happens to the job (PREEMPTED/NODE_FAIL jobs that are
# requeued show up as PENDING again).
ENDED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
    "REVOKED",
    "SPECIAL_EXIT",
)
METRICS = ("train/reward_mean", "train/solve_rate", "train/entropy")


@dataclass
class JobStatus:
    job_id: str
    name: str
    slurm_state: str
    run_status: str | None = None
    run_id: str | None = None
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def slurm_states(
    job_ids: list[str], env: dict[str, str] | None = None
) -> tuple[dict[str, str], str | None]:
    """({job id: state}, problem) for `<array>_<index>` / `<id>` job ids,
    from sacct, else squeue."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    states: dict[str, str] = {}
    problem = None
    try:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(arrays)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        if out.returncode == 0:
            for line in out.stdout.splitlines():
                if "|" in line:
                    job, state = line.split("|", 1)
                    states.update({j: state.split()[0] for j in _expand(job)})
        else:
            problem = f"sacct: {out.stderr.strip()}"
        if any(
            j not in states for j in job_ids
        ):  # not in accounting (yet, or no slurmdbd): ask squeue
            out = subprocess.run(
                ["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(arrays)],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            for line in out.stdout.splitlines() if out.returncode == 0 else []:
                job, state = line.strip().split("|", 1)
                states.setdefault(job, state)
    except (OSError, subprocess.SubprocessError) as err:
        problem = f"cannot ask SLURM ({err}); is this a SLURM login node with SLURM_CONF set?"
    return {j: states.get(j, "UNKNOWN") for j in job_ids}, problem


def _expand(job: str) -> list[str]:
    """sacct's `123_[0-3,5]` (pending array tasks) as ['123_0', ..., '123_5'];
    other ids as they are."""
    match = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(%\d+)?\]", job)
    if not match:
        return [job]
    out = []
    for part in match.group(2).split(","):
        lo, _, hi = part.partition("-")
        out += [f"{match.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def sweep_status(
    manifest: Manifest, env: dict[str, str] | None = None
) -> tuple[list[JobStatus], list[str]]:
    """Each job's status, and notes (problems, bookkeeping done)."""
    states, problem = slurm_states([job.job_id for job in manifest.jobs], env)
    notes = [problem] if problem else []
    jobs = [JobStatus(job.job_id, job.name, states[job.job_id]) for job in manifest.jobs]
    runs: dict[str, Any] = {}
    if manifest.parent_run_id:
        try:
            runs = {
                r.info.run_name: r
                for r in child_runs(manifest.tracking_uri, manifest.parent_run_id)
            }
        except Exception as err:  # noqa: BLE001 - report, don't fail
            notes.append(f"MLflow at {manifest.tracking_uri}: {err}")
    for job in jobs:
        run = runs.get(job.name)
        if run is not None:
            job.run_status, job.run_id = run.info.status, run.info.run_id
            metrics = run.data.metrics
            job.step = int(metrics["train/step"]) if "train/step" in metrics else None
            job.metrics = {
                k: v
                for k, v in sorted(metrics.items())
                if k in METRICS or (k.startswith("eval/") and "_at_" in k)
            }
    if states and all(s in ENDED for s in states.values()) and not problem and runs:
        notes += _close_ended(manifest, jobs)
    return jobs, notes


def _close_ended(manifest: Manifest, jobs: list[JobStatus]) -> list[str]:
    """Every job ended in SLURM: close what the jobs left open (see the module docstring)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(manifest.tracking_uri)
    notes = []
    for job in jobs:
        if job.run_id and job.run_status not in TERMINAL_RUN_STATUSES:
            client.set_terminated(job.run_id, "FAILED")
            notes.append(
                f"run of {job.name} left RUNNING by a job that ended "
                f"{job.slurm_state}: marked FAILED"
            )
            job.run_status = "FAILED"
    parent = client.get_run(manifest.parent_run_id)
    if parent.info.status == "RUNNING":
        status = "FINISHED" if all(j.slurm_state == "COMPLETED" for j in jobs) else "FAILED"
        try:
            from pathlib import Path

            from quadrants.launch.sweep_report import report_on_parent

            count = report_on_parent(
                manifest.tracking_uri,
                manifest.study,
                manifest.sweep_id,
                manifest.parent_run_id,
                Path(manifest.sweep_dir) / "analysis",
            )
            notes.append(f"analysis report ({count} files) logged on the parent run")
        except Exception as err:  # noqa: BLE001 - the bookkeeping goes on without a report
            notes.append(f"could not put the analysis report on the parent run: {err}")
        client.set_terminated(manifest.parent_run_id, status)
        notes.append(f"all jobs ended: parent run {manifest.parent_run_id} closed {status}")
    return notes


def format_table(manifest: Manifest, jobs: list[JobStatus]) -> str:
    keys = sorted({k for job in jobs for k in job.metrics})
    header = ["job", "slurm", "state", "run", "step", *[k.split("/", 1)[1] for k in keys]]
    rows = [
        [
            job.name,
            job.job_id,
            job.slurm_state,
            job.run_status or "-",
            "-" if job.step is None else str(job.step),
            *[f"{job.metrics[k]:.3f}" if k in job.metrics else "-" for k in keys],
        ]
        for job in jobs
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    return (
        f"sweep {manifest.sweep_id} ({manifest.study}), array {manifest.array_job_id}, "
        f"submitted {manifest.submitted_at}\n" + "\n".join(lines)
    )


def parser() -> argparse.ArgumentParser:
    """The command line (`main`)."""
    parser = argparse.ArgumentParser(
        prog="python -m quadrants.status", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "sweep", help="sweep directory (printed by quadrants.submit), its sweep.json, or a sweep id"
    )
    parser.add_argument(
        "--outputs", default="outputs", help="where to look for a sweep id (default: outputs)"
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per job instead of a table"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        path = find_manifest(args.sweep, args.outputs)
    except FileNotFoundError as err:
        sys.exit(f"quadrants: {err}")
    record = json.loads(path.read_text())
    if not record.get("jobs"):
        sys.exit(
            f"quadrants: {path} records no SLURM jobs (the sweep was not submitted with "
            f"python -m quadrants.submit); its runs are in MLflow at {record.get('tracking_uri')}"
        )
    manifest = Manifest.from_dict(record)
    env = None
    if "SLURM_CONF" not in os.environ and manifest.slurm_conf:
        env = {**os.environ, "SLURM_CONF": manifest.slurm_conf}  # the cluster it was submitted to
    jobs, notes = sweep_status(manifest, env)
    if args.json:
        for job in jobs:
            print(json.dumps(asdict(job)))
    else:
        print(format_table(manifest, jobs))
    for note in notes:
        print(f"quadrants: {note}", file=sys.stderr)
    if not args.json:
        from quadrants.tracking.links import experiment_id_of, link_lines
        from quadrants.tracking.view import stored_view

        experiment_id = experiment_id_of(manifest.tracking_uri, manifest.study)
        view = (
            stored_view(manifest.tracking_uri, experiment_id, manifest.sweep_id)
            if experiment_id is not None
            else None
        )
        for line in link_lines(
            manifest.tracking_uri,
            experiment_id,
            sweep_id=manifest.sweep_id,
            view=view,
            runs={"parent run": manifest.parent_run_id},
        ):
            print(line)


if __name__ == "__main__":
    main()
