"""Optional system metrics (`tracking.system_metrics=true`): CPU, memory,
disk, network, GPU per step.

MLflow's own `SystemMetricsMonitor` logs on its own thread, straight to the store, on its own step
counter: it stops for good at the first failed request, its `finish()` joins a thread that may sit
in HTTP retries, and its steps do not line up with training steps. So quadrants reuses MLflow's
*collectors* (`mlflow.system_metrics.metrics.*`, which read psutil and, when present, NVML/ROCm) and
delivers their readings like every other metric: `SystemSampler` samples them on a daemon thread
every `interval_s` seconds, and `SystemMetricsTracker` adds the mean of the samples taken since the
previous step to that step's `log_metrics` call. The readings then share the step axis of the
training curves, go through the tracker's spool (nothing is lost while the server is down) and are
logged exactly once per step on resume. Keys are MLflow's names under `system/`, e.g.
`system/cpu_utilization_percentage`, plus `system/process_rss_megabytes` (this process's resident
memory).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from quadrants.tracking.base import DelegatingTracker, Tracker

log = logging.getLogger("quadrants.tracking")

PREFIX = "system/"


def _collectors() -> list[Any]:
    """MLflow's CPU, disk and network collectors, plus the GPU one(s) that can
    start on this machine."""
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
    from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
    from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor

    collectors: list[Any] = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
    for module, name in (("gpu_monitor", "GPUMonitor"), ("rocm_monitor", "ROCMMonitor")):
        try:
            mod = __import__(f"mlflow.system_metrics.metrics.{module}", fromlist=[name])
            collectors.append(getattr(mod, name)())
            break
        except Exception:  # noqa: BLE001 - no GPU library or no device: CPU metrics only
            continue
    return collectors


class SystemSampler:
    """Samples system metrics every `interval_s` seconds on a daemon thread.

    `snapshot()` returns the mean of the samples taken since the previous snapshot (network
    counters: megabytes since the sampler started), keyed `system/<name>`; it takes one sample
    itself if the thread has taken none yet, so a step shorter than the interval still gets a
    reading.
    """

    def __init__(self, interval_s: float = 5.0) -> None:
        if interval_s <= 0:
            raise ValueError(
                f"tracking.system_metrics_interval_s={interval_s} is out of "
                "range; allowed: (0, inf)"
            )
        import psutil

        self._psutil = psutil
        self._process = psutil.Process()
        self._collectors = _collectors()
        self._rss: list[float] = []
        self._samples = 0
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="quadrants-system-metrics", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._interval_s + 1)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()

    def sample(self) -> None:
        """Take one reading of every collector (never raises: a failing collector is skipped)."""
        with self._lock:
            for collector in self._collectors:
                try:
                    collector.collect_metrics()
                except Exception as error:  # noqa: BLE001 - a reading is not worth a crash
                    log.debug("system metrics: %s failed: %s", type(collector).__name__, error)
            try:
                self._rss.append(self._process.memory_info().rss / 1e6)
            except Exception:  # noqa: BLE001
                pass
            self._samples += 1

    def snapshot(self) -> dict[str, float]:
        """Means since the previous snapshot, as `system/<name>` metrics (empty if
        nothing could be read)."""
        if self._samples == 0:
            self.sample()
        with self._lock:
            metrics: dict[str, float] = {}
            for collector in self._collectors:
                try:
                    metrics.update(collector.aggregate_metrics())
                except Exception:  # noqa: BLE001 - e.g. a collector that read nothing
                    pass
                collector.clear_metrics()
            if self._rss:
                metrics["process_rss_megabytes"] = sum(self._rss) / len(self._rss)
            self._rss.clear()
            self._samples = 0
        return {PREFIX + key: float(value) for key, value in metrics.items()}


class SystemMetricsTracker(DelegatingTracker):
    """A `Tracker` that adds `sampler.snapshot()` to every `log_metrics` call of
    the tracker it wraps."""

    def __init__(self, tracker: Tracker, sampler: SystemSampler) -> None:
        super().__init__(tracker)
        self._sampler = sampler

    def start(self, run_id: str | None = None) -> str | None:
        self._sampler.start()
        return self._tracker.start(run_id)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        try:
            system = self._sampler.snapshot()
        except Exception as error:  # noqa: BLE001 - system metrics never stop training
            log.warning("system metrics unavailable at step %d: %s", step, error)
            system = {}
        self._tracker.log_metrics({**metrics, **system}, step)

    def finish(self, status: str = "FINISHED") -> None:
        self._sampler.stop()
        self._tracker.finish(status)
