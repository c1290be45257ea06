"""A run whose records reached no MLflow run fails (tracking/setup.py `check_delivered`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quadrants.tracking.base import NullTracker
from quadrants.tracking.setup import UndeliveredError, check_delivered


def test_no_run_in_the_store_is_a_failure_naming_the_store_and_the_spool():
    spool = Path("/runs/x/tracking")
    with pytest.raises(
        RuntimeError,
        match=r"nothing was delivered to the MLflow store at "
        r"http://h:5000.*kept in /runs/x/tracking; send them once the store answers with "
        r"`python -m quadrants.tracking deliver /runs/x` \(add --tracking-uri URI",
    ):
        check_delivered(NullTracker(), "http://h:5000", spool)


def test_a_run_that_exists_passes():
    tracker = NullTracker()
    tracker.run_id = "abc123"
    check_delivered(tracker, "http://h:5000", Path("/runs/x/tracking"))


def test_a_run_with_records_left_in_its_spool_fails_naming_the_deliver_command():
    tracker = NullTracker()
    tracker.run_id = "abc123"
    tracker.undelivered = True  # what MlflowTracker.finish sets when its flush timed out
    with pytest.raises(
        UndeliveredError,
        match=r"run abc123 trained to its end, but MLflow at http://h:5000 did not take all of "
        r"its records.*kept in /runs/x/tracking; send them once the store answers with "
        r"`python -m quadrants.tracking deliver /runs/x`",
    ):
        check_delivered(tracker, "http://h:5000", Path("/runs/x/tracking"))
