"""The training loop's per-step progress (run/step_progress.py; what a SLURM log shows, off a
terminal): one line per step with its metrics, the step's wall time and the time left."""

from __future__ import annotations

import io
import logging

from quadrants.run.step_progress import StepProgress, step_line
from quadrants.tracking import keys

METRICS = {
    keys.train("reward_mean"): 0.25,
    keys.train("solve_rate"): 0.5,
    keys.train("entropy"): 1.2345,
    keys.train("response_length"): 7.5,
}


def test_the_step_line_has_the_step_time_and_the_time_left():
    # step 2 of 60 took 0.44 s; 58 steps left at a mean of 0.39 s: 22.62 s, shown rounded: 0:00:23
    line = step_line(2, 60, METRICS, 0.44, 58 * 0.39)
    assert line == (
        "step 2/60 reward 0.250 solve 0.500 entropy 1.234 len 7.5 time 0.4s ETA 0:00:23"
    )
    # an hour and more reads as h:mm:ss
    assert step_line(2, 60, METRICS, 61.0, 3725.4).endswith("time 61.0s ETA 1:02:05")


def test_every_step_of_a_resumed_run_logs_its_time_and_the_time_left(caplog):
    """Resumed after step 2 of 6, the clock at 0 s when the loop starts; steps 3, 4, 5, 6 end at
    2, 5, 6 and 10 s. The ETA is this process's mean step time times the steps left:
    step 3: 2 s, 2/1 x 3 left = 6 s; step 4: 3 s, 5/2 x 2 = 5 s; step 5: 1 s, 6/3 x 1 = 2 s;
    step 6: 4 s, 10/4 x 0 = 0 s."""
    clock = iter([0.0, 2.0, 5.0, 6.0, 10.0])
    progress = StepProgress(2, 6, clock=lambda: next(clock), stream=io.StringIO())
    with caplog.at_level(logging.INFO, logger="quadrants.train"):
        for index in progress.bar:
            progress.done(index + 1, METRICS)
    prefix = "reward 0.250 solve 0.500 entropy 1.234 len 7.5"
    assert caplog.messages == [
        f"step 3/6 {prefix} time 2.0s ETA 0:00:06",
        f"step 4/6 {prefix} time 3.0s ETA 0:00:05",
        f"step 5/6 {prefix} time 1.0s ETA 0:00:02",
        f"step 6/6 {prefix} time 4.0s ETA 0:00:00",
    ]
