"""The user's model cache: where built models live (`$QUADRANTS_CACHE`, else ~/.cache/quadrants; the
root is `quadrants.home`'s, shared with the data home) and the lock that serialises concurrent
builders of one entry."""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Iterator
from pathlib import Path

from quadrants.home import CACHE_ENV, default_cache_root

__all__ = ["CACHE_ENV", "default_cache_root", "exclusive_lock"]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if missing); waits, saying so,
    while another holds it."""
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("another process is building %s; waiting for it", path.with_suffix(""))
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
