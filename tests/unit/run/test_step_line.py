"""The training loop's per-step log line (what a SLURM log shows, off a terminal): metrics, the
step's wall time and the time left."""

from __future__ import annotations

from quadrants.run.step_progress import step_line
from quadrants.tracking import keys


def test_the_step_line_has_the_step_time_and_the_time_left():
    metrics = {
        keys.train("reward_mean"): 0.25,
        keys.train("solve_rate"): 0.5,
        keys.train("entropy"): 1.2345,
        keys.train("response_length"): 7.5,
    }
    # step 2 of 60 took 0.44 s; 58 steps left at a mean of 0.39 s: 22.62 s, shown rounded: 0:00:23
    line = step_line(2, 60, metrics, 0.44, 58 * 0.39)
    assert line == (
        "step 2/60 reward 0.250 solve 0.500 entropy 1.234 len 7.5 time 0.4s ETA 0:00:23"
    )
    # an hour and more reads as h:mm:ss
    assert step_line(2, 60, metrics, 61.0, 3725.4).endswith("time 61.0s ETA 1:02:05")
