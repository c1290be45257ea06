"""Every test session reads benchmark and training files from a data home of small fixture files.

`pytest_configure` writes `tests/data_fixtures.py`'s files into a temporary directory and points
``$QUADRANTS_DATA`` at it before collection (subprocesses inherit it), so no test depends on data
beside the repository or in the user's data home, and none skips for want of it. Tests over the
complete real files are marked ``full_data`` (deselected by default) and take `full_data_dir`: the
``$QUADRANTS_DATA`` this session started with (.ci/run's full-data stage sets it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from quadrants.home import DATA_ENV
from tests.data_fixtures import write_fixture_data

_STARTED_WITH: dict[str, str | None] = {}


def pytest_configure(config: pytest.Config) -> None:
    if "data_home" in _STARTED_WITH:
        return
    _STARTED_WITH["data_home"] = os.environ.get(DATA_ENV)
    root = Path(tempfile.mkdtemp(prefix="quadrants-test-data-"))
    _STARTED_WITH["fixtures"] = str(write_fixture_data(root))
    os.environ[DATA_ENV] = str(root)


def pytest_unconfigure(config: pytest.Config) -> None:
    fixtures = _STARTED_WITH.pop("fixtures", None)
    started = _STARTED_WITH.pop("data_home", None)
    if fixtures is None:
        return
    shutil.rmtree(fixtures, ignore_errors=True)
    if started is None:
        os.environ.pop(DATA_ENV, None)
    else:
        os.environ[DATA_ENV] = started


# The quick tier (`pytest -m quick`, the README's development command): the research core's unit tests
# (objectives, tensor ops, the layering) that are not marked slow, plus the end-to-end tests marked
# `quick` in their file (a toy objective trains a step). Heavy tests are marked by folder here and by
# hand elsewhere (`slurm`, `server`), so that `-m "not slurm and not distributed and not server"`
# leaves them out.
QUICK_PATHS = ("tests/unit/objectives/", "tests/unit/ops/", "tests/unit/test_layering.py")
FOLDER_MARKERS = {"tests/distributed/": "distributed", "tests/slurm/": "slurm"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        where = Path(str(item.path)).resolve().relative_to(root).as_posix()
        for folder, marker in FOLDER_MARKERS.items():
            if where.startswith(folder):
                item.add_marker(marker)
        if where.startswith(QUICK_PATHS) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)


@pytest.fixture
def fixture_data_dir() -> Path:
    """The session's data home of fixture files."""
    return Path(_STARTED_WITH["fixtures"])


@pytest.fixture
def full_data_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The complete data home the session started with, also set as ``$QUADRANTS_DATA``."""
    started = _STARTED_WITH.get("data_home")
    if not started:
        pytest.skip(
            "a full_data test: set QUADRANTS_DATA to a complete data home "
            "(python -m quadrants.data download --all)"
        )
    monkeypatch.setenv(DATA_ENV, started)
    return Path(started)
