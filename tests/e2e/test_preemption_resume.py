"""SIGTERM (what SLURM sends on scancel, `scontrol requeue`, preemption, the time limit) checkpoints the
last completed step before the run exits, so the re-run resumes with at most the step in flight lost:
a real `python -m quadrants.sweep` run, a real signal, a real MLflow SQLite store. (The SLURM variant,
submitit's USR2 and requeue, is tests/slurm/test_quadrants_on_slurm.py.)"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest
from mlflow.tracking import MlflowClient

from tests import commands
from tests.commands import TINY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# the tiny sweep without sample logging
FAST = [o for o in TINY if not o.startswith("tracking.log_samples_every=")]
FAST += ["tracking.log_samples_every=0", "train.threads=1"]


def test_sigterm_checkpoints_the_last_logged_step_and_the_rerun_resumes_there(tmp_path):
    # checkpoint.every=1000 > steps: no periodic checkpoint before the end, so any checkpoint found
    # after the signal was written by the signal
    args = ["train.steps=60", "checkpoint.every=1000", "sweep_id=term", *FAST]
    proc = commands.start("quadrants.sweep", *args, cwd=tmp_path, stderr=subprocess.STDOUT)
    run_dir = tmp_path / "outputs" / "quadrants" / "term" / "default"
    log_file = run_dir / "quadrants.log"
    deadline = time.time() + 300
    while not (log_file.exists() and "step 3/60" in log_file.read_text()):
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "the run never reached step 3"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out

    checkpoints = [
        int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_???????")
    ]
    assert len(checkpoints) == 1, checkpoints
    saved = checkpoints[0]
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    # KILLED at once (issue 61), not RUNNING until resumed; the resumed run re-opens it as RUNNING
    # (tracking/delivery.py `_open_run`) and ends it FINISHED below
    assert run.info.status == "KILLED"
    logged = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/step"))
    # the checkpoint is the last step that completed and was logged: nothing logged is lost, and the
    # step in flight (if any) was not logged
    assert 3 <= saved < 60 and logged == list(range(1, saved + 1)), (saved, logged)
    assert re.search(rf"checkpoint of step {saved} written", out), out

    done = commands.run("quadrants.sweep", *args, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"(step {saved})" in done.stdout + done.stderr  # "resumed from .../step_... (step k)"
    (run,) = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/step"))
    assert steps == list(range(1, 61))  # every step exactly once, in one MLflow run
