"""When the loop checkpoints, and what stops the run with a checkpoint: every `checkpoint.every`
steps and the last step (0 = never; a run without a run directory never does); a SLURM signal or
SIGTERM (run/preemption.py); a full disk while recording a step (the step saved with its metrics
inside, then one DiskFullError); a reward that cannot be computed (run/grading.py: the step saved,
if its regular checkpoint did not, for a resume once the reward is fixed).

The saves themselves and the disk-full stop are run/records.py's (`save_step`, `stop_if_disk_full`,
`disk_full_on_any_rank`), the files run/checkpoint.py's. The loop asks at every step; the step
decides, as torchtitan's checkpointer does (pytorch/torchtitan,
torchtitan/components/checkpoint.py `CheckpointManager.save(curr_step, last_step)` and
`_should_save`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quadrants.run.build import Run
from quadrants.run.checkpoint import has_checkpoint
from quadrants.run.grading import GradingFailed
from quadrants.run.offload import OptimizerOffload
from quadrants.run.preemption import SaveFn
from quadrants.run.records import (
    disk_full_on_any_rank,
    save_step,
    signal_save,
    stop_if_disk_full,
    write_run_id,
)
from quadrants.tracking.base import Tracker


class Checkpointing:
    """The run's checkpoints: its cadence, the save of a step and the saves before a stop."""

    def __init__(
        self, ctx: Run, run_dir: Path | None, tracker: Tracker, offload: OptimizerOffload | None
    ) -> None:
        self.ctx, self.run_dir, self.tracker, self.offload = ctx, run_dir, tracker, offload
        self.every = ctx.plan.checkpoint.every if run_dir is not None else 0
        self.total = ctx.plan.train.steps
        # how a signal checkpoints the last completed step (None: checkpoints are off)
        self.on_signal: SaveFn | None = signal_save(ctx, run_dir, tracker, offload)

    def due(self, step: int) -> bool:
        """Every `checkpoint.every` steps and the last step (`every` 0 or no run directory:
        never)."""
        return bool(self.every) and (step % self.every == 0 or step == self.total)

    def has(self, step: int) -> bool:
        """Whether step `step` has a complete checkpoint (a signal need not save it again)."""
        return has_checkpoint(self.run_dir, step)

    @contextmanager
    def recording(self, step: int, metrics: dict[str, float]) -> Iterator[None]:
        """Step `step`'s records inside (the ones rank 0 writes: its metrics, samples), then its
        checkpoint when due. A full disk in either stops the run with the step saved, its
        `metrics` inside (run/records.py `stop_if_disk_full`)."""
        due = self.due(step)
        with stop_if_disk_full(self.ctx, self.run_dir, self.tracker, step, metrics, self.offload):
            with disk_full_on_any_rank(self.ctx, self.run_dir):  # the records rank 0 writes
                yield
                if due:
                    write_run_id(self.run_dir, self.tracker.run_id)
            if due:
                save_step(self.ctx, self.run_dir, step, self.tracker, self.offload)

    @contextmanager
    def kept_if_grading_fails(self, step: int) -> Iterator[None]:
        """A `GradingFailed` inside stops the run with step `step` saved (unless its regular
        checkpoint just did): the same config resumes it once the reward is fixed."""
        try:
            yield
        except GradingFailed:
            if self.every and not self.due(step):
                save_step(self.ctx, self.run_dir, step, self.tracker, self.offload)
            raise
