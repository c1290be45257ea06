"""A detached job's log lines (`python -m quadrants.submit`: submitit runs the job without Hydra's
job logging) name the run, as the sweep's jobs' lines do."""

from __future__ import annotations

import logging

from quadrants.launch.submit import _log_to


def test_a_detached_jobs_lines_name_its_run(tmp_path):
    log_file = tmp_path / "quadrant=PHR,seed=1" / "quadrants.log"
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        _log_to(log_file)
        logging.getLogger("quadrants.train").info("step 1/2 reward %.3f", 0.5)
    finally:
        for handler in root.handlers[len(before) :]:
            handler.close()
        root.handlers[:] = before
        root.setLevel(level)
    (line,) = log_file.read_text().splitlines()
    assert line.endswith("][quadrant=PHR,seed=1][quadrants.train][INFO] - step 1/2 reward 0.500")
