"""The held-out evaluation of the live policy during a run, and when it runs: step 0 (a run that
starts there), every `eval.every` steps, and the last step, which also carries the headline keys
(`final/avg_at_<n>`, ...: short copies for MLflow's table and charts, tracking/headline.py).

The loop asks it at every step (`maybe`); it decides whether the step is one of its own, as a
torchtitan validator does (pytorch/torchtitan, torchtitan/components/validate.py
`should_validate`).
"""

from __future__ import annotations

import logging

from quadrants.eval.in_training import evaluate_policy
from quadrants.eval.runner import EvalSettings
from quadrants.run.build import Run
from quadrants.tracking.base import Tracker
from quadrants.tracking.headline import headline, headline_sources

log = logging.getLogger("quadrants.train")


class HeldOutEvaluation:
    """Evaluates `ctx`'s policy on the held-out problems at its steps, into the step's metrics."""

    def __init__(self, ctx: Run, tracker: Tracker) -> None:
        self.ctx, self.tracker = ctx, tracker
        self.every, self.total = ctx.plan.eval.every, ctx.plan.train.steps
        self.sources = headline_sources(
            ctx.plan.eval.benchmarks, ctx.task.name, ctx.plan.eval.samples
        )

    def due(self, step: int) -> bool:
        """The last step, and every `eval.every` steps (0: only the last)."""
        return step == self.total or bool(self.every and step % self.every == 0)

    def start(self, first: int) -> dict[str, float]:
        """The starting policy's metrics, logged as step 0, when the run starts at step 0 (a
        resumed run has them already): {} otherwise."""
        if first != 0:
            return {}
        metrics = self._evaluate(0)
        self.tracker.log_metrics(metrics, step=0)
        if metrics:  # {} with evaluation off, and on ranks other than 0
            log.info("step 0 held-out: %s", _fmt(metrics))
        return metrics

    def maybe(self, step: int, metrics: dict[str, float]) -> None:
        """Adds the held-out metrics to step `step`'s `metrics` when the step is due, and the
        headline keys at the last step."""
        if self.due(step):
            metrics.update(self._evaluate(step))
        if step == self.total:
            metrics.update(headline(metrics, self.sources))

    def final(self, last_step: dict[str, float]) -> dict[str, float]:
        """The last step's held-out metrics (logged as one line)."""
        final = {k: v for k, v in last_step.items() if k.startswith("eval/")}
        if self.total and final:
            log.info("step %d held-out: %s", self.total, _fmt(final))
        return final

    def _evaluate(self, step: int) -> dict[str, float]:
        """Held-out metrics of the live policy (eval/in_training.py; {} on ranks other than 0)."""
        ctx = self.ctx
        return evaluate_policy(
            ctx.engine,
            ctx.grader,
            ctx.task,
            ctx.tokenizer,
            EvalSettings.of(ctx.plan),
            ctx.dist,
            step,
            self.tracker,
        )


def _fmt(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.3f}" for k, v in metrics.items())
