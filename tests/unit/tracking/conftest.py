"""Fixtures for the tracking tests: a real sqlite MLflow store per test (copied from one migrated once)."""

from __future__ import annotations

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
