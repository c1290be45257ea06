"""One job of a sweep: a composed Hydra config in, a tracked (and resumable) training run out.

The job derives everything from its config: the run directory (from the sweep and the job's
overrides, never a timestamp), the MLflow experiment (the study), the parent run (written by the
sweep callback into `<sweep dir>/sweep.json`), and its own MLflow run id (kept in
`<run_dir>/run.json` and in checkpoints), so running the same command again continues the same runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from quadrants.device import require_usable_device
from quadrants.distributed.collectives import init_distributed
from quadrants.launch.hydra_setup import to_run_plan
from quadrants.run.checkpoint import latest_path
from quadrants.run.loop import run_training
from quadrants.run.resume_identity import check_resume, history_name
from quadrants.run.run_info import run_tags
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import NullTracker
from quadrants.tracking.setup import check_delivered, make_tracker, tracked, tracking_uri

log = logging.getLogger("quadrants.job")


def run_job(
    job_cfg: DictConfig, parent_run_id: str | None = None, *, plan: RunPlan | None = None
) -> dict[str, Any]:
    """Run one composed job; returns a summary dict (Hydra keeps it as the job's return value).

    `parent_run_id`: the sweep's MLflow parent run (default: read from the sweep's sweep.json).
    `plan`: the job's plan when the caller parsed `job_cfg` already (launch/submit.py
    `DetachedJob`), else parsed here."""
    if plan is None:
        plan = to_run_plan(job_cfg)  # parsed once: the loop starts from this plan
    # a log record that cannot be written (the run directory's disk is full) is dropped, not
    # answered with a traceback on stderr that repeats the error being logged (the logging
    # module's own advice for production code: docs.python.org/3/library/logging.html,
    # `logging.raiseExceptions`); the console handler still prints it
    logging.raiseExceptions = False
    # train.device=cuda on a node without a usable GPU (an old driver, a CPU torch): stop now,
    # before the tracking run, the process group and rank 0's load of the weights
    require_usable_device(plan.train.device)
    assert plan.run_dir is not None
    change = check_resume(plan)  # a resume under another config: refused before anything is written
    run_dir = Path(plan.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # several srun tasks of one job (launcher=slurm_ddp) join one process
    # group; else world 1, no group
    env = init_distributed(plan.distributed.backend, device=plan.train.device)
    if env.is_main:
        # config.yaml stays the first config of a run with checkpoints; a change gets its own file
        if change is not None or latest_path(run_dir) is None:
            (run_dir / history_name(change)).write_text(OmegaConf.to_yaml(job_cfg, resolve=True))
    tracker = (
        make_tracker(plan, run_dir, run_tags(plan), parent_run_id) if env.is_main else NullTracker()
    )
    log.info("run %s: tracking to %s", run_dir, tracking_uri(plan))
    with tracked(tracker):
        result = run_training(plan, tracker)
    if env.is_main:  # a run that tracked nothing fails (exit non-zero)
        check_delivered(tracker, tracking_uri(plan), run_dir / "tracking")
    return {"run_dir": str(run_dir), "run_id": result.run_id, **result.final_eval}
