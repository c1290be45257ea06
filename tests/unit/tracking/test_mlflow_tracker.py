"""MlflowTracker against a real sqlite MLflow store, in one process."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import ClassVar

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from quadrants.tracking import delivery
from quadrants.tracking.mlflow_tracker import (
    SENTINEL_KEY,
    MlflowTracker,
    end_parent_run,
    start_parent_run,
)

from .helpers import KEYS, duplicates, history, step_metrics


def tracker(uri: str, spool: Path, **kwargs) -> MlflowTracker:
    return MlflowTracker(uri, "unit", spool_dir=spool, **{"flush_every_s": 0.2, **kwargs})


@pytest.mark.slow
def test_metrics_params_tags_and_artifacts_arrive(store_uri: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("lr: 0.001\n")
    t = tracker(
        store_uri,
        tmp_path / "spool",
        run_name="grpo-s0",
        tags={"quadrant": "PHR"},
        artifact_location=str(tmp_path / "artifacts"),
    )
    run_id = t.start()
    assert run_id is not None and t.run_id == run_id
    t.log_params(
        {
            "lr": 0.001,
            "objective": {"name": "grpo", "params": {"clip_high": 0.28}},
            "a/b": "x" * 7000,
        }
    )
    for step in range(4):
        t.log_metrics(step_metrics(step), step=step)
    t.log_artifact(config, "config")
    config.unlink()  # small files are copied into the spool when logged, so this is safe
    t.finish()

    client = MlflowClient(store_uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["mlflow.runName"] == "grpo-s0" and run.data.tags["quadrant"] == "PHR"
    params = run.data.params
    assert (params["lr"], params["objective.name"], params["objective.params.clip_high"]) == (
        "0.001",
        "grpo",
        "0.28",
    )
    assert params["a/b"] == "x" * 6000  # MLflow's limit; longer values are cut
    hist = history(client, run_id)
    # step s logs m_i = s + i/10: m1 at steps 0..3 is 0.1, 1.1, 2.1, 3.1
    assert hist["train/m1"] == [(0, 0.1), (1, 1.1), (2, 2.1), (3, 3.1)]
    assert hist[SENTINEL_KEY] == [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]
    assert [a.path for a in client.list_artifacts(run_id, "config")] == ["config/config.yaml"]


@pytest.mark.slow
def test_a_step_logged_twice_keeps_the_first_value_and_adds_new_keys(
    store_uri: str, tmp_path: Path
) -> None:
    t = tracker(store_uri, tmp_path / "spool")
    run_id = t.start()
    t.log_metrics({"train/loss": 1.0}, step=5)
    assert t.flush(30)
    t.log_metrics({"train/loss": 2.0, "eval/acc": 0.5}, step=5)  # loss again (dropped), eval new
    t.log_metrics({"train/loss": 3.0, "eval/acc": 0.7}, step=5)  # both already there: dropped
    t.finish()
    hist = history(MlflowClient(store_uri), run_id)
    assert hist == {"train/loss": [(5, 1.0)], "eval/acc": [(5, 0.5)], SENTINEL_KEY: [(5, 1.0)]}


@pytest.mark.slow
def test_bad_input_is_dropped_with_a_warning_and_never_raises(
    store_uri: str, tmp_path: Path, caplog
) -> None:
    t = tracker(store_uri, tmp_path / "spool")
    run_id = t.start()
    with caplog.at_level(logging.WARNING, logger="quadrants.tracking"):
        for step in range(3):
            t.log_metrics({"ok": 1.0, "bad..//name": 2.0, "text": "n/a", 7: 1.0}, step=step)  # type: ignore[dict-item]
        t.log_artifact(tmp_path / "missing.txt")
    t.finish()
    assert history(MlflowClient(store_uri), run_id)["ok"] == [(0, 1.0), (1, 1.0), (2, 1.0)]
    warnings = [r.getMessage() for r in caplog.records if r.name == "quadrants.tracking"]
    assert len(warnings) == 4, warnings  # once per problem, not once per step


def test_reopening_a_run_does_not_duplicate_steps(store_uri: str, tmp_path: Path) -> None:
    first = tracker(store_uri, tmp_path / "spool")
    run_id = first.start()
    for step in range(1, 31):
        first.log_metrics(step_metrics(step), step=step)
    first.finish("KILLED")
    # the requeued job resumes from a checkpoint at step 20: re-logs 21..40 with other values
    second = tracker(store_uri, tmp_path / "spool")
    assert second.start(run_id) == run_id
    assert MlflowClient(store_uri).get_run(run_id).info.status == "RUNNING"
    for step in range(21, 41):
        second.log_metrics(step_metrics(step, offset=0.5), step=step)
    second.finish()
    hist = history(MlflowClient(store_uri), run_id)
    assert duplicates(hist) == {}
    # the first value of each step wins: 1..30 from the first job, 31..40 (offset 0.5) from the second
    expected = [
        (s, step_metrics(s, offset=0.5 if s > 30 else 0.0)["train/m1"]) for s in range(1, 41)
    ]
    assert hist["train/m1"] == expected
    assert MlflowClient(store_uri).get_run(run_id).info.status == "FINISHED"


def test_reopening_with_a_fresh_spool_asks_mlflow_what_it_has(
    store_uri: str, tmp_path: Path
) -> None:
    first = tracker(store_uri, tmp_path / "spool_node_a")
    run_id = first.start()
    for step in range(1, 11):
        first.log_metrics(step_metrics(step), step=step)
    first.finish("KILLED")
    second = tracker(
        store_uri, tmp_path / "spool_node_b"
    )  # requeued on another node: no local record
    second.start(run_id)
    for step in range(6, 16):
        second.log_metrics(step_metrics(step, offset=0.5), step=step)
    second.finish()
    hist = history(MlflowClient(store_uri), run_id)
    assert duplicates(hist) == {}
    assert hist["train/m0"] == [(s, s + (0.5 if s > 10 else 0.0)) for s in range(1, 16)]


def test_start_without_run_id_resumes_the_run_of_the_spool_dir(
    store_uri: str, tmp_path: Path
) -> None:
    first = tracker(store_uri, tmp_path / "spool")
    run_id = first.start()
    first.log_metrics({"x": 1.0}, step=1)
    first.finish()
    second = tracker(store_uri, tmp_path / "spool")
    assert second.start() == run_id
    second.finish()


def test_params_keep_their_first_value_on_resume(store_uri: str, tmp_path: Path, caplog) -> None:
    first = tracker(store_uri, tmp_path / "spool")
    run_id = first.start()
    first.log_params({"lr": 0.1, "seed": 0})
    first.finish()
    second = tracker(store_uri, tmp_path / "spool")
    second.start(run_id)
    with caplog.at_level(logging.WARNING, logger="quadrants.tracking"):
        second.log_params({"lr": 0.2, "seed": 0, "resumed_from": 40})
        second.finish()
    params = MlflowClient(store_uri).get_run(run_id).data.params
    assert params == {
        "lr": "0.1",
        "seed": "0",
        "resumed_from": "40",
    }  # MLflow never changes a param
    assert [r.getMessage() for r in caplog.records if "['lr']" in r.getMessage()]


def test_a_resend_of_a_delivered_batch_adds_nothing(store_uri: str) -> None:
    # The delivery thread re-sends a batch whose reply was lost exactly as spooled (same timestamp);
    # MLflow's SQL store keys metrics by (key, timestamp, step, value), so the resend is a no-op.
    client = MlflowClient(store_uri)
    run_id = client.create_run(client.create_experiment("resend")).info.run_id
    batch = [
        Metric("train/loss", 0.5, 1_700_000_000_000, 3),
        Metric(SENTINEL_KEY, 1.0, 1_700_000_000_000, 3),
    ]
    client.log_batch(run_id, metrics=batch)
    client.log_batch(run_id, metrics=batch)
    assert history(client, run_id) == {"train/loss": [(3, 0.5)], SENTINEL_KEY: [(3, 1.0)]}


class CallRecorder(MlflowClient):
    """A real client that also remembers the metrics of each log_batch call (a spy, not a mock)."""

    calls: ClassVar[list[list[Metric]]] = []

    def log_batch(self, run_id, metrics=(), params=(), tags=(), synchronous=None):
        if metrics:
            CallRecorder.calls.append(list(metrics))
        return super().log_batch(run_id, metrics=metrics, params=params, tags=tags)


@pytest.mark.slow
def test_calls_respect_mlflow_limits_and_never_split_a_step(
    store_uri: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(delivery, "MlflowClient", CallRecorder)
    CallRecorder.calls = []
    keys = tuple(f"train/k{i}" for i in range(60))
    t = tracker(store_uri, tmp_path / "spool", flush_every_s=30.0)
    run_id = t.start()
    for step in range(1, 51):  # 50 steps x (60 + sentinel): at most 16 steps fit one call
        t.log_metrics(step_metrics(step, keys=keys), step=step)
    t.log_metrics({f"big/k{i}": float(i) for i in range(1500)}, step=51)  # too big for one call
    t.finish()
    calls = CallRecorder.calls
    assert all(len(call) <= 1000 for call in calls)
    steps_per_call = [{m.step for m in call} for call in calls]
    for step in range(1, 51):
        assert sum(step in steps for steps in steps_per_call) == 1  # the whole step in one call
    assert sum(len(call) for call in calls) == 50 * 61 + 1501
    hist = history(MlflowClient(store_uri), run_id)
    assert duplicates(hist) == {} and len(hist) == 60 + 1500 + 1


def test_parent_run_is_reused_and_children_point_to_it(store_uri: str, tmp_path: Path) -> None:
    tags = {"quadrants.sweep_id": "sweep-42", "quadrants.study": "isolation"}
    parent = start_parent_run(store_uri, "sweeps", "quadrant_isolation", tags)
    assert start_parent_run(store_uri, "sweeps", "quadrant_isolation", tags) == parent
    assert (
        start_parent_run(
            store_uri, "sweeps", "quadrant_isolation", {**tags, "quadrants.sweep_id": "other"}
        )
        != parent
    )
    children = []
    for quadrant in ("PHR", "NLR"):
        child = MlflowTracker(
            store_uri,
            "sweeps",
            run_name=quadrant,
            parent_run_id=parent,
            tags={**tags, "quadrant": quadrant},
            spool_dir=tmp_path / quadrant,
        )
        children.append(child.start())
        child.log_metrics({"train/loss": 1.0}, step=1)
        child.finish()
    # a child carries the sweep id too, but is never mistaken for the parent
    assert start_parent_run(store_uri, "sweeps", "quadrant_isolation", tags) == parent
    end_parent_run(store_uri, parent)
    client = MlflowClient(store_uri)
    assert client.get_run(parent).info.status == "FINISHED"
    found = client.search_runs(
        [client.get_experiment_by_name("sweeps").experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent}'",
    )
    assert sorted(r.info.run_id for r in found) == sorted(children)


@pytest.mark.slow
def test_store_unreachable_at_start_then_back(template_db: Path, tmp_path: Path, caplog) -> None:
    # a sqlite path under a regular file cannot be opened: it stands in for a server that is down
    db_dir = tmp_path / "later"
    db_dir.write_text("not a directory")
    uri = f"sqlite:///{db_dir / 'mlflow.db'}"
    t = tracker(uri, tmp_path / "spool", max_backoff_s=0.5)
    with caplog.at_level(logging.INFO, logger="quadrants.tracking"):
        began = time.monotonic()
        assert t.start() is None
        assert time.monotonic() - began < 10
        for step in range(1, 21):
            t.log_metrics({key: float(step) for key in KEYS}, step=step)
        assert not t.flush(timeout_s=1.0)
        db_dir.unlink()
        db_dir.mkdir()
        shutil.copy(template_db, db_dir / "mlflow.db")  # the store comes back
        assert t.flush(timeout_s=30.0)
    assert t.run_id is not None
    t.finish()
    hist = history(MlflowClient(uri), t.run_id)
    assert duplicates(hist) == {} and hist[KEYS[0]] == [(s, float(s)) for s in range(1, 21)]
    ours = [r for r in caplog.records if r.name == "quadrants.tracking"]
    assert len([r for r in ours if r.levelno == logging.WARNING]) == 1
    recovered = [r.getMessage() for r in ours if "accepting records again" in r.getMessage()]
    assert len(recovered) == 1 and "20 steps were delivered late" in recovered[0]


def test_tags_added_before_start_are_on_the_created_run(store_uri: str, tmp_path: Path) -> None:
    """add_tags before start: the run is created with them (a dataset task's decontamination count)."""
    t = tracker(store_uri, tmp_path / "spool", tags={"quadrant": "PHR"})
    t.add_tags({"quadrants.decontaminated": 3})
    run_id = t.start()
    t.finish()
    tags = MlflowClient(store_uri).get_run(run_id).data.tags
    assert tags["quadrant"] == "PHR" and tags["quadrants.decontaminated"] == "3"
