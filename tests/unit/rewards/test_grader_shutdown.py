"""Grader workers end with the trainer, quietly: real trainer stand-in processes (grader_holder.py)
killed with SIGKILL or SIGTERM, before and after their workers are ready. Afterwards no process of
the trainer's tree is left (running, stopped or zombie) and nothing is printed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HOLDER = Path(__file__).with_name("grader_holder.py")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a live or zombie process; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1])


def _descendants(root: int) -> set[int]:
    """Every process below `root` (the forkserver, the workers, multiprocessing's resource tracker)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = stat[1]
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _start(mode: str) -> tuple[subprocess.Popen, list[int]]:
    holder = subprocess.Popen(
        [sys.executable, str(HOLDER), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    line = holder.stdout.readline()  # blocks until the holder is up (and, in "ready", its workers)
    assert line.startswith("HOLDING"), holder.stderr.read()
    return holder, [int(pid) for pid in line.split()[1:]]


def _left_over(pids: set[int], within_s: float = 10.0) -> dict[int, tuple[str, int]]:
    deadline = time.monotonic() + within_s
    while True:
        left = {pid: stat for pid in pids if (stat := _stat(pid)) is not None}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("how", "mode"),
    [
        ("SIGKILL", "ready"),
        ("SIGTERM", "ready"),
        ("SIGTERM", "startup"),  # workers still importing sympy: they used to hit a broken pipe
        (
            "SIGTERM",
            "unread",
        ),  # a trainer loading its model: workers used to print ConnectionResetError
        ("SIGKILL", "unread"),
        (
            "SIGTERM to the process group",
            "ready",
        ),  # as SLURM and a terminal do: every process gets it
    ],
)
def test_workers_end_with_the_trainer_and_print_nothing(how, mode):
    holder, workers = _start(mode)
    if mode == "startup":
        time.sleep(0.5)
    tree = _descendants(holder.pid)
    assert set(workers) <= tree
    if how == "SIGTERM to the process group":
        os.killpg(holder.pid, signal.SIGTERM)
    else:
        os.kill(holder.pid, getattr(signal, how))
    _, err = holder.communicate(timeout=60)
    assert holder.returncode == -getattr(signal, how.split()[0])
    assert _left_over(tree) == {}, "grader processes outlived the trainer"
    assert err == "", err  # no ConnectionResetError / BrokenPipeError traceback


@pytest.mark.subprocess
def test_a_worker_that_cannot_read_its_pipe_still_dies_with_the_trainer():
    # stopped workers never see EOF on their pipe: only the parent-death signal ends them
    holder, workers = _start("ready")
    tree = _descendants(holder.pid)
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while not all(_stat(pid)[0] == "T" for pid in workers):
        assert time.monotonic() < deadline, [_stat(pid) for pid in workers]
        time.sleep(0.05)
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate(timeout=60)
    assert _left_over(tree) == {}


@pytest.mark.subprocess
def test_the_trainers_own_close_still_stops_workers_that_ignore_sigterm():
    from quadrants.rewards.grader import Grader

    grader = Grader(num_workers=1)
    assert grader.grade(["\\boxed{2}"], ["2"]).rewards == [1.0]
    [worker] = grader._workers
    os.kill(worker.process.pid, signal.SIGTERM)  # ignored: the trainer decides when workers stop
    time.sleep(0.5)
    assert worker.process.is_alive()
    grader.close()
    assert not worker.process.is_alive()
