"""The delivery thread behind `MlflowTracker`: spool records -> MLflow, in batches, at most once per
(metric key, step) and in spool order.

Only this thread talks to MLflow. It opens the run (create, find, or re-open), then loops: read
records from the spool cursor, send them, commit the cursor. Any failure leaves the cursor where it
was and the thread backs off (0.5 s doubling to `max_backoff_s`), so records wait on disk, never in
memory, however long the store is away.

Exactly once per (key, step) rests on three things:
- a sentinel metric `tracking/step_logged` (value 1.0) goes into the same `log_batch` call as the
  first metrics delivered for a step, so MLflow itself records which steps it holds;
- when a run is re-opened, the thread reads the sentinel's history once; a record whose step is in
  it is checked key by key against `get_metric_history` (fetched once per key, only for such steps),
  and metrics MLflow already holds are dropped;
- a re-sent record is byte-for-byte the spooled one (same value, step and millisecond timestamp),
  and SQL-backed stores key metrics on (key, timestamp, step, value), so re-sending a batch whose
  first attempt did land (lost reply, timeout, kill before the cursor commit) adds nothing.
"""

from __future__ import annotations

import logging
import random
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from quadrants.tracking import keys
from quadrants.tracking.disk_full import is_disk_full
from quadrants.tracking.links import EXPERIMENT_KIND_TAG, TRAINING_KIND
from quadrants.tracking.spool import Position, Spool, SpoolRecord

log = logging.getLogger("quadrants.tracking")

SENTINEL_KEY = keys.SENTINEL
SPOOL_ID_TAG = "quadrants.spool_id"
SPOOL_DIR_TAG = "quadrants.spool_dir"
MAX_METRICS_PER_CALL = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
MAX_PARAMS_PER_CALL = 100  # MAX_PARAMS_TAGS_PER_BATCH
# half of MAX_BATCH_LOG_REQUEST_SIZE (1 MB), counting a metric as its key plus ~60 bytes of JSON
MAX_CALL_BYTES = 500_000
_READ_RECORDS = 512
_FIRST_BACKOFF_S = 0.5


class _ReportedByDelivery(logging.Filter):
    """MLflow's SQL store logs each failed statement with its traceback at ERROR, then raises it; in
    the delivery thread that is a retry's error, reported once by `Delivery._failed` (a full disk
    would otherwise print the same traceback at every retry)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            threading.current_thread().name == _THREAD_NAME
            and record.levelno >= logging.ERROR
            and record.getMessage().startswith("SQLAlchemy database error")
        )


_THREAD_NAME = "quadrants-mlflow-delivery"
logging.getLogger("mlflow.store.db.utils").addFilter(_ReportedByDelivery())


@dataclass(frozen=True)
class RunRequest:
    """Which run to deliver to: `run_id` to re-open one; otherwise the one this spool
    created, or a new one."""

    tracking_uri: str
    experiment: str
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    parent_run_id: str | None = None
    artifact_location: str | None = None
    run_id: str | None = None


def run_request_record(request: RunRequest) -> dict[str, Any]:
    """What a spool keeps of the request that opens its run (state.json `request`): the run's name,
    tags, parent and artifact location, without the store or a run id."""
    return {
        "run_name": request.run_name,
        "tags": dict(request.tags),
        "parent_run_id": request.parent_run_id,
        "artifact_location": request.artifact_location,
    }


@dataclass
class _Unit:
    """The metrics one spool record still has to deliver (all of a step that one call can carry)."""

    step: int
    metrics: list[Metric]
    keys: frozenset[str]


class Delivery:
    """Owns the delivery thread; the tracker only starts it, wakes it, waits on it and stops it."""

    def __init__(
        self,
        spool: Spool,
        request: RunRequest,
        *,
        session: str,
        flush_every_s: float,
        max_backoff_s: float,
    ) -> None:
        self.spool = spool
        self.request = request
        # a finish() record of another session was written by an earlier process
        self.session = session
        self.run_id: str | None = request.run_id
        self.first_attempt = threading.Event()
        self.last_error: str | None = None
        self._flush_every_s = flush_every_s
        self._max_backoff_s = max_backoff_s
        self._client: MlflowClient | None = None
        self._opened = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._main, name=_THREAD_NAME, daemon=True)
        # what MLflow holds: steps with a sentinel at open time, per-key step sets
        # fetched on demand, and (step -> keys) delivered since; key sets are interned,
        # so a step costs one dict entry
        self._remote_steps: set[int] = set()
        self._history: dict[str, set[int]] = {}
        self._delivered: dict[int, frozenset[str]] = {}
        self._interned: dict[frozenset[str], frozenset[str]] = {}
        self._backoff_s = 0.0
        self._failing_since: float | None = None
        self._late_steps: set[int] = set()
        self.dropped = 0
        # attempts that failed, and whether the last one failed on a full disk under the store
        self.failures = 0
        self.store_disk_full = False

    # ---- control (tracker side) -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wait_delivered(self, target: Position, timeout_s: float | None) -> bool:
        """Wake the thread and wait until the cursor reaches `target`; False on timeout, or as soon
        as an attempt made after the call fails on a full disk under the store (SQLite's
        "database or disk is full", ENOSPC): space does not come back while a process ends, so
        waiting out `timeout_s` only delays the message that says so."""
        failures = self.failures
        self._wake.set()
        with self._progress:
            return (
                self._progress.wait_for(
                    lambda: (
                        self.spool.cursor >= target
                        or (self.store_disk_full and self.failures > failures)
                    ),
                    timeout_s,
                )
                and self.spool.cursor >= target
            )

    def stop(self, join_s: float) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(join_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # ---- the thread
    # ---------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        finally:
            self.spool.close()  # releases the directory lock for the next process

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._opened:
                    self._open_run()
                    self.first_attempt.set()
                self._deliver_pending()
                self._backoff_s = 0.0
                if not self.spool.pending():
                    self._recovered()
                    self._sleep(self._flush_every_s)
            except Exception as error:  # noqa: BLE001 - any failure: keep the records, back off, retry
                self.first_attempt.set()
                self._failed(error)
                self._backoff_s = min(
                    max(2 * self._backoff_s, _FIRST_BACKOFF_S), self._max_backoff_s
                )
                self._sleep(self._backoff_s * random.uniform(0.8, 1.2))

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _open_run(self) -> None:
        client = MlflowClient(self.request.tracking_uri)
        run_id = self.request.run_id or self.spool.state.get("run_id")
        resumed = run_id is not None
        if run_id is None:
            experiment_id = experiment_id_for(
                client, self.request.experiment, self.request.artifact_location
            )
            spool_id = self.spool.state["spool_id"]
            # an earlier attempt may have created the run and lost the reply
            # (or died before saving it)
            found = client.search_runs(
                [experiment_id], f"tags.`{SPOOL_ID_TAG}` = '{spool_id}'", max_results=1
            )
            if found:
                run_id, resumed = found[0].info.run_id, True
            else:
                tags = {
                    **self.request.tags,
                    SPOOL_ID_TAG: spool_id,
                    SPOOL_DIR_TAG: f"{socket.gethostname()}:{self.spool.directory}",
                }
                if self.request.parent_run_id:
                    tags["mlflow.parentRunId"] = self.request.parent_run_id
                run_id = client.create_run(
                    experiment_id, run_name=self.request.run_name, tags=tags
                ).info.run_id
        if self.spool.state.get("run_id") != run_id:
            self.spool.update_state(run_id=run_id)
        self.run_id = run_id
        if resumed:
            run = client.get_run(run_id)
            if run.info.lifecycle_stage != "active":  # keep the records until someone restores it
                raise MlflowException(f"run {run_id} is deleted: restore it to receive the records")
            if run.info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")
            self._remote_steps = {m.step for m in client.get_metric_history(run_id, SENTINEL_KEY)}
            log.info(
                "re-opened MLflow run %s; it already holds %d steps",
                run_id,
                len(self._remote_steps),
            )
        self._client = client
        self._opened = True

    def _deliver_pending(self) -> None:
        while not self._stop.is_set():
            records, reached = self.spool.read(self.spool.cursor, _READ_RECORDS)
            if not records:
                if reached > self.spool.cursor:  # only an empty segment left by a crash
                    self._commit(reached)
                return
            for kind, group in _runs_of_kind(records):
                if kind == "metrics":
                    self._deliver_metrics(group)
                else:
                    for record in group:
                        self._deliver_other(kind, record)
                        self._commit(record.end)
                if self._stop.is_set():
                    return

    # ---- metrics
    # ------------------------------------------------------------------------------------

    def _deliver_metrics(self, records: list[SpoolRecord]) -> None:
        """Pack consecutive metric records into calls of <= 1000 metrics; a step never spans two
        calls unless it alone has more than 999 metrics."""
        call: list[_Unit] = []
        size = nbytes = 0
        in_call: dict[int, set[str]] = {}  # keys already put into `call`, per step
        done: Position | None = None  # end of the last record whose metrics are all in `call`
        for record in records:
            for unit in self._units(record, in_call):
                unit_bytes = sum(len(m.key) + 60 for m in unit.metrics)
                if call and (
                    size + len(unit.metrics) > MAX_METRICS_PER_CALL
                    or nbytes + unit_bytes > MAX_CALL_BYTES
                ):
                    self._send(call)
                    if done is not None:
                        self._commit(done)
                    call, size, nbytes, in_call = [], 0, 0, {unit.step: set(unit.keys)}
                call.append(unit)
                size += len(unit.metrics)
                nbytes += unit_bytes
            done = record.end
        if call:
            self._send(call)
        self._commit(records[-1].end)

    def _units(self, record: SpoolRecord, in_call: dict[int, set[str]]) -> Iterator[_Unit]:
        step, timestamp = int(record.payload["step"]), int(record.payload["ts"])
        taken = in_call.setdefault(step, set())
        fresh = {
            k: v
            for k, v in record.payload["metrics"].items()
            if k not in taken and not self._holds(k, step)
        }
        if not fresh:
            return
        first_of_step = not taken and step not in self._delivered and step not in self._remote_steps
        taken.update(fresh)
        metrics = [Metric(k, float(v), timestamp, step) for k, v in fresh.items()]
        room = MAX_METRICS_PER_CALL - 1
        if len(metrics) > room:
            log.warning(
                "step %d has %d metrics: more than one MLflow call (%d) can carry, so it is sent "
                "in parts and is not all-or-nothing",
                step,
                len(metrics),
                room,
            )
        chunks = [metrics[i : i + room] for i in range(0, len(metrics), room)]
        for number, chunk in enumerate(chunks):
            if first_of_step and number == len(chunks) - 1:
                chunk = chunk + [Metric(SENTINEL_KEY, 1.0, timestamp, step)]
            yield _Unit(step, chunk, frozenset(m.key for m in chunk))

    def _holds(self, key: str, step: int) -> bool:
        """Whether MLflow already holds (key, step): delivered by this thread,
        or found at re-open."""
        if key in self._delivered.get(step, ()):
            return True
        if step not in self._remote_steps:
            return False
        if key not in self._history:
            assert self._client is not None and self.run_id is not None
            self._history[key] = {m.step for m in self._client.get_metric_history(self.run_id, key)}
        return step in self._history[key]

    def _send(self, call: list[_Unit]) -> None:
        assert self._client is not None and self.run_id is not None
        try:
            self._client.log_batch(self.run_id, metrics=[m for unit in call for m in unit.metrics])
        except Exception as error:
            if not is_permanent(error):
                raise
            if len(call) > 1:  # find the record MLflow refuses; deliver the others
                for unit in call:
                    self._send([unit])
            else:
                self._drop(f"metrics of step {call[0].step}", error)
            return
        for unit in call:
            keys = self._delivered.get(unit.step, frozenset()) | unit.keys
            self._delivered[unit.step] = self._interned.setdefault(keys, keys)
            if self._failing_since is not None:
                self._late_steps.add(unit.step)

    # ---- params, artifacts, run status
    # ----------------------------------------------------------------

    def _deliver_other(self, kind: str, record: SpoolRecord) -> None:
        assert self._client is not None and self.run_id is not None
        payload = record.payload
        try:
            if kind == "params":
                self._deliver_params(payload["params"])
            elif kind == "artifact":
                self._deliver_artifact(payload)
            elif kind == "status" and payload.get("session") == self.session:
                self._client.set_terminated(self.run_id, payload["status"], payload["end_time"])
            # a status record of another session is an earlier process's finish(): this process
            # has re-opened the run since, so it is not ended
        except Exception as error:
            if not is_permanent(error):
                raise
            self._drop(f"a {kind} record", error)
            if payload.get("copied"):
                shutil.rmtree(Path(payload["path"]).parent, ignore_errors=True)

    def _deliver_params(self, params: dict[str, str]) -> None:
        assert self._client is not None and self.run_id is not None
        held = self._client.get_run(self.run_id).data.params
        changed = sorted(k for k, v in params.items() if k in held and held[k] != v)
        if changed:  # MLflow refuses to change a param; keep its value and say so
            log.warning(
                "run %s already has params %s with other values; kept MLflow's",
                self.run_id,
                changed,
            )
        fresh = [Param(k, v) for k, v in params.items() if k not in held]
        for i in range(0, len(fresh), MAX_PARAMS_PER_CALL):
            self._client.log_batch(self.run_id, params=fresh[i : i + MAX_PARAMS_PER_CALL])

    def _deliver_artifact(self, payload: dict[str, Any]) -> None:
        assert self._client is not None and self.run_id is not None
        path = Path(payload["path"])
        if not path.exists():
            self._drop(f"artifact {path}", FileNotFoundError("the file is gone"))
            return
        if path.is_dir():
            self._client.log_artifacts(self.run_id, str(path), payload.get("artifact_path"))
        else:
            self._client.log_artifact(self.run_id, str(path), payload.get("artifact_path"))
        if payload.get("copied"):
            shutil.rmtree(path.parent, ignore_errors=True)

    # ---- bookkeeping
    # --------------------------------------------------------------------------------

    def _commit(self, position: Position) -> None:
        self.spool.commit(position)
        with self._progress:
            self._progress.notify_all()

    def _drop(self, what: str, error: BaseException) -> None:
        self.dropped += 1
        level = logging.ERROR if self.dropped <= 5 else logging.DEBUG
        log.log(
            level,
            "MLflow refused %s for run %s, dropping it: %s%s",
            what,
            self.run_id,
            _short(error),
            " (further refusals are logged at DEBUG)" if self.dropped == 5 else "",
        )

    def _failed(self, error: BaseException) -> None:
        self.last_error = _short(error)
        with self._progress:
            self.failures += 1
            self.store_disk_full = is_store_full(error)
            self._progress.notify_all()
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            self._late_steps = set()
            log.warning(
                "MLflow at %s is not accepting records (%s). Training goes on: records are kept "
                "in %s and will be delivered when it is back. Check that the tracking server is "
                "up and the URI is right.",
                self.request.tracking_uri,
                self.last_error,
                self.spool.directory,
            )
        else:
            log.debug("MLflow delivery still failing: %s", self.last_error)

    def _recovered(self) -> None:
        if self._failing_since is None:
            return
        log.info(
            "MLflow at %s is accepting records again after %.0f s; %d steps were delivered late",
            self.request.tracking_uri,
            time.monotonic() - self._failing_since,
            len(self._late_steps),
        )
        self._failing_since = None
        self._late_steps = set()


def experiment_id_for(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    """The id of experiment `name`, created if missing (a concurrent creator wins harmlessly),
    tagged as a training experiment (`quadrants.tracking.links`) if it is not tagged with a kind
    yet."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(
                name, artifact_location=artifact_location, tags={EXPERIMENT_KIND_TAG: TRAINING_KIND}
            )
        except MlflowException:
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage != "active":
        raise MlflowException(f"experiment {name!r} is deleted: restore it or choose another name")
    if EXPERIMENT_KIND_TAG not in experiment.tags:  # made by another tool or an older quadrants
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
    return experiment.experiment_id


def is_permanent(error: BaseException) -> bool:
    """A refusal that retrying cannot fix (bad request, missing run); transport
    errors and 5xx are not."""
    if not isinstance(error, MlflowException):
        return False
    status = error.get_http_status_code()
    return 400 <= status < 500 and status not in (401, 403, 408, 429)


def _runs_of_kind(records: list[SpoolRecord]) -> Iterator[tuple[str, list[SpoolRecord]]]:
    group: list[SpoolRecord] = []
    for record in records:
        if group and record.payload.get("kind") != group[-1].payload.get("kind"):
            yield group[-1].payload.get("kind", "corrupt"), group
            group = []
        group.append(record)
    if group:
        yield group[-1].payload.get("kind", "corrupt"), group


def is_store_full(error: BaseException) -> bool:
    """Whether a store's failure is a full disk: ENOSPC/EDQUOT anywhere in its chain
    (`disk_full.is_disk_full`), or the words of one that reached us as text: SQLite's SQLITE_FULL
    ("database or disk is full", which SQLAlchemy and MLflow pass on as their own exceptions) or a
    tracking server's "No space left on device"."""
    text = str(error)
    return (
        is_disk_full(error)
        or "database or disk is full" in text
        or ("No space left on device" in text)
    )


def _short(error: BaseException) -> str:
    lines = str(error).splitlines()
    # SQLAlchemy puts a note about autoflush before the database's own words
    text = next((line for line in lines if "(sqlite3." in line), lines[0] if lines else "")
    return f"{type(error).__name__}: {text[:300]}"
