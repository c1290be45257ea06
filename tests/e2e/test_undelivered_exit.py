"""Exit codes that tell the truth (issue 61, item 2), against a real `mlflow server`
(tests/e2e/test_tracking_server.py `Server`): the server is stopped once the run has logged its
first step; the run trains to its end, exits non-zero and prints the deliver command; once the
server is back, `python -m quadrants.tracking deliver` ends the run FINISHED with every step once,
and a second `deliver` reports the run's true status (FINISHED, not "left RUNNING")."""

from __future__ import annotations

import re
import threading
from collections import Counter

import pytest

from tests import commands
from tests.commands import TINY
from tests.e2e.test_tracking_server import Server

pytestmark = [pytest.mark.slow, pytest.mark.server]


def test_a_run_whose_store_goes_away_exits_non_zero_and_deliver_finishes_it(tmp_path):
    root = tmp_path / "server"
    root.mkdir()
    server = Server(root)
    work = tmp_path / "work"
    work.mkdir()
    try:
        server.start(timeout_s=300)  # a loaded 2-core machine takes minutes
        process = commands.start(
            "quadrants.sweep",
            "sweep_id=X",
            "train.steps=2",
            f"tracking.uri={server.uri}",
            *TINY,
            cwd=work,
        )
        out: list[str] = []
        first_step = threading.Event()

        def read() -> None:
            for line in process.stdout:
                out.append(line)
                if "step 1/2" in line:
                    first_step.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert first_step.wait(600), "".join(out)[-3000:]
        server.stop()  # after the run's first step: the rest waits in the run's spool
        stderr = process.stderr.read()
        assert process.wait(600) != 0, stderr[-3000:]
        reader.join(10)
        said = "".join(out) + stderr
        run_dir = work / "outputs" / "quadrants" / "X" / "default"
        assert f"python -m quadrants.tracking deliver {run_dir}" in said, said[-3000:]
        assert "UndeliveredError" in stderr  # the job's own error, naming why it failed

        server.start(timeout_s=300)  # a loaded 2-core machine takes minutes
        delivered = commands.run("quadrants.tracking", "deliver", str(run_dir), cwd=work)
        assert delivered.returncode == 0, delivered.stderr[-3000:]
        assert "ended FINISHED" in delivered.stdout, delivered.stdout
        found = re.search(r": run ([0-9a-f]{32}), ended FINISHED", delivered.stdout)
        assert found, delivered.stdout
        run_id = found.group(1)
        run = server.get("/api/2.0/mlflow/runs/get", run_id=run_id)["run"]
        assert run["info"]["status"] == "FINISHED"
        history = server.get(
            "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key="train/reward_mean"
        )["metrics"]
        assert Counter(int(m["step"]) for m in history) == {1: 1, 2: 1}  # every step, once

        again = commands.run("quadrants.tracking", "deliver", str(run_dir), cwd=work)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "FINISHED in MLflow" in again.stdout and "RUNNING" not in again.stdout
    finally:
        server.stop()
