"""Fixtures for the tracking tests: a real sqlite MLflow store per test (copied from one migrated once)."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

WRITER = Path(__file__).with_name("spool_writer.py")


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sqlite file with MLflow's schema: creating one costs ~7 s of migrations, copying it nothing."""
    path = tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def store_uri(template_db: Path, tmp_path: Path) -> str:
    path = tmp_path / "mlflow.db"
    shutil.copy(template_db, path)
    return f"sqlite:///{path}"


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture
def unverified_mlflow(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """An installed MLflow whose UI the links were not checked with (3.18.0 here), and the log.

    Setting `mlflow.__version__` is an honest stand-in for installing another MLflow: what is tested
    is the version check, and links.verified_ui reads that attribute at each call; the URL
    functions use nothing else of mlflow. The once-per-process notice is reset before and after."""
    import mlflow

    from quadrants.tracking import links

    monkeypatch.setattr(mlflow, "__version__", "3.18.0")
    links._warn_plain_links.cache_clear()
    caplog.set_level(logging.WARNING, logger=links.__name__)
    yield caplog
    links._warn_plain_links.cache_clear()
