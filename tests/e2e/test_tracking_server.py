"""MlflowTracker against a real `mlflow server` that goes away mid-run and comes back.

The server runs with a sqlite backend in tmp_path, on a free loopback port, in its own session
(`start_new_session`), and is stopped with SIGTERM to its whole process group: a bare SIGTERM to the
leader right after start-up orphans its workers. The fixture's finalizer stops it even on failure.
The runs are read back through the REST API, as the MLflow UI reads them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from quadrants.tracking.mlflow_tracker import SENTINEL_KEY, MlflowTracker

pytestmark = [pytest.mark.slow, pytest.mark.server]
KEYS = tuple(f"train/m{i}" for i in range(5))


def step_metrics(step: int) -> dict[str, float]:
    return {key: step + i / 10 for i, key in enumerate(KEYS)}


class Server:
    """One `mlflow server` on a fixed port and store, which can be stopped and started again."""

    def __init__(self, root: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.root = root
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.root / "server.log", "ab") as log_file:
            self.process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"mlflow server not healthy after {timeout_s} s")

    def stop(self, grace_s: float = 15.0) -> None:
        if self.process is None:
            return
        group = self.process.pid  # the leader of its own session and process group
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and _group_alive(group, self.process):
                time.sleep(0.1)
            if not _group_alive(group, self.process):
                break
        self.process = None

    def get(self, endpoint: str, **query: str) -> dict:
        with urllib.request.urlopen(
            f"{self.uri}{endpoint}?{urllib.parse.urlencode(query)}", timeout=10
        ) as answer:
            return json.load(answer)

    def post(self, endpoint: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{self.uri}{endpoint}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)


def _group_alive(group: int, leader: subprocess.Popen[bytes]) -> bool:
    leader.poll()  # reap the leader, so a zombie does not count
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "server"
    root.mkdir()
    server = Server(root)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_steps_survive_a_server_outage_exactly_once(server: Server, tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="quadrants.tracking")
    early = MlflowTracker(
        server.uri,
        "outage",
        run_name="early",
        spool_dir=tmp_path / "early",
        flush_every_s=0.5,
        max_backoff_s=2.0,
    )
    early_id = early.start()
    assert early_id is not None
    for step in range(1, 31):
        early.log_metrics(step_metrics(step), step=step)
    assert early.flush(30)

    server.stop()
    durations = []
    for step in range(31, 61):  # training goes on while the server is down
        began = time.perf_counter()
        early.log_metrics(step_metrics(step), step=step)
        durations.append(time.perf_counter() - began)
    assert max(durations) < 0.5, durations  # local disk only (an HTTP attempt takes up to 15 s)
    notes = tmp_path / "notes.txt"
    notes.write_text("logged while the server was down\n")
    early.log_artifact(notes, "notes")
    # a job that starts while the server is down: no run id yet, but it trains and spools
    began = time.monotonic()
    late = MlflowTracker(
        server.uri,
        "outage",
        run_name="late",
        spool_dir=tmp_path / "late",
        flush_every_s=0.5,
        max_backoff_s=2.0,
    )
    assert late.start() is None
    assert time.monotonic() - began < 10
    for step in range(1, 21):
        late.log_metrics(step_metrics(step), step=step)
    assert not early.flush(timeout_s=1.0)

    server.start()
    back = time.monotonic()
    assert early.flush(60) and late.flush(60)
    catch_up_s = time.monotonic() - back
    assert catch_up_s < 20, f"delivery took {catch_up_s:.1f} s after the server came back"
    late_id = late.run_id
    assert late_id is not None
    early.finish()
    late.finish()

    # read back as the UI does
    experiment = server.get("/api/2.0/mlflow/experiments/get-by-name", experiment_name="outage")[
        "experiment"
    ]
    runs = server.post(
        "/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment["experiment_id"]]}
    )["runs"]
    by_name = {run["info"]["run_name"]: run for run in runs}
    assert {by_name["early"]["info"]["run_id"], by_name["late"]["info"]["run_id"]} == {
        early_id,
        late_id,
    }
    assert {run["info"]["status"] for run in runs} == {"FINISHED"}
    for run_id, last in ((early_id, 60), (late_id, 20)):
        for key in (*KEYS, SENTINEL_KEY):
            points = server.get(
                "/api/2.0/mlflow/metrics/get-history",
                run_id=run_id,
                metric_key=key,
                max_results="25000",
            )["metrics"]
            assert Counter(p["step"] for p in points) == Counter(range(1, last + 1)), (run_id, key)
            if key != SENTINEL_KEY:
                assert sorted((p["step"], p["value"]) for p in points) == [
                    (s, step_metrics(s)[key]) for s in range(1, last + 1)
                ]

    listed = server.get("/api/2.0/mlflow/artifacts/list", run_id=early_id, path="notes")
    assert [f["path"] for f in listed["files"]] == ["notes/notes.txt"]

    ours = [r for r in caplog.records if r.name == "quadrants.tracking"]
    warnings = [r.getMessage() for r in ours if r.levelno >= logging.WARNING]
    recovered = [r.getMessage() for r in ours if "accepting records again" in r.getMessage()]
    assert len(warnings) == 2 and all(server.uri in w for w in warnings), (
        warnings
    )  # one per tracker
    assert len(recovered) == 2, recovered
    print(
        f"\nlog_metrics while down: max {max(durations) * 1e3:.2f} ms; caught up {catch_up_s:.1f} s after restart"
    )
