"""Entry point: `python -m quadrants.sweep [-m] [overrides...]` — one run, or a Hydra multirun.

    python -m quadrants.sweep -m quadrant=PHR,NHR,PLR,NLR             # the four-quadrant ablation
    python -m quadrants.sweep -m experiment=baselines launcher=slurm tracking=server   # on SLURM
    python -m quadrants.sweep --cfg job quadrant=PHR                   # show the composed config

Before Hydra launches anything, every job of the command is composed and validated (preflight), and
the command gets its sweep id (a hash of its overrides unless given), so re-running the same command
resumes the same runs.
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from quadrants.launch.hydra_setup import (
    CONFIG_DIR,
    cpu_run_environment,
    hydra_argv,
    launcher_target,
    name_runs_by_swept_keys,
    preflight,
    register,
    with_sweep_id,
)
from quadrants.launch.local_jobs import (
    end_workers,
    forward_signals,
    run_stoppable,
    stopped_by,
    use_tied_workers,
)
from quadrants.launch.slurm_host import SLURM_LAUNCHER, no_slurm_message, slurm_problem
from quadrants.launch.sweep_callbacks import close_open_parent, report_pending

register()


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> dict:
    from quadrants.launch.job import run_job

    # in a local worker, a job stopped by the sweep's signal returns (launch/local_jobs.py)
    return run_stoppable(lambda: run_job(cfg))


def main(argv: list[str] | None = None) -> None:
    from_command_line = argv is None
    argv = hydra_argv(
        list(sys.argv[1:] if argv is None else argv)
    )  # Hydra's flags may stand anywhere
    argv = name_runs_by_swept_keys(with_sweep_id(argv))
    if from_command_line:
        # libgomp reads its spin count when torch loads, long before now: a CPU run starts the
        # command again with it set (quadrants/cpu/openmp.py); the new process finds it set
        extra = cpu_run_environment(argv, os.environ)
        if extra:
            command = [sys.executable, "-m", "quadrants.sweep", *sys.argv[1:]]
            os.execve(sys.executable, command, {**os.environ, **extra})
    try:
        jobs = preflight(argv)
    except ValueError as err:
        sys.exit(f"quadrants: invalid configuration, nothing was launched.\n  {err}")
    if jobs and ("-m" in argv or "--multirun" in argv) and launcher_target(argv) == SLURM_LAUNCHER:
        problem = slurm_problem()
        if problem is not None:
            sys.exit(no_slurm_message(problem))
    sys.argv = [sys.argv[0], *argv]
    # the local launcher's workers die with this process and get its SIGINT/SIGTERM as SIGTERM
    # (launch/local_jobs.py); a job in this process gets SIGINT as SIGTERM
    use_tied_workers()
    if from_command_line:
        forward_signals()
    try:
        _hydra_main()
    # a sweep that ended before its end callback (a refused submission, a crash): parent FAILED;
    # stopped by a signal: KILLED, and re-running the command resumes it
    finally:
        end_workers()
        close_open_parent("FAILED" if stopped_by() is None else "KILLED")
        pending = report_pending()  # runs whose records wait in their spools: named, exit 1
    if stopped_by() is not None:
        sys.exit(128 + stopped_by())
    if pending:
        sys.exit(1)


if __name__ == "__main__":
    main()
