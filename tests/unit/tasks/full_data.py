"""What the full-data tests may find absent from the complete data home.

A benchmark whose record has no reference checksum (`DataFile.sha256 is None`: AMC's 83 problems,
whose file no session could fetch and check, quadrants/tasks/data_files.py) has never been seen by
the project, so the complete data home beside CI's clone may lack it; its full-data tests skip,
naming the command that fetches it. Every benchmark with a reference checksum must be there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quadrants.tasks.data_files import CATALOGUE, check


def unverified(name: str) -> bool:
    return CATALOGUE[name].sha256 is None


def skip_if_never_fetched(name: str, data_dir: Path) -> None:
    if unverified(name) and check(name, data_dir).state == "missing":
        pytest.skip(
            f"{name}: no reference copy has been checked and {data_dir} lacks it; "
            f"`python -m quadrants.data download {name}` on a networked machine, then record "
            "its checksum in quadrants/tasks/data_files.py"
        )
