"""A full disk under the MLflow store when a run ends: `finish` stops waiting as soon as the first
attempt after it fails with SQLite's "database or disk is full" (space does not come back while the
process ends), says so, and keeps the records in the spool; any other failure is still waited out
for the whole timeout (a server that is restarting comes back). tests/e2e/test_full_disk.py meets
the same case on a real full tmpfs; here the store's write fails as SQLAlchemy reports SQLITE_FULL,
which is what that disk gives (sqlite3.OperationalError 'database or disk is full')."""

from __future__ import annotations

import errno
import logging
import time

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from quadrants.tracking.delivery import is_store_full
from quadrants.tracking.mlflow_tracker import MlflowTracker

FULL = "(sqlite3.OperationalError) database or disk is full"


def _ended_while_the_store_fails(tmp_path, monkeypatch, message: str, timeout_s: float):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "quadrants", run_name="r", spool_dir=tmp_path / "spool")
    tracker.start()
    assert tracker.flush(30)  # the run is open in the store

    def refuse(*_args, **_kwargs):
        raise MlflowException(message)

    monkeypatch.setattr(MlflowClient, "log_batch", refuse)
    monkeypatch.setattr(MlflowClient, "set_terminated", refuse)
    tracker.log_metrics({"train/reward": 0.5}, step=1)
    started = time.monotonic()
    tracker.finish("FAILED", timeout_s=timeout_s)
    return tracker, time.monotonic() - started


def test_a_full_disk_under_the_store_ends_the_wait_at_once(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="quadrants.tracking"):
        tracker, seconds = _ended_while_the_store_fails(tmp_path, monkeypatch, FULL, 60.0)
    assert tracker.undelivered
    assert seconds < 10, seconds  # one attempt after finish (a back-off of 0.5-1 s), not 60 s
    (said,) = [
        r.getMessage() for r in caplog.records if "disk under the store is full" in r.getMessage()
    ]
    assert "database or disk is full" in said and str(tmp_path / "spool") in said
    assert (tmp_path / "spool").is_dir()  # the records stay for the next tracker


def test_another_failure_is_waited_out(tmp_path, monkeypatch):
    tracker, seconds = _ended_while_the_store_fails(
        tmp_path, monkeypatch, "connection refused", 3.0
    )
    assert tracker.undelivered and seconds >= 3.0


def test_what_counts_as_a_full_disk():
    assert is_store_full(MlflowException(FULL))
    assert is_store_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_store_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_store_full(MlflowException("database is locked"))
