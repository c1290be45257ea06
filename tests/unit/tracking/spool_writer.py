"""A training process stand-in for the tracking tests: logs steps through MlflowTracker, then finishes,
or SIGKILLs itself with records still undelivered. Prints `RUN <id>` once the run is open."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from quadrants.tracking.mlflow_tracker import MlflowTracker

sys.path.insert(0, str(Path(__file__).parent))
from helpers import step_metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--spool", required=True, type=Path)
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--last", type=int, required=True)
    parser.add_argument(
        "--flush-after", type=int, help="flush (deliver) after this step, then go on"
    )
    parser.add_argument("--offset", type=float, default=0.0)
    parser.add_argument("--flush-every-s", type=float, default=0.5)
    parser.add_argument("--kill", action="store_true", help="SIGKILL itself after the last step")
    args = parser.parse_args()
    tracker = MlflowTracker(
        args.uri, args.experiment, spool_dir=args.spool, flush_every_s=args.flush_every_s
    )
    print("RUN", tracker.start(), flush=True)
    for step in range(args.first, args.last + 1):
        tracker.log_metrics(step_metrics(step, args.offset), step=step)
        if step == args.flush_after:
            assert tracker.flush(60), "flush timed out"
    if args.kill:
        os.kill(os.getpid(), signal.SIGKILL)
    tracker.finish()


if __name__ == "__main__":
    main()
