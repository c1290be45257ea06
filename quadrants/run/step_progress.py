"""The loop's progress: tqdm's bar over the steps on a terminal (quadrants/progress.py), and off one
(a SLURM log) a line per step with its metrics, its wall time and the estimate for the steps left
(the mean step time of this process so far, times the steps left).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import IO

from quadrants.progress import Progress
from quadrants.tracking import keys

log = logging.getLogger("quadrants.train")


def step_line(step: int, total: int, metrics: dict[str, float], seconds: float, eta: float) -> str:
    """One step's log line: its metrics, its wall time and the estimate for the steps left."""
    return (
        f"step {step}/{total} reward {metrics[keys.train('reward_mean')]:.3f} "
        f"solve {metrics[keys.train('solve_rate')]:.3f} entropy "
        f"{metrics[keys.train('entropy')]:.3f} len {metrics[keys.train('response_length')]:.1f} "
        f"time {seconds:.1f}s ETA {timedelta(seconds=round(eta))}"
    )


class StepProgress:
    """The bar over steps `first`+1..`total` (iterate `bar`: the step indices) and each step's
    line, from `done`. The clock starts at construction: make it just before the loop."""

    def __init__(
        self,
        first: int,
        total: int,
        *,
        clock: Callable[[], float] = time.perf_counter,
        stream: IO[str] | None = None,
    ) -> None:
        self.first, self.total, self.clock = first, total, clock
        # off a terminal each step logs its own line with its time and ETA: no 10 % lines
        self.bar = Progress(
            range(first, total),
            desc="train",
            unit="step",
            logger=log,
            initial=first,
            total=total,
            every=None,
            stream=stream,
        )
        self._loop_started = self._step_started = clock()

    def done(self, step: int, metrics: dict[str, float]) -> None:
        """Step `step` is complete: its line after the bar, and in the log off a terminal."""
        now = self.clock()
        eta = (now - self._loop_started) / (step - self.first) * (self.total - step)
        line = step_line(step, self.total, metrics, now - self._step_started, eta)
        self._step_started = now
        self.bar.set_postfix_str(line.split(" ", 2)[2])
        if not self.bar.on_terminal:
            log.info(line)
