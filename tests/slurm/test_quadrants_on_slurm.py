"""quadrants sweeps on the real one-machine SLURM cluster (slurm/devcluster.sh, session fixture):

- `python -m quadrants.sweep -m quadrant=PHR,NHR,PLR,NLR launcher=slurm_dev` is ONE job array of four
  and logs four child runs under one parent;
- a running job signalled as SLURM does before a time limit (USR2, submitit's signal) checkpoints its
  last completed step, is requeued and resumes into the same MLflow run, every step exactly once;
- a detached submission (`python -m quadrants.submit`) returns at once, the jobs run without it, and
  `python -m quadrants.status` reports them; a job killed outright (SIGKILL: what a node failure
  leaves) resumes from its periodic checkpoint when the same command is submitted again;
- a request SLURM refuses fails with SLURM's reason and leaves no manifest.

The tiny random model and a few short steps keep each run to seconds; learning is not tested here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.commands import TINY

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# the tiny sweep (tests/commands.py) without sample logging, with a SLURM time limit
FAST = [o for o in TINY if not o.startswith("tracking.log_samples_every=")]
FAST += ["tracking.log_samples_every=0", "hydra.launcher.timeout_min=30"]


def _env(cluster) -> dict[str, str]:
    return {**cluster.env, "HF_HUB_OFFLINE": "1"}


def _quadrants(
    cluster, cwd: Path, module: str, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=_env(cluster),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _client(cwd: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")


def _runs(cwd: Path) -> tuple[list, list]:
    """(parent runs, child runs) of the study `quadrants`."""
    client = _client(cwd)
    runs = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags], children


def _steps(cwd: Path, run_id: str, key: str = "train/step") -> list[int]:
    return sorted(m.step for m in _client(cwd).get_metric_history(run_id, key))


def test_four_quadrant_sweep_is_one_job_array_with_four_child_runs(slurm_cluster, tmp_path):
    done = _quadrants(
        slurm_cluster,
        tmp_path,
        "quadrants.sweep",
        "-m",
        "quadrant=PHR,NHR,PLR,NLR",
        "launcher=slurm_dev",
        "train.steps=3",
        *FAST,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    parents, children = _runs(tmp_path)
    assert len(parents) == 1 and len(children) == 4
    assert parents[0].info.status == "FINISHED"
    job_ids = sorted(r.data.tags["slurm.job_id"] for r in children)
    array_ids = {j.split("_")[0] for j in job_ids}
    assert len(array_ids) == 1  # one sbatch, one array of four
    (array_id,) = array_ids
    assert job_ids == [f"{array_id}_{i}" for i in range(4)]
    assert sorted(r.data.tags["quadrant"] for r in children) == ["NHR", "NLR", "PHR", "PLR"]
    for run in children:
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert (tags["objective"], tags["seed"], tags["model"]) == ("dapo", "0", "tiny-random")
        assert tags["quadrants.sweep_id"] == parents[0].data.tags["quadrants.sweep_id"]
        assert tags["slurm.node"] == "localhost"
        assert run.info.status == "FINISHED"
        assert _steps(tmp_path, run.info.run_id) == [1, 2, 3]
        assert _steps(
            tmp_path, run.info.run_id, f"train/quadrant/{tags['quadrant']}/token_frac"
        ) == [1, 2, 3]
        assert "eval/arithmetic/avg_at_1" in run.data.metrics
    expected = {f"{array_id}_{i}": "COMPLETED" for i in range(4)}
    slurm_cluster.wait_for(
        "sacct to record the array", lambda: slurm_cluster.sacct_states(array_id) == expected, 30
    )
    assert "quadrant=NHR" in done.stdout and "4 runs" in done.stdout  # the summary table


def test_signalled_job_checkpoints_is_requeued_and_resumes_every_step_once(slurm_cluster, tmp_path):
    # checkpoint.every=1000: no periodic checkpoint before the end, so the resume point can only
    # come from the checkpoint written on the signal. A 30-minute limit makes the early USR2 a
    # preemption notice for submitit: requeued without counting as a time-out.
    run_dir, job_id = slurm_cluster.interrupted_sweep(
        tmp_path,
        ["quadrant=PHR", "launcher=slurm_dev", "train.steps=40", "checkpoint.every=1000", *FAST],
        sweep_id="requeue",
        what="step 3 in the log",
        interrupt=["scancel", "--signal=USR2"],
        timeout=240,
        ready=lambda run: (
            (run / "quadrants.log").exists() and "step 3/40" in (run / "quadrants.log").read_text()
        ),
    )
    log = (run_dir / "quadrants.log").read_text()  # both runs of the job append to it
    assert "this job is preempted" in log and "Requeued job" in log, log[-3000:]
    # the loop checkpointed before submitit's handler requeued the job
    assert log.index("checkpoint of step") < log.index("Requeued job")
    saved = int(log.split("checkpoint of step ")[1].split()[0])
    assert f"(step {saved})" in log  # "resumed from .../step_000000k (step k)" in the requeued run
    assert saved >= 3
    parents, children = _runs(tmp_path)
    (run,) = children  # the requeued job logged into the same run
    assert run.info.status == "FINISHED"
    assert _steps(tmp_path, run.info.run_id) == list(range(1, 41))
    assert _steps(tmp_path, run.info.run_id, "tracking/step_logged") == list(range(0, 41))
    assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout


def _status(cluster, cwd: Path, sweep_dir: Path) -> list[dict]:
    done = _quadrants(cluster, cwd, "quadrants.status", str(sweep_dir), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_detached_submission_returns_at_once_and_status_reports_the_finished_jobs(
    slurm_cluster, tmp_path
):
    submitted = time.monotonic()
    done = _quadrants(
        slurm_cluster,
        tmp_path,
        "quadrants.submit",
        "quadrant=PHR,NLR",
        "launcher=slurm_dev",
        "train.steps=4",
        "sweep_id=detached",
        *FAST,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sweep_dir = tmp_path / "outputs" / "quadrants" / "detached"
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    jobs = manifest["jobs"]
    assert [j["name"] for j in jobs] == ["quadrant=PHR", "quadrant=NLR"]
    array_id = manifest["array_job_id"]
    assert [j["job_id"] for j in jobs] == [f"{array_id}_0", f"{array_id}_1"]
    assert [j["run_dir"] for j in jobs] == [str(sweep_dir / j["name"]) for j in jobs]
    assert "quadrant=NLR" in jobs[1]["overrides"] and manifest["parent_run_id"]
    # the submitter has exited; the jobs are still queued or running, on their own
    states = slurm_cluster.sacct_states(array_id) or {}
    assert not all(s == "COMPLETED" for s in states.values()) or len(states) < 2, (
        states,
        time.monotonic() - submitted,
    )

    expected = {j["job_id"]: "COMPLETED" for j in jobs}
    slurm_cluster.wait_for(
        "both jobs to complete", lambda: slurm_cluster.sacct_states(array_id) == expected, 180
    )
    status = _status(slurm_cluster, tmp_path, sweep_dir)
    for job, row in zip(jobs, status):
        assert (
            row["job_id"] == job["job_id"] and row["run_status"] == "FINISHED" and row["step"] == 4
        )
        assert set(row["metrics"]) >= {
            "train/reward_mean",
            "train/solve_rate",
            "eval/arithmetic/avg_at_1",
        }
    parents, children = _runs(tmp_path)
    assert parents[0].info.run_id == manifest["parent_run_id"]
    assert parents[0].info.status == "FINISHED"  # closed by the last job, not by the submitter
    # ... which also put the summary and the analysis report on it
    assert "quadrant=NLR" in parents[0].data.tags["mlflow.note.content"]
    assert "analysis/report.html" in {
        a.path for a in _client(tmp_path).list_artifacts(parents[0].info.run_id, "analysis")
    }
    table = _quadrants(
        slurm_cluster, tmp_path, "quadrants.status", "detached"
    ).stdout  # by sweep id
    assert "quadrant=NLR" in table and "COMPLETED" in table and "solve_rate" in table
    experiment_id = parents[0].info.experiment_id  # the links status and submit print
    link = f"quadrants: parent run  http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{manifest['parent_run_id']}"
    assert link in table and link in done.stdout


def test_job_killed_without_a_signal_resumes_when_the_sweep_is_submitted_again(
    slurm_cluster, tmp_path
):
    args = [
        "quadrant=PHR",
        "launcher=slurm_dev",
        "train.steps=80",
        "checkpoint.every=2",
        "sweep_id=killed",
        *FAST,
    ]
    done = _quadrants(slurm_cluster, tmp_path, "quadrants.submit", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    sweep_dir = tmp_path / "outputs" / "quadrants" / "killed"
    (job,) = json.loads((sweep_dir / "sweep.json").read_text())["jobs"]
    slurm_cluster.wait_for(
        "a checkpoint at step 4",
        lambda: (Path(job["run_dir"]) / "checkpoints" / "step_0000004").exists(),
        120,
    )
    # No handler runs, as on a node failure: SIGKILL to the job's step (the srun task that runs
    # the trainer), not to the job. `scancel --signal=KILL <job>` cancels the job, and a cancelled
    # job's tasks get SIGTERM first and SIGKILL only KillWait (5 s) later (slurmd
    # _rpc_terminate_job), so the trainer's SIGTERM handler closed its run KILLED whenever it
    # finished within 5 s (CI at dc37dd5: 'KILLED' == 'FAILED'). A step's SIGKILL is delivered as
    # SIGKILL (slurmstepd's terminate: SIGCONT, then SIGKILL to the step's processes).
    slurm_cluster.run("scancel", "--signal=KILL", f"{job['job_id']}.0")

    def job_state() -> str:
        return slurm_cluster.sacct_states(job["job_id"]).get(job["job_id"], "").split(" ")[0]

    slurm_cluster.wait_for(
        "the job to end", lambda: job_state() in ("CANCELLED", "FAILED"), 60
    )  # "CANCELLED by 0"
    (row,) = _status(slurm_cluster, tmp_path, sweep_dir)
    assert row["run_status"] == "FAILED"  # status closed what the killed job left RUNNING
    killed_at = max(
        int(p.name.split("_")[1])
        for p in (Path(job["run_dir"]) / "checkpoints").glob("step_???????")
    )
    assert killed_at < 80

    again = _quadrants(slurm_cluster, tmp_path, "quadrants.submit", *args)  # the same command
    assert again.returncode == 0, again.stderr[-3000:]
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert manifest["previous_submissions"][0]["array_job_id"] == job["job_id"].split("_")[0]
    (new_job,) = manifest["jobs"]
    slurm_cluster.wait_for(
        "the resubmitted job to complete",
        lambda: slurm_cluster.sacct_states(new_job["job_id"]).get(new_job["job_id"]) == "COMPLETED",
        180,
    )
    parents, children = _runs(tmp_path)
    (run,) = children
    assert run.info.status == "FINISHED" and len(parents) == 1
    assert _steps(tmp_path, run.info.run_id) == list(range(1, 81))  # every step exactly once


@pytest.mark.parametrize(
    "override, reason",
    [
        ("hydra.launcher.partition=nosuchpartition", "Invalid partition name specified"),
        ("hydra.launcher.mem_gb=100000", "Requested node configuration is not available"),
    ],
)
def test_refused_submission_reports_slurms_reason_and_writes_no_manifest(
    slurm_cluster, tmp_path, override, reason
):
    done = _quadrants(
        slurm_cluster,
        tmp_path,
        "quadrants.submit",
        "quadrant=PHR,NHR",
        "launcher=slurm_dev",
        "train.steps=3",
        "sweep_id=refused",
        override,
        *FAST,
        timeout=120,
    )
    assert done.returncode != 0
    assert reason in done.stderr and "no manifest was written" in done.stderr
    assert not (tmp_path / "outputs" / "quadrants" / "refused").exists()
    parents, children = _runs(tmp_path)  # the parent opened for it was deleted again
    assert parents == [] and children == []
