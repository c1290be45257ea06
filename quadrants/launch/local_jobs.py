"""The local launcher's worker processes (launcher=local: Hydra's joblib launcher, loky backend):
they start tied to the sweep, receive its signals, and end with it.

How the workers come to be (joblib 1.6 and its vendored loky, read in site-packages):
- hydra_joblib_launcher/_core.py calls `Parallel(backend="loky", n_jobs=...)`; joblib looks the name
  up in its backend table (joblib/parallel.py, `BACKENDS[backend](nesting_level=...)`), and
  `LokyBackend.configure` passes the backend's own keyword arguments on to
  `get_memmapping_executor` (joblib/_parallel_backends.py), whose `initializer` loky runs first
  in every worker (joblib/externals/loky/process_executor.py, `_process_worker`). So
  `use_tied_workers()` registers the name "loky" again, for this process only, as a `LokyBackend`
  with an initializer: no change to Hydra's plugin or its config.
- loky starts each worker by fork+exec from the sweep process, in the sweep's process group (no
  setsid: loky/backend/fork_exec.py). A Ctrl-C at the terminal therefore reaches the workers too;
  they ignore SIGINT and leave it to the sweep, which sends them SIGTERM.

What the initializer (`_tie_to_sweep`) sets up in a worker:
- the parent-death signal (Linux prctl PR_SET_PDEATHSIG, as the grader's workers use:
  rewards/grader.py): SIGKILL of the sweep kills the worker, busy or idle, even in C code;
- SIGTERM raises `SystemExit(143)` in a job. Inside the training loop the loop's own handler
  (run/preemption.py) comes first: it checkpoints the last completed step and then calls this one.
  Before the loop there is nothing to checkpoint and the job unwinds at once. `run_stoppable` turns
  that exit into the job's return value, so joblib does not abort (SIGKILL) the other jobs while
  they are still writing their checkpoints; a worker told to stop starts no further job.

The sweep process (`forward_signals`): SIGINT or SIGTERM sends SIGTERM to every worker and waits
for them to checkpoint and stop; a second one kills them (and their children) at once. With no
worker (a single run, launcher=sequential, or before the jobs start) the job, if any, is in this
process: SIGTERM is the training loop's own (it checkpoints), SIGINT calls that same handler.
`stopped_by()` tells the sweep's end callback and the command's exit status. `end_workers()` shuts
the reusable executor down when the sweep ends, so no idle worker waits out loky's 300 s idle
timeout; loky's resource tracker ends when the last process holding its pipe (the sweep, the
workers) is gone.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("quadrants.sweep")

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_STOP_GRACE_S = 10.0  # after a second signal: SIGKILL for a worker tree still there this long
_stopped_by: int | None = None  # the signal this process (sweep or worker) was told to stop by
_in_worker = False
_in_job = False


def use_tied_workers() -> None:
    """Make joblib's "loky" backend, in this process, start its workers with `_tie_to_sweep`."""
    from joblib import register_parallel_backend
    from joblib._parallel_backends import LokyBackend

    register_parallel_backend(
        "loky", functools.partial(LokyBackend, initializer=_tie_to_sweep, initargs=(os.getpid(),))
    )


def _tie_to_sweep(sweep_pid: int) -> None:
    """A worker's first act (loky's initializer): die with the sweep, leave Ctrl-C to it, and
    unwind on SIGTERM."""
    global _in_worker
    _in_worker = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_worker)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != sweep_pid:  # the sweep died before the prctl: nothing would kill us
        os._exit(1)


def _stop_worker(signum: int, frame: Any) -> None:
    """SIGTERM in a worker: a job in progress unwinds (after the training loop's checkpoint); an
    idle worker only notes it (an exit inside loky's queue read would break the pool) and runs no
    further job."""
    global _stopped_by
    _stopped_by = signum
    if _in_job:
        raise SystemExit(128 + signum)


def run_stoppable(job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one job; in a worker the sweep's SIGTERM makes it return `{"stopped_by": ...}` (and a
    job that comes after that signal returns so at once) instead of raising, so joblib does not
    abort the other jobs while they write their checkpoints. Anywhere else, or any other exit,
    is left as it is."""
    global _in_job
    if _in_worker and _stopped_by is not None:
        return _stopped()
    _in_job = True
    try:
        return job()
    except SystemExit:
        if not _in_worker or _stopped_by is None:
            raise
        return _stopped()
    finally:
        _in_job = False


def _stopped() -> dict[str, Any]:
    name = signal.Signals(_stopped_by or signal.SIGTERM).name
    log.warning("job stopped by %s from the sweep; the same command resumes it", name)
    return {"stopped_by": name}


def stopped_by() -> int | None:
    """The signal that stopped this sweep (SIGINT or SIGTERM), or None."""
    return _stopped_by


def _workers() -> list[Any]:
    """This process's loky workers: its children started as `python -m
    joblib.externals.loky.backend.popen_loky_posix` (loky/backend/popen_loky_posix.py). Not loky's
    resource tracker (it ignores SIGINT and SIGTERM and ends once every process holding its pipe
    has) nor a forkserver of the base policy's build (it ends with this process)."""
    import psutil

    children = psutil.Process().children()
    return [c for c in children if any("popen_loky_posix" in a for a in _cmdline(c))]


def _cmdline(process: Any) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _forward(signum: int, frame: Any) -> None:
    global _stopped_by
    name = signal.Signals(signum).name
    workers = _workers()
    if not workers and _stopped_by is None:
        # the job runs in this process (a single run, launcher=sequential): SIGINT does what
        # SIGTERM does, which inside the training loop is its checkpoint (run/preemption.py)
        _stopped_by = signum
        handler = signal.getsignal(signal.SIGTERM)
        if signum == signal.SIGINT and callable(handler) and handler is not _forward:
            handler(signal.SIGTERM, frame)  # leaves, or waits for the step's update to complete
            return
        raise SystemExit(128 + signum)
    if _stopped_by is None:
        _stopped_by = signum
        pids = ", ".join(str(w.pid) for w in workers)
        print(
            f"quadrants: {name}: asking the jobs (pids {pids}) to checkpoint and stop; "
            "send it again to stop them at once, without a checkpoint",
            file=sys.stderr,
            flush=True,
        )
        for worker in workers:
            _send(worker, signal.SIGTERM)
        return
    kill_tree(workers)
    raise SystemExit(128 + signum)


def _send(process: Any, signum: int) -> None:
    import psutil

    try:
        process.send_signal(signum)
    except psutil.Error:
        pass


def kill_tree(processes: list[Any]) -> None:
    """SIGKILL `processes` and everything under them."""
    import psutil

    every = []
    for process in processes:
        try:
            every += [process, *process.children(recursive=True)]
        except psutil.Error:
            pass
    for process in every:
        _send(process, signal.SIGKILL)
    psutil.wait_procs(every, timeout=_STOP_GRACE_S)


def forward_signals() -> None:
    """In the sweep process: SIGINT and SIGTERM reach the jobs as SIGTERM (see the module's top)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _forward)


def end_workers() -> None:
    """Shut down the reusable loky executor joblib started, if any, and kill a worker still there
    after it (one stuck in C code)."""
    module = sys.modules.get("joblib.externals.loky.reusable_executor")
    # the module-level reusable executor (loky/reusable_executor.py `_executor`); its public
    # getter would make a new one when there is none
    executor = getattr(module, "_executor", None) if module is not None else None
    if executor is not None:
        executor.shutdown(wait=True)
    leftover = _workers()
    if leftover:
        kill_tree(leftover)
