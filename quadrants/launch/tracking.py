"""Entry point: `python -m quadrants.tracking deliver RUN_DIR [--tracking-uri URI]` — send a run's
stranded tracking records to an MLflow store.

    # the store the run was meant for, now that it answers
    python -m quadrants.tracking deliver outputs/quadrants/s1a2b3c4/quadrant=PHR,seed=0
    # another store (a run that was pointed at the wrong one)
    python -m quadrants.tracking deliver outputs/quadrants/s1a2b3c4/quadrant=PHR,seed=0 \\
        --tracking-uri http://mlflow-host:5000

A run's records wait in its spool (`RUN_DIR/tracking`) until MLflow takes them; a run whose store
never answered ends with them still there (the job says so and exits non-zero). This sends them
without training: the store is checked first as a run's preflight checks it
(tracking/reachability.py), then the delivery of tracking/redeliver.py runs to the end. Exit 0 when
everything arrived, 1 otherwise (the records stay in the spool; run it again).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from quadrants.tracking.reachability import store_message, store_problem
from quadrants.tracking.redeliver import deliver_spool, spool_directory
from quadrants.tracking.spool import Spool, SpoolBusyError

COMMAND = "python -m quadrants.tracking deliver"


def parser() -> argparse.ArgumentParser:
    """The command line of `deliver` (after the word `deliver`)."""
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Send a run's undelivered tracking records to an MLflow store."
    )
    parser.add_argument("run", metavar="RUN_DIR", help="a run directory, or its tracking/ spool")
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="the MLflow store to send to (default: the one the run was started with)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the store (600)"
    )
    return parser


def deliver(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        directory = spool_directory(Path(args.run))
        uri = args.tracking_uri
        if uri is None:
            spool = Spool(directory)  # raises SpoolBusyError while a process holds it
            uri = spool.state.get("tracking_uri")
            spool.close()
        if not uri:
            raise ValueError(f"{directory} records no tracking store; pass --tracking-uri URI")
        problem = store_problem(uri)
        if problem is not None:
            raise ValueError(store_message(uri, *problem, None).replace("tracking.uri=", ""))
        done = deliver_spool(directory, uri, timeout_s=args.timeout)
    except (FileNotFoundError, ValueError, SpoolBusyError) as error:
        print(f"quadrants.tracking deliver: {error}", file=sys.stderr)
        return 2
    if not done.complete:
        print(
            f"not everything reached {uri} within {args.timeout:.0f} s (last error: "
            f"{done.last_error}); the rest stays in {directory}: run the command again",
            file=sys.stderr,
        )
        return 1
    status = done.status or store_status(uri, done.run_id)
    if status is None:
        ended = "its status unread" if done.run_id else "not created (nothing was spooled for it)"
    elif status == "RUNNING":
        ended = "left RUNNING (its process never ended it: run the training command again)"
    else:
        ended = f"{status} in MLflow" if done.status is None else f"ended {status}"
    refused = f"; MLflow refused {done.dropped} record(s) (logged above)" if done.dropped else ""
    print(f"delivered {directory} to {uri}: run {done.run_id}, {ended}{refused}")
    return 0


def store_status(uri: str, run_id: str | None) -> str | None:
    """The run's status as the store has it now (a spool with nothing left to send ended its run
    in an earlier delivery, or was never ended); None without a run."""
    if run_id is None:
        return None
    from mlflow.tracking import MlflowClient

    try:
        return MlflowClient(uri).get_run(run_id).info.status
    except Exception:  # noqa: BLE001 - the delivery itself succeeded; the status is extra
        return None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] != "deliver":
        sys.exit(f"usage: {COMMAND} RUN_DIR [--tracking-uri URI] [--timeout S]")
    sys.exit(deliver(argv[1:]))
