"""Which local data files this process has read: the task loaders note each file
(`tasks.dataset.read_rows`, the benchmarks' local files) and a run's provenance hashes them
(quadrants/tracking/provenance.py)."""

from __future__ import annotations

from pathlib import Path

_FILES_READ: dict[Path, None] = {}  # insertion-ordered set


def note_read(file: Path | str) -> None:
    """Remember that this process read the local data file `file`."""
    _FILES_READ[Path(file).resolve()] = None


def files_read() -> list[Path]:
    """Every local data file this process has read, in the order first read."""
    return list(_FILES_READ)
