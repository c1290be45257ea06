"""Which steps' sample completions a run keeps, and where: every `tracking.log_samples_every`
steps and the last step (0 = never), written by rank 0 under `<run_dir>/samples/step_<step>.json`
(the records themselves: run/samples.py) and logged as artifacts under `samples`. A run without a
run directory keeps none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quadrants.run.build import Run
from quadrants.run.samples import write_samples
from quadrants.tracking.base import Tracker


class SampleArtifacts:
    """Writes a step's samples when the step is due."""

    def __init__(self, ctx: Run, run_dir: Path | None, tracker: Tracker) -> None:
        self.ctx, self.run_dir, self.tracker = ctx, run_dir, tracker
        self.every, self.total = ctx.plan.tracking.log_samples_every, ctx.plan.train.steps

    def due(self, step: int) -> bool:
        """Every `log_samples_every` steps and the last step, on rank 0 of a run with a run
        directory."""
        return (
            self.run_dir is not None
            and bool(self.every)
            and self.ctx.dist.is_main
            and (step % self.every == 0 or step == self.total)
        )

    def maybe(self, step: int, output: Any) -> None:
        """Writes step `step`'s samples (`output`: its StepOutput) and logs them as an artifact
        when the step is due."""
        if not self.due(step):
            return
        assert self.run_dir is not None  # due says so
        path = write_samples(
            self.run_dir / "samples" / f"step_{step:06d}.json", output, self.ctx.tokenizer, step
        )
        self.tracker.log_artifact(path, "samples")
