"""The preflight question to a tracking target (quadrants/tracking/reachability.py): a real MLflow
call for every scheme, and a local store's directory must take a file."""

from __future__ import annotations

import os

import pytest

from quadrants.tracking.reachability import directory_problem, local_store_path, store_problem


def test_local_store_paths_of_each_scheme(tmp_path):
    assert local_store_path("sqlite:////abs/x.db").as_posix() == "/abs/x.db"
    assert local_store_path("sqlite:///rel/x.db").as_posix() == "rel/x.db"
    assert local_store_path(tmp_path.as_uri()) == tmp_path
    assert local_store_path("/some/dir").as_posix() == "/some/dir"
    assert local_store_path("http://127.0.0.1:5000") is None
    assert local_store_path("postgresql://u@h/db") is None


def test_a_store_not_created_yet_needs_its_nearest_directory_writable(tmp_path):
    # tmp_path/new/deeper does not exist: tmp_path is asked, and takes a file
    assert store_problem(f"sqlite:///{tmp_path / 'new' / 'deeper' / 'mlflow.db'}") is None
    assert list(tmp_path.iterdir()) == []  # the probe file is gone, nothing created


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_directory_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        kind, reason = store_problem(f"sqlite:///{locked / 'mlflow.db'}")
    finally:
        locked.chmod(0o700)
    assert kind == "unwritable" and str(locked) in reason


def test_a_directory_that_is_a_file_or_a_read_only_mount_is_refused(tmp_path):
    blocker = tmp_path / "f"
    blocker.write_text("")
    assert directory_problem(blocker / "mlflow.db") == f"{blocker} is not a directory"
    # /proc takes no new file, even for root
    kind, reason = store_problem("sqlite:////proc/mlflow.db")
    assert kind == "unwritable" and reason.startswith("/proc is not writable")
    assert store_problem(f"sqlite:///{tmp_path}")[0] == "unwritable"  # a directory, not a file


@pytest.mark.slow
def test_an_existing_file_is_asked_through_mlflow(tmp_path):
    junk = tmp_path / "notes.db"
    junk.write_text("not a database")
    kind, _ = store_problem(f"sqlite:///{junk}")
    assert kind == "store"
    from mlflow.tracking import MlflowClient

    real = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(real).search_experiments(max_results=1)  # creates the store
    assert store_problem(real) is None


def test_nothing_listening_is_unreachable():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kind, reason = store_problem(f"http://127.0.0.1:{port}")
    assert kind == "unreachable" and "ConnectionRefusedError" in reason
