"""The analysis command under both names: `python -m quadrants.analysis` and the alias
`python -m analysis` (a thin top-level package kept for the documented command) run the same
command line, quadrants/launch/analysis.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.subprocess
@pytest.mark.parametrize("module", ["analysis", "quadrants.analysis"])
def test_both_names_run_the_command_line(module, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = str(ROOT)
    # in a directory without ./outputs/mlflow.db and no store given, the command line's own refusal
    # (exit status 2), not an ImportError
    done = subprocess.run(
        [sys.executable, "-m", module],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "analysis: no MLflow store given" in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2
