"""The hindsight-credit probe during a run (`probe.every`: probe/* metrics of the live policy every
N steps; 0 = never; quadrants/probe, docs/probe.md), and when it runs. Unlike the held-out
evaluation it does not run at the last step unless that step is a multiple of `probe.every`.
"""

from __future__ import annotations

from quadrants.run.build import Run
from quadrants.tracking.base import Tracker


class Probing:
    """Probes `ctx`'s live policy at its steps, into the step's metrics."""

    def __init__(self, ctx: Run, tracker: Tracker) -> None:
        self.ctx, self.tracker = ctx, tracker
        self.every = ctx.plan.probe.every

    def due(self, step: int) -> bool:
        """Every `probe.every` steps (0: never)."""
        return bool(self.every and step % self.every == 0)

    def maybe(self, step: int, metrics: dict[str, float]) -> None:
        """Adds the probe's metrics to step `step`'s `metrics` when the step is due."""
        if not self.due(step):
            return
        from quadrants.probe.branching import ProbeSettings
        from quadrants.probe.measure import probe_in_training

        ctx = self.ctx
        metrics.update(
            probe_in_training(
                ctx.model,
                ctx.tokenizer,
                ctx.engine,
                ctx.grader,
                ctx.task,
                ProbeSettings.of(ctx.plan),
                ctx.dist,
                step,
                self.tracker,
            )
        )
