"""A SQLite store's artifacts live next to it (tracking/setup.py `store_artifact_location`): a run
tracked from a scratch working directory to a store elsewhere leaves nothing in that directory
(MLflow's own default would be `./mlruns` of the working directory)."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from quadrants.tracking.mlflow_tracker import MlflowTracker
from quadrants.tracking.setup import store_artifact_location


def test_the_location_is_the_stores_folder_for_sqlite_and_the_servers_choice_otherwise(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert store_artifact_location(f"sqlite:///{tmp_path}/a/mlflow.db") == (
        (tmp_path / "a" / "mlartifacts").as_uri()
    )
    # sqlite:///rel/path is relative to the working directory, as SQLAlchemy reads it
    assert store_artifact_location("sqlite:///rel/mlflow.db") == (
        (tmp_path / "rel" / "mlartifacts").as_uri()
    )
    assert store_artifact_location("http://127.0.0.1:5000") is None


def test_a_run_tracked_from_a_scratch_directory_writes_nothing_there(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    store = tmp_path / "elsewhere" / "mlflow.db"
    store.parent.mkdir()
    uri = f"sqlite:///{store}"
    notes = tmp_path / "notes.txt"
    notes.write_text("an artifact\n")
    tracker = MlflowTracker(
        uri,
        "quadrants",
        run_name="r",
        spool_dir=tmp_path / "run" / "tracking",
        artifact_location=store_artifact_location(uri),
    )
    tracker.start()
    tracker.log_metrics({"train/reward": 0.5}, step=1)
    tracker.log_artifact(notes, "notes")
    tracker.finish("FINISHED")
    assert not tracker.undelivered
    assert sorted(p.name for p in scratch.rglob("*")) == []  # no ./mlruns, nothing at all
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    assert run.info.artifact_uri.startswith((store.parent / "mlartifacts").as_uri())
    assert Path(store.parent / "mlartifacts").is_dir()
