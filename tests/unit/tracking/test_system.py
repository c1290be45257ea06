"""System metrics: MLflow's collectors sampled on a thread, logged on the training steps through the spool."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from quadrants.tracking.base import RecordingTracker
from quadrants.tracking.mlflow_tracker import MlflowTracker
from quadrants.tracking.system import SystemMetricsTracker, SystemSampler

from .helpers import duplicates, history


def test_a_snapshot_reads_cpu_memory_and_this_process() -> None:
    sampler = SystemSampler(interval_s=60)  # the thread never fires: snapshot samples by itself
    metrics = sampler.snapshot()
    assert 0.0 <= metrics["system/cpu_utilization_percentage"] <= 100.0
    total_mb = psutil.virtual_memory().total / 1e6
    assert 0.0 < metrics["system/system_memory_usage_megabytes"] <= total_mb
    # this test process holds at least the Python interpreter and torch-free MLflow imports (> 10 MB),
    # and never more than the machine's memory
    assert 10.0 < metrics["system/process_rss_megabytes"] <= total_mb
    assert all(key.startswith("system/") for key in metrics)


def test_snapshots_average_the_samples_since_the_previous_one() -> None:
    sampler = SystemSampler(interval_s=60)
    for _ in range(3):
        sampler.sample()
    rss = sampler._rss[:]  # the three readings the next snapshot averages
    first = sampler.snapshot()
    assert first["system/process_rss_megabytes"] == pytest.approx(sum(rss) / 3, rel=0, abs=1e-9)
    assert sampler._rss == [] and sampler._samples == 0  # cleared: the next step starts afresh


def test_the_sampler_thread_samples_and_stops() -> None:
    sampler = SystemSampler(interval_s=0.05)
    sampler.start()
    deadline = time.monotonic() + 5
    while sampler._samples < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    sampler.stop()
    assert sampler._samples >= 2
    assert sampler._thread is None


def test_a_non_positive_interval_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"tracking.system_metrics_interval_s=0 .*\(0, inf\)"):
        SystemSampler(interval_s=0)


def test_every_step_gets_system_metrics_next_to_its_own() -> None:
    inner = RecordingTracker()
    tracker = SystemMetricsTracker(inner, SystemSampler(interval_s=60))
    tracker.start()
    for step in (1, 2):
        tracker.log_metrics({"train/loss": float(step)}, step=step)
    tracker.finish()
    assert inner.series("train/loss") == [(1, 1.0), (2, 2.0)]
    assert [step for step, _ in inner.series("system/cpu_utilization_percentage")] == [1, 2]


@pytest.mark.slow
def test_system_metrics_arrive_in_a_real_store_once_per_step(
    store_uri: str, tmp_path: Path
) -> None:
    inner = MlflowTracker(store_uri, "unit", spool_dir=tmp_path / "spool", flush_every_s=0.2)
    tracker = SystemMetricsTracker(inner, SystemSampler(interval_s=0.05))
    run_id = tracker.start()
    for step in range(1, 4):
        tracker.log_metrics({"train/loss": 1.0 / step}, step=step)
        time.sleep(0.1)
    tracker.finish()
    hist = history(MlflowClient(store_uri), run_id)
    assert [s for s, _ in hist["system/cpu_utilization_percentage"]] == [1, 2, 3]
    assert [s for s, _ in hist["system/process_rss_megabytes"]] == [1, 2, 3]
    assert duplicates(hist) == {}
