"""A run whose records reached no MLflow run fails (tracking/setup.py `check_delivered`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quadrants.tracking.base import NullTracker
from quadrants.tracking.setup import check_delivered


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
