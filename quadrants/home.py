"""Where the user's files live: one per-user root for built models and data, and the data home.

- The cache root: ``$QUADRANTS_CACHE``, else ``~/.cache/quadrants``. Built models go under it
  (`quadrants.models.cache`).
- The data home: ``$QUADRANTS_DATA``, else ``<cache root>/data``. Benchmark and training files live
  there, one sub-directory per data set, in the layout the loaders read
  (``aime24/test.jsonl``, ``gsm8k/train.jsonl``, ...); ``python -m quadrants.data`` lists, downloads
  and imports them.

A leaf module: paths and environment variables only, so the data loaders (`quadrants.tasks`) and
the model cache (`quadrants.models`) share it without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "DATA_ENV", "default_cache_root", "default_data_dir"]

CACHE_ENV = "QUADRANTS_CACHE"
"""Environment variable naming the per-user cache root."""

DATA_ENV = "QUADRANTS_DATA"
"""Environment variable naming the data home (one sub-directory per data set)."""


def default_cache_root() -> Path:
    """``$QUADRANTS_CACHE``, else ``~/.cache/quadrants``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "quadrants"


def default_data_dir() -> Path:
    """The data home: ``$QUADRANTS_DATA``, else ``<cache root>/data``."""
    configured = os.environ.get(DATA_ENV)
    return Path(configured).expanduser() if configured else default_cache_root() / "data"
