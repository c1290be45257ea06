"""Deliver a stranded spool: the records of a run whose process ended before MLflow took them (the
store was down or wrong for the whole run, or the process was killed), sent to a named store with no
training process around (`python -m quadrants.tracking deliver RUN_DIR`, launch/tracking.py).

The spool's `state.json` holds what creating the run needs (`request`, written by
`MlflowTracker.start`: the run's name, tags, parent and artifact location) and the store it was
meant for. The same delivery thread as in training (tracking/delivery.py) sends the records, so the
guarantees are the same: each (metric, step) at most once, a run that reached the store earlier
re-opened rather than created twice. Delivered to another store than the one recorded, the records
go to a new run there (the recorded run id and parent belong to the other store), and only those
still in the spool: what the first store took is not in it any more.

The run ends as its process ended it: the status record its `finish()` spooled (FINISHED, FAILED)
is applied; a process killed before `finish()` left none, and the run stays RUNNING (the training
command, run again, resumes it and ends it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quadrants.tracking.delivery import Delivery, RunRequest
from quadrants.tracking.spool import Position, Spool

STATE_FILE = "state.json"
SPOOL_DIR = "tracking"  # a run directory's spool (tracking/setup.py `make_tracker`)


@dataclass(frozen=True)
class Delivered:
    """What `deliver_spool` did: the run the records went to, whether all of them arrived (False:
    the timeout passed; they stay in the spool), the status the run was ended with (None: left
    RUNNING), the last error the store gave, and how many records MLflow refused for good."""

    tracking_uri: str
    run_id: str | None
    complete: bool
    status: str | None
    last_error: str | None
    dropped: int


def spool_directory(path: Path) -> Path:
    """The spool of a run directory (`RUN_DIR/tracking`), or `path` itself when it is a spool;
    raises FileNotFoundError naming what was looked for."""
    path = Path(path).expanduser().resolve()
    for candidate in (path / SPOOL_DIR, path):
        if (candidate / STATE_FILE).is_file():
            return candidate
    raise FileNotFoundError(
        f"{path} holds no tracking spool ({SPOOL_DIR}/{STATE_FILE}); pass a run directory "
        "(outputs/<study>/<sweep_id>/<job>) or its tracking/ directory"
    )


def _ending(spool: Spool) -> tuple[str | None, str | None]:
    """(session, status) of the last status record not yet delivered: the process that spooled it
    ended the run so; (None, None) when there is none."""
    session = status = None
    position = spool.cursor
    while True:
        records, position = spool.read(position, 512)
        if not records:
            return session, status
        for record in records:
            if record.payload.get("kind") == "status":
                session, status = record.payload.get("session"), record.payload.get("status")


def deliver_spool(
    directory: Path, tracking_uri: str | None = None, *, timeout_s: float = 600.0
) -> Delivered:
    """Send what waits in the spool `directory` to `tracking_uri` (default: the store it was meant
    for). Raises `SpoolBusyError` while a live process holds the spool, ValueError when no store is
    named or recorded."""
    spool = Spool(Path(directory))
    delivery = None
    try:
        state = spool.state
        recorded = state.get("tracking_uri")
        uri = tracking_uri or recorded
        if not uri:
            raise ValueError(f"{spool.directory} records no tracking store; name one")
        if not spool.pending():
            return Delivered(uri, state.get("run_id"), True, None, None, 0)
        same_store = uri == recorded
        fields = state.get("request") or {}
        if not same_store and state.get("run_id"):  # an id of the other store
            spool.update_state(run_id=None)
        session, status = _ending(spool)
        request = RunRequest(
            tracking_uri=uri,
            experiment=state.get("experiment") or "quadrants",
            run_name=fields.get("run_name"),
            tags=dict(fields.get("tags") or {}),
            parent_run_id=fields.get("parent_run_id") if same_store else None,
            artifact_location=fields.get("artifact_location") if same_store else None,
            run_id=state.get("run_id") if same_store else None,
        )
        # the session of the spooled status record: the thread applies that record (a status of
        # another session is an earlier process's, skipped; tracking/delivery.py `_deliver_other`)
        delivery = Delivery(
            spool, request, session=session or "none", flush_every_s=0.5, max_backoff_s=5.0
        )
        delivery.start()
        end: Position = spool.end
        complete = delivery.wait_delivered(end, timeout_s)
        return Delivered(
            uri,
            delivery.run_id,
            complete,
            status if complete else None,
            delivery.last_error,
            delivery.dropped,
        )
    finally:
        if delivery is not None:
            delivery.stop(join_s=10.0)  # the thread closes the spool
        else:
            spool.close()


def pending_runs(sweep_dir: Path) -> list[Path]:
    """The run directories under `sweep_dir` whose spools still hold records MLflow has not taken
    (a run whose store went away before its end); a spool a live process holds is skipped."""
    from quadrants.tracking.spool import SpoolBusyError

    found = []
    for state in sorted(Path(sweep_dir).glob(f"*/{SPOOL_DIR}/{STATE_FILE}")):
        try:
            spool = Spool(state.parent)
        except (SpoolBusyError, OSError, ValueError):
            continue
        try:
            if spool.pending():
                found.append(state.parent.parent)
        finally:
            spool.close()
    return found
