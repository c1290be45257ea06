"""The run's guard against a reward that cannot be computed: a step whose completions are all
graded `error`, or too many of them over several steps, stops the run with `GradingFailed`.

`error` is the grader's word for "no grade": an exception of the user's `task.reward`
(rewards/custom.py), a gold answer math-verify cannot read, a crashed grading worker
(rewards/grader.py, rewards/outcome.py). A `timeout` (a hard answer that spent its CPU budget) and
`no_answer` are grades of the completion, not failures of the reward, and do not count. Without
the guard such a run trains on reward 0 everywhere and ends FINISHED having learned nothing.

The rule (`task.max_error_frac`, `task.error_steps`):
- a step whose error share is 1 (every completion) stops the run at that step;
- else, once `error_steps` steps are done in this process, their mean error share above
  `max_error_frac` stops it (null: only the first rule).

The share is the step's `train/outcome/error_frac`, the same on every rank, so every rank stops at
the same step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from quadrants.tracking import keys

ERROR_FRAC = keys.train("outcome/error_frac")


class GradingFailed(RuntimeError):
    """The run's rewards could not be computed: it stops (non-zero exit, MLflow FAILED)."""


@dataclass
class GradingGuard:
    """Watches each step's error share; `check` raises `GradingFailed` when the rule says stop."""

    max_error_frac: float | None
    steps: int
    reward: str | None = None  # task.reward, named in the error (None: math-verify)
    _recent: deque[float] = field(default_factory=deque)

    def check(self, step: int, metrics: dict[str, float]) -> None:
        share = metrics.get(ERROR_FRAC)
        if share is None:
            return
        self._recent.append(share)
        while len(self._recent) > self.steps:
            self._recent.popleft()
        grader = f"task.reward={self.reward}" if self.reward else "the grader (math-verify)"
        fix = (
            "fix the reward function (an exception there grades the completion 'error'; its "
            "first one is in the log above)"
            if self.reward
            else "check the task's gold answers (a gold math-verify cannot read grades every "
            "answer to it 'error')"
        )
        if share >= 1.0:
            raise GradingFailed(
                f"step {step}: {grader} could not grade any completion (train/outcome/error_frac "
                f"= 1.0): the step's reward is 0 whatever the policy wrote, so the run is stopped "
                f"(its checkpoint saved). Fix: {fix}"
            )
        if self.max_error_frac is None or len(self._recent) < self.steps:
            return
        mean = sum(self._recent) / len(self._recent)
        if mean > self.max_error_frac:
            raise GradingFailed(
                f"steps {step - self.steps + 1}-{step}: {grader} could not grade "
                f"{mean:.0%} of the completions (mean train/outcome/error_frac {mean:.3f} > "
                f"task.max_error_frac={self.max_error_frac} over task.error_steps={self.steps}), "
                f"so the run is stopped (its checkpoint saved). Fix: {fix}, or raise "
                "task.max_error_frac (null: stop only at a step with no grade at all)"
            )
