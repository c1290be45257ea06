"""`-m ... launcher=slurm` where SLURM cannot take the sweep, as a user meets it: real
`python -m quadrants.sweep` / `quadrants.submit` processes, with no sbatch on PATH or with stand-in
SLURM commands (shell scripts) whose controller is down or whose sbatch refuses the array.

Nothing may be written when SLURM is missing; a parent MLflow run opened before a refused
submission ends FAILED (and `quadrants.submit` deletes one it created)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.integration

ARGS = [
    "-m",
    "seed=0,1",
    "launcher=slurm",
    "tracking.sqlite_on_slurm=true",  # what is tested is the missing SLURM, not the store
    "model=tiny_random",
    "eval.problems=0",
]


def fake_slurm(bin_dir: Path, *, ping: str, ping_rc: int) -> None:
    """sbatch refuses every array; `scontrol ping` prints `ping` and exits `ping_rc`; srun exists."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {
        "sbatch": "echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2; exit 1",
        "scontrol": f"echo '{ping}'; exit {ping_rc}",
        "srun": "exit 1",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)


def run(module: str, cwd: Path, path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": str(path), "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", module, *ARGS],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.parametrize("module", ["quadrants.sweep", "quadrants.submit"])
def test_no_sbatch_fails_before_anything_is_written(module, tmp_path):
    (tmp_path / "bin").mkdir()
    done = run(module, tmp_path, tmp_path / "bin")
    assert done.returncode != 0
    assert (
        "quadrants: SLURM is not available, nothing was submitted and nothing was written."
        in done.stderr
    )
    assert "sbatch is not on PATH" in done.stderr and "launcher=slurm_dev" in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bin"
    ]  # no outputs/, no mlflow.db, no .submitit


def test_controller_down_gives_the_same_message_from_both_entry_points(tmp_path):
    fake_slurm(tmp_path / "bin", ping="Slurmctld(primary) at ctl is DOWN", ping_rc=1)
    sweep = run("quadrants.sweep", tmp_path, tmp_path / "bin")
    submit = run("quadrants.submit", tmp_path, tmp_path / "bin")
    for done in (sweep, submit):
        assert done.returncode != 0
        said = "the SLURM controller does not answer: `scontrol ping` says Slurmctld(primary) at ctl is DOWN"
        assert said in done.stderr
    assert sweep.stderr.splitlines()[-3:] == submit.stderr.splitlines()[-3:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def parent_runs(cwd: Path) -> list:
    client = MlflowClient(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants")
    assert experiment is not None
    return client.search_runs(
        [experiment.experiment_id],
        "tags.`quadrants.role` = 'sweep_parent'",
        run_view_type=ViewType.ALL,
    )


def test_parent_run_of_a_refused_sweep_ends_failed(tmp_path):
    fake_slurm(tmp_path / "bin", ping="Slurmctld(primary) at ctl is UP", ping_rc=0)
    done = run("quadrants.sweep", tmp_path, tmp_path / "bin")
    assert done.returncode != 0, done.stderr[-2000:]
    assert "Invalid partition name specified" in done.stderr
    [parent] = parent_runs(tmp_path)
    assert parent.info.status == "FAILED"


def test_parent_run_of_a_refused_submit_ends_failed_and_deleted(tmp_path):
    fake_slurm(tmp_path / "bin", ping="Slurmctld(primary) at ctl is UP", ping_rc=0)
    done = run("quadrants.submit", tmp_path, tmp_path / "bin")
    assert done.returncode != 0, done.stderr[-2000:]
    assert (
        "SLURM refused the sweep" in done.stderr
        and "Invalid partition name specified" in done.stderr
    )
    [parent] = parent_runs(tmp_path)
    assert (parent.info.status, parent.info.lifecycle_stage) == ("FAILED", "deleted")
