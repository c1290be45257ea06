"""`tracking.sinks` (quadrants/tracking/sinks.py): TensorBoard event files and an offline W&B run fed
the records MLflow gets, read back with their own readers (tests/event_files.py)."""

from __future__ import annotations

import importlib.util
import time

import pytest

from quadrants.tracking.base import RecordingTracker
from quadrants.tracking.sinks import MirroredTracker, TensorBoardSink, WandbSink, check_sinks
from tests.event_files import tensorboard_scalars, tensorboard_text, wandb_offline_run

pytestmark = pytest.mark.slow

STEPS = {1: {"train/reward": 0.25, "eval/arithmetic/avg_at_2": 0.5}, 2: {"train/reward": 0.75}}


def log_run(tracker) -> None:
    tracker.start()
    tracker.log_params({"objective": "dapo", "train": {"lr": 1e-4}})
    for step, metrics in STEPS.items():
        tracker.log_metrics(metrics, step)
    tracker.finish("FINISHED")


def test_tensorboard_gets_every_metric_and_the_params_mlflow_gets(tmp_path):
    mlflow = RecordingTracker()
    log_run(MirroredTracker(mlflow, {"tensorboard": TensorBoardSink(tmp_path / "tb")}))
    assert mlflow.history == list(STEPS.items()) and mlflow.status == "FINISHED"
    assert tensorboard_scalars(tmp_path / "tb") == {
        "train/reward": [(1, 0.25), (2, 0.75)],
        "eval/arithmetic/avg_at_2": [(1, 0.5)],
    }
    params = tensorboard_text(tmp_path / "tb", "params")
    assert "| objective | dapo |" in params and "| train.lr | 0.0001 |" in params


def test_a_resumed_run_shows_each_step_once(tmp_path):
    """The second process resumes after step 1's checkpoint and re-logs step 2 (another value): the
    first process's step 2 is purged (SummaryWriter purge_step), step 1 kept."""
    first = TensorBoardSink(tmp_path / "tb")
    for step in (1, 2):
        first.log_metrics({"train/reward": step / 4}, step)  # exact in float32
    first.close("KILLED")
    second = TensorBoardSink(tmp_path / "tb")
    for step in (2, 3):
        second.log_metrics({"train/reward": step}, step)
    second.close("FINISHED")
    assert tensorboard_scalars(tmp_path / "tb") == {"train/reward": [(1, 0.25), (2, 2.0), (3, 3.0)]}


def test_a_failing_sink_is_switched_off_and_mlflow_goes_on(tmp_path, caplog):
    class Broken:
        calls = 0

        def log_params(self, params):
            pass

        def log_metrics(self, metrics, step):
            Broken.calls += 1
            raise OSError("disk gone")

        def close(self, status):
            raise AssertionError("a switched-off sink is not closed")

    mlflow = RecordingTracker()
    log_run(MirroredTracker(mlflow, {"broken": Broken()}))
    assert mlflow.history == list(STEPS.items()) and mlflow.status == "FINISHED"
    assert Broken.calls == 1  # off after its first failure
    assert "tracking sink broken failed (OSError: disk gone) while logging step 1" in caplog.text


@pytest.mark.subprocess  # wandb starts its service process
@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
def test_an_offline_wandb_run_gets_the_same_records(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = WandbSink(tmp_path, project="quadrants", name="quadrant=PHR,seed=0", group="X")
    log_run(MirroredTracker(RecordingTracker(), {"wandb": sink}))
    # wandb's service writes the file after `finish()` returns: read it once the exit is in it
    deadline = time.monotonic() + 60
    while not (run := wandb_offline_run(tmp_path))["exited"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert run["id"] == (tmp_path / "wandb_run_id").read_text().strip()
    assert (run["project"], run["group"], run["name"]) == ("quadrants", "X", "quadrant=PHR,seed=0")
    assert run["config"] == {"objective": "dapo", "train.lr": "0.0001"}
    assert [
        {k: v for k, v in row.items() if not k.startswith("_") or k == "_step"}
        for row in run["history"]
    ] == [{"_step": step, **metrics} for step, metrics in STEPS.items()]


def test_unknown_or_missing_sinks_are_refused_naming_the_fix(monkeypatch):
    check_sinks(["mlflow", "tensorboard"])
    with pytest.raises(ValueError, match=r"'tensorbord' is unknown; choose from \['mlflow', "):
        check_sinks(["tensorbord"])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"needs the wandb package.*pip install -e '.\[wandb\]'"):
        check_sinks(["wandb"])
