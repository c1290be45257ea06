"""SIGINT, SIGTERM and SIGKILL to a `python -m quadrants.sweep -m` process on this machine (the local
launcher: Hydra's joblib launcher, loky workers): nothing of the sweep is alive 30 s later, and the
same command re-run resumes the run with every step in MLflow exactly once. SIGINT and SIGTERM reach
the job as SIGTERM (it checkpoints its last completed step); SIGKILL kills the workers through their
parent-death signal (quadrants/launch/local_jobs.py)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from tests import commands
from tests.commands import TINY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The signal lands once step 3 is logged (polled every 0.05 s), well before step STEPS: the tiny
# random model's steps take about a second here. 12, not 100: the re-run trains the rest, and 97
# steps of it were most of each case's time.
STEPS = 12
ARGS = [
    "-m",
    "seed=1",
    "hydra.launcher.n_jobs=2",  # loky even on a one-core machine (n_jobs=1 runs in-process)
    f"train.steps={STEPS}",
    "checkpoint.every=1000",  # no periodic checkpoint: the signal's is the only one
    "sweep_id=signals",
    *[o for o in TINY if not o.startswith("tracking.log_samples_every=")],
    "tracking.log_samples_every=0",
    "train.threads=1",
]


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # it ended meanwhile (a short-lived grandchild)
        return ""


def _alive(processes: list[psutil.Process]) -> list[str]:
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{process.pid} {_command(process)[:120]}")
        except psutil.NoSuchProcess:
            pass
    return alive


def _in_directory(directory: Path) -> list[psutil.Process]:
    """Every process whose working directory is `directory` (the sweep and all it started)."""
    found = []
    for process in psutil.process_iter():
        try:
            if Path(process.cwd()) == directory:
                found.append(process)
        except (psutil.Error, OSError):
            pass
    return found


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name
)
def test_a_signal_to_the_sweep_stops_every_process_and_the_rerun_resumes_once(tmp_path, sig):
    proc = commands.start("quadrants.sweep", *ARGS, cwd=tmp_path, stderr=subprocess.STDOUT)
    log_file = tmp_path / "outputs" / "quadrants" / "signals" / "default" / "quadrants.log"
    deadline = time.time() + 600  # a busy 2-core machine took 5 min to build and load
    try:
        while not (log_file.exists() and f"step 3/{STEPS}" in log_file.read_text()):
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the job never reached step 3"
            time.sleep(0.05)
    except BaseException:  # leave no sweep training behind a failed test
        sweep = psutil.Process(proc.pid)
        for process in [*sweep.children(recursive=True), sweep]:
            process.kill()
        raise
    sweep = psutil.Process(proc.pid)
    tree = [sweep, *sweep.children(recursive=True)]
    workers = [p for p in tree if "popen_loky_posix" in _command(p)]
    assert len(workers) == 2, [_command(p) for p in tree]  # the job's and an idle one
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    if sig != signal.SIGKILL:
        assert proc.returncode == 128 + sig, out
        assert "checkpoint and stop" in out, out
    deadline = time.time() + 30
    while (_alive(tree) or _alive(_in_directory(tmp_path))) and time.time() < deadline:
        time.sleep(0.5)
    assert not _alive(tree) and not _alive(_in_directory(tmp_path)), _alive(tree) + _alive(
        _in_directory(tmp_path)
    )
    run_dir = log_file.parent
    if sig != signal.SIGKILL:  # the job checkpointed the last step it logged
        assert list((run_dir / "checkpoints").glob("step_???????")), out

    done = commands.run("quadrants.sweep", *ARGS, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants").experiment_id
    runs = client.search_runs([experiment])
    (run,) = [r for r in runs if r.data.tags.get("quadrants.role") != "sweep_parent"]
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/step"))
    assert steps == list(range(1, STEPS + 1))  # every step exactly once, in one MLflow run
