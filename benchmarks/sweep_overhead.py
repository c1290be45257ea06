"""Sweep-layer overheads: (a) time from command to first training step, (b) the share of step
time spent in tracking calls during a real training run.

(a) runs `python -m quadrants.sweep` as a user would (fresh directory, fresh MLflow store) and
    timestamps the moment its first "step 1/" line appears; it also reports when the step-0
    evaluation finished.
(b) runs `run_training` in-process with the real MlflowTracker (SQLite store, fsync per record)
    wrapped in a timer, and divides the time the training thread spent in tracker calls by the step
    time.

    python benchmarks/sweep_overhead.py [--model tiny] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from quadrants.config import ObjectiveConfig, RunConfig
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking.mlflow_tracker import MlflowTracker


class TimedTracker:
    """Forwards to a tracker and adds up the wall time the calling thread spends in its per-step
    calls (log_metrics, log_params, log_artifact); start/flush/finish are set-up and tear-down."""

    PER_STEP = ("log_metrics", "log_params", "log_artifact")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name not in self.PER_STEP:
            return target

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


def time_to_first_step(model: str, workdir: Path) -> tuple[float, float | None]:
    args = [
        sys.executable,
        "-m",
        "quadrants.sweep",
        f"model={model}",
        "train.steps=2",
        "eval.problems=20",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        args,
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    first_step = eval_done = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if eval_done is None and "step 0 held-out" in line:
            eval_done = time.perf_counter() - start
        if first_step is None and "step 1/" in line:
            first_step = time.perf_counter() - start
    proc.wait()
    if proc.returncode != 0 or first_step is None:
        raise SystemExit(f"the run failed (exit {proc.returncode})")
    return first_step, eval_done


def tracking_share(model: str, steps: int, workdir: Path) -> tuple[float, float, int]:
    cfg = RunConfig(objective=ObjectiveConfig(name="grpo"))  # the figures in the docs are GRPO's
    cfg.model.name_or_path = model
    cfg.train.steps = steps
    cfg.eval.problems = 0
    cfg.run_dir = str(workdir / "run")
    cfg.checkpoint.every = 0
    tracker = TimedTracker(
        MlflowTracker(
            f"sqlite:///{workdir / 'mlflow.db'}",
            "bench",
            run_name="bench",
            spool_dir=workdir / "run" / "tracking",
            artifact_location=(workdir / "artifacts").as_uri(),
        )
    )
    start = time.perf_counter()
    run_training(RunPlan.parse(cfg), tracker)
    total = time.perf_counter() - start
    tracker.finish()
    return tracker.seconds, total, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        first, evaluated = time_to_first_step(args.model, Path(tmp))
        print(
            f"(a) command -> first training step: {first:.1f} s "
            f"(step-0 held-out evaluation of 20 problems done at {evaluated:.1f} s)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        spent, total, steps = tracking_share(args.model, args.steps, Path(tmp))
        print(
            f"(b) {steps} steps in {total:.1f} s; training thread in tracker calls {spent:.3f} s "
            f"= {100 * spent / total:.2f} % of step time (goal < 2 %)"
        )


if __name__ == "__main__":
    main()
