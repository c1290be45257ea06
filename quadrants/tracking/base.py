"""The Tracker protocol the training loop logs through, and two in-process implementations.

MLflow lives in its own module; the loop only sees this protocol, so unit tests and scripts can run
with `NullTracker` (drops everything) or `RecordingTracker` (keeps everything in memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol


class Tracker(Protocol):
    @property
    def run_id(self) -> str | None:
        """The run's id once it exists (None before `start`, or while the store is unreachable)."""
        ...

    def start(self, run_id: str | None = None) -> str | None:
        """Open (or re-open, when `run_id` is given) a run; return its id."""
        ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Buffer metrics of one step; implementations send them in batches. Raises
        `quadrants.tracking.disk_full.DiskFullError` when the step could not be recorded."""
        ...

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...

    def flush(self, timeout_s: float | None = 60.0) -> bool:
        """Wait until everything logged so far is delivered
        (or the timeout passes); True if it was."""
        ...

    def finish(self, status: str = "FINISHED") -> None: ...


class DelegatingTracker:
    """A `Tracker` that passes every call to the tracker it wraps; wrappers (the mirrored sinks,
    the system metrics) override only the calls they add to."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker

    @property
    def run_id(self) -> str | None:
        return self._tracker.run_id

    @property
    def undelivered(self) -> bool:
        """Whether the wrapped tracker ended with records not delivered (MlflowTracker.finish)."""
        return bool(getattr(self._tracker, "undelivered", False))

    def add_tags(self, tags: Mapping[str, str]) -> None:
        add = getattr(self._tracker, "add_tags", None)
        if add is not None:
            add(tags)

    def start(self, run_id: str | None = None) -> str | None:
        return self._tracker.start(run_id)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._tracker.log_params(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._tracker.log_metrics(metrics, step)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._tracker.log_artifact(path, artifact_path)

    def flush(self, timeout_s: float | None = 60.0) -> bool:
        return self._tracker.flush(timeout_s)

    def finish(self, status: str = "FINISHED") -> None:
        self._tracker.finish(status)


class NullTracker:
    """Drops everything."""

    run_id: str | None = None

    def start(self, run_id: str | None = None) -> str | None:
        return run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        return None

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        return None

    def flush(self, timeout_s: float | None = 60.0) -> bool:
        return True

    def finish(self, status: str = "FINISHED") -> None:
        return None


class RecordingTracker(NullTracker):
    """Keeps params, per-step metrics and artifact paths in memory (tests, notebooks)."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.history: list[tuple[int, dict[str, float]]] = []
        self.artifacts: list[Path] = []
        self.status: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.history.append((step, dict(metrics)))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self.artifacts.append(Path(path))

    def finish(self, status: str = "FINISHED") -> None:
        self.status = status

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) pairs of one metric, in logging order."""
        return [(step, m[key]) for step, m in self.history if key in m]
