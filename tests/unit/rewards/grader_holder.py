"""A trainer stand-in for tests/unit/rewards/test_grader_shutdown.py: starts a Grader, waits as
`argv[1]` says (startup: not at all; unread: until every worker has said it is ready, without reading
it; ready: until every worker has graded), prints its workers' pids, and waits to be killed."""

from __future__ import annotations

import sys
import time

from quadrants.rewards.grader import Grader

if __name__ == "__main__":
    with Grader(num_workers=2) as grader:
        deadline = time.monotonic() + 120
        while sys.argv[1] == "ready" and not all(
            w.ready for w in grader._workers
        ):  # every worker started
            assert time.monotonic() < deadline, "grading workers did not start"
            grader.grade(["\\boxed{1}", "\\boxed{2}"], ["1", "1"])
        if (
            sys.argv[1] == "unread"
        ):  # each worker's ready message waits in its pipe, unread, as in a
            for worker in grader._workers:  # trainer still loading its model
                assert worker.conn.poll(120), "grading workers did not start"
        print("HOLDING", " ".join(str(w.process.pid) for w in grader._workers), flush=True)
        time.sleep(600)
