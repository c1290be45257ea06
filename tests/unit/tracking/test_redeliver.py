"""`python -m quadrants.tracking deliver RUN_DIR` (launch/tracking.py, tracking/redeliver.py): a run
whose store never took its records, delivered afterwards into a real SQLite MLflow store, to the
store it was meant for or to another one named with --tracking-uri."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from quadrants.launch.tracking import main
from quadrants.tracking.mlflow_tracker import MlflowTracker
from quadrants.tracking.redeliver import deliver_spool
from quadrants.tracking.setup import check_delivered

pytestmark = pytest.mark.slow


def stranded_run(run_dir: Path, uri: str, *, finish: bool = True) -> None:
    """A run tracked to `uri`, which takes nothing: three steps of metrics, params, a finish."""
    tracker = MlflowTracker(
        uri,
        "quadrants",
        run_name="quadrant=PHR,seed=0",
        tags={"quadrants.sweep_id": "X", "quadrant": "PHR"},
        spool_dir=run_dir / "tracking",
        start_timeout_s=60.0,
        max_backoff_s=0.2,
    )
    assert tracker.start() is None  # the store refuses: no run
    tracker.log_params({"objective": "dapo", "train": {"lr": 1e-4}})
    for step in (1, 2, 3):
        tracker.log_metrics({"train/reward": step / 4, "train/entropy": 1.0 - step / 10}, step)
    with pytest.raises(RuntimeError, match="python -m quadrants.tracking deliver"):
        check_delivered(tracker, uri, run_dir / "tracking")
    if finish:
        tracker.finish("FINISHED", timeout_s=0.5)  # spools the end; nothing arrives
    else:  # a process killed before finish(): only the delivery thread goes
        tracker._delivery.stop(join_s=5.0)


def blocked(tmp_path: Path) -> str:
    """A SQLite URI under a path that is a file: MLflow cannot create the store, nothing arrives."""
    (tmp_path / "blocked").write_text("a file where the store's directory should be")
    return f"sqlite:///{tmp_path / 'blocked' / 'mlflow.db'}"


def only_run(db: Path):
    client = MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("quadrants")
    (run,) = client.search_runs([experiment.experiment_id])
    return client, run


def test_a_stranded_spool_goes_to_another_store_named_on_the_command_line(tmp_path, capsys):
    missing = blocked(tmp_path)
    run_dir = tmp_path / "run"
    stranded_run(run_dir, missing)
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    with pytest.raises(SystemExit) as exit_:
        main(["deliver", str(run_dir), "--tracking-uri", f"sqlite:///{db}"])
    assert exit_.value.code == 0
    said = capsys.readouterr().out
    assert f"delivered {run_dir / 'tracking'} to sqlite:///{db}" in said and "FINISHED" in said
    client, run = only_run(db)
    assert run.info.status == "FINISHED" and run.info.run_name == "quadrant=PHR,seed=0"
    assert run.data.tags["quadrants.sweep_id"] == "X" and run.data.tags["quadrant"] == "PHR"
    assert run.data.params == {"objective": "dapo", "train.lr": "0.0001"}
    history = client.get_metric_history(run.info.run_id, "train/reward")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    # delivered: a second call has nothing to send and creates nothing
    again = deliver_spool(run_dir / "tracking", f"sqlite:///{db}")
    assert again.complete and again.run_id == run.info.run_id
    assert len(client.search_runs([run.info.experiment_id])) == 1
    # and the command says the run's true status, read from the store (not "left RUNNING")
    with pytest.raises(SystemExit) as exit_:
        main(["deliver", str(run_dir), "--tracking-uri", f"sqlite:///{db}"])
    assert exit_.value.code == 0
    said = capsys.readouterr().out
    assert "FINISHED in MLflow" in said and "RUNNING" not in said


def test_the_recorded_store_once_it_answers_and_a_killed_run_stays_running(tmp_path, capsys):
    run_dir = tmp_path / "run"
    stranded_run(run_dir, blocked(tmp_path), finish=False)
    store = tmp_path / "blocked"
    store.unlink()
    store.mkdir()  # the store's directory appears: the recorded URI works now
    with pytest.raises(SystemExit) as exit_:
        main(["deliver", str(run_dir)])
    assert exit_.value.code == 0
    assert "left RUNNING" in capsys.readouterr().out
    client, run = only_run(store / "mlflow.db")
    assert run.info.status == "RUNNING"  # no finish() was spooled
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/entropy")] == [
        1,
        2,
        3,
    ]


def test_an_unusable_store_or_directory_is_refused_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["deliver", str(tmp_path)])
    assert exit_.value.code == 2
    assert "holds no tracking spool (tracking/state.json)" in capsys.readouterr().err
    run_dir = tmp_path / "run"
    stranded_run(run_dir, blocked(tmp_path))
    target = tmp_path / "a_directory"
    target.mkdir()
    with pytest.raises(SystemExit) as exit_:
        main(["deliver", str(run_dir), "--tracking-uri", f"sqlite:///{target}"])
    assert exit_.value.code == 2
    assert "is a directory, not a SQLite file" in capsys.readouterr().err
