"""How `tracked` (tracking/setup.py) ends a run: FINISHED, FAILED on an error, KILLED at once on a
signal's SystemExit or Ctrl-C (the resumed run re-opens it as RUNNING: tracking/delivery.py)."""

from __future__ import annotations

import pytest

from quadrants.tracking.base import RecordingTracker
from quadrants.tracking.setup import tracked


@pytest.mark.parametrize(
    ("raised", "status"),
    [
        (None, "FINISHED"),
        (RuntimeError, "FAILED"),
        (SystemExit, "KILLED"),
        (KeyboardInterrupt, "KILLED"),
    ],
)
def test_the_run_ends_as_its_block_ended(raised, status):
    tracker = RecordingTracker()
    if raised is None:
        with tracked(tracker):
            pass
    else:
        with pytest.raises(raised), tracked(tracker):
            raise raised(143) if raised is SystemExit else raised()
    assert tracker.status == status
