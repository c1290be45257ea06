"""A full disk mid-run, as a user meets it: `python -m quadrants.sweep` with `outputs` (run directory,
tracking spool, checkpoints and the SQLite MLflow store) on a small tmpfs, filled after step 4 is
spooled. Needs root for `mount -t tmpfs`; without it the spool's all-or-nothing append and the stop are
tested on an injected ENOSPC (tests/unit/tracking/test_spool_disk_full.py).

Must hold: no metric step is lost or merged; the run is not FINISHED with a gap; the error names the
path, once; a re-run with space completes every step exactly once, in the same MLflow run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests import commands
from tests.commands import TINY

pytestmark = pytest.mark.integration

STEPS = 10
ARGS = [
    *TINY,
    f"train.steps={STEPS}",
    "checkpoint.every=3",
    "checkpoint.keep=1",
    "train.threads=1",
    "sweep_id=disk",
]


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the injected-ENOSPC tests cover it"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def start(cwd: Path) -> subprocess.Popen:
    return commands.start(
        "quadrants.sweep", *ARGS, cwd=cwd, env=commands.command_env(OMP_NUM_THREADS="1")
    )


def spooled_steps(run_dir: Path) -> set[int]:
    steps = set()
    for segment in (run_dir / "tracking").glob("*.jsonl"):
        for line in segment.read_bytes().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("kind") == "metrics":
                steps.add(record["step"])
    return steps


def fill(disk: Path) -> Path:
    """Write zeros into `disk` until it is full; return the file."""
    path = disk / "filler"
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
        except OSError:
            pass
    with open(path, "ab", buffering=0) as handle:  # the last partial MiB too
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    return path


def test_full_disk_loses_no_step_and_a_rerun_completes_every_step_once(small_tmpfs: Path):
    cwd = small_tmpfs
    run_dir = cwd / "outputs" / "quadrants" / "disk" / "default"
    process = start(cwd)
    deadline = time.monotonic() + 300
    while 4 not in (spooled_steps(run_dir) if run_dir.exists() else set()):
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before step 4"
        time.sleep(0.2)
    filler = fill(cwd)
    out, err = process.communicate(timeout=300)
    spooled = spooled_steps(run_dir)

    # it stopped, naming the path once, without torch's or SQLAlchemy's noise
    assert process.returncode != 0, out[-2000:] + err[-2000:]
    assert (out + err).count("no space left on device: ") == 1, err[-4000:]
    assert str(cwd) in err.split("no space left on device: ", 1)[1].splitlines()[0]
    assert "inline_container" not in err and len(err) < 40_000
    # the spool holds whole records only, each step once, 0..last with no gap
    for segment in (run_dir / "tracking").glob("*.jsonl"):
        for line in segment.read_bytes().splitlines():
            json.loads(line)  # every line is one record: nothing cut, nothing merged
    assert spooled == set(range(max(spooled) + 1)) and max(spooled) < STEPS

    # MLflow: one run, not FINISHED
    client = MlflowClient(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status != "FINISHED"

    filler.unlink()  # space again: the same command resumes
    process = start(cwd)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-4000:]
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    for key in ("tracking/step_logged", "train/reward_mean", "train/entropy"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        first = 0 if key == "tracking/step_logged" else 1
        assert sorted(steps) == list(range(first, STEPS + 1)), (
            key,
            sorted(steps),
        )  # every step exactly once
