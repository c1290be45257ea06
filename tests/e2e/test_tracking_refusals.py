"""Tracking targets a user gets wrong, refused by `python -m quadrants.sweep` before training and
before anything is written: a web service on the port that is not MLflow (Python's own
`python -m http.server`), and a SQLite store in a directory no file can be written to."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests import commands
from tests.commands import TINY


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def refused(cwd: Path, uri: str):
    done = commands.run(
        "quadrants.sweep", "train.steps=1", f"tracking.uri={uri}", *TINY, cwd=cwd, timeout=300
    )
    assert done.returncode != 0
    assert "nothing was launched" in done.stderr and f"tracking.uri={uri}" in done.stderr
    assert "step 1/1" not in done.stdout + done.stderr  # no training
    assert not (cwd / "outputs").exists()  # no run directory, spool or store
    return done.stderr


@pytest.mark.server
@pytest.mark.subprocess
@pytest.mark.slow
def test_a_plain_http_server_is_not_an_mlflow_server(tmp_path):
    port = free_port()
    site = tmp_path / "site"
    site.mkdir()
    server = commands.start(
        "http.server", str(port), "--bind", "127.0.0.1", cwd=site, stdout=None, stderr=None
    )
    try:
        uri = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:  # until it serves its directory listing
            try:
                urllib.request.urlopen(uri, timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "http.server did not start"
                time.sleep(0.2)
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        said = refused(run_dir, uri)
        assert "something answers there, but not an MLflow tracking server" in said
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.integration
@pytest.mark.slow
def test_an_unwritable_sqlite_path_is_refused(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    said = refused(run_dir, f"sqlite:///{blocker / 'mlflow.db'}")
    assert f"the store cannot be written there ({blocker} is not a directory" in said
