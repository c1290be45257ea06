"""`MlflowTracker`: the `Tracker` the training loop uses in real runs, plus
the parent run of a sweep.

The training thread never talks to MLflow. `log_metrics`, `log_params` and `log_artifact` append a
record to an on-disk spool (`spool_dir`; one JSON line, fdatasync'd before the call returns) and
return; a background thread (`quadrants.tracking.delivery`) sends the records with
`MlflowClient.log_batch` and records its progress in the same directory. Put `spool_dir` inside the
run directory, where a requeued job finds its checkpoint (on a network file system the fsync is a
round trip to the file server; `fsync=False` keeps kill-safety and drops power-loss safety).

Behaviour when things go wrong:
- Store unreachable (connection refused, 5xx, timeouts): training goes on. The thread logs one
  warning, retries with a backoff capped at `max_backoff_s`, and logs one info line when it has
  caught up, with how many steps arrived late. Records wait on disk, not in memory.
- Unreachable at `start()` with no run yet: `start()` returns None after its first attempt and the
  thread keeps trying to create the run; `run_id` is set once it exists, and everything spooled
  meanwhile goes to it. A run created by an attempt whose reply was lost is found again by its
  `quadrants.spool_id` tag rather than created twice.
- Process killed (SIGKILL, node failure, timeout): the spool keeps every accepted record. The next
  tracker on the same `spool_dir` delivers them first; `start()` without a run id re-opens the run
  the spool belongs to, `start(run_id)` re-opens the given one (status back to RUNNING).
- Disk full (the spool's device): a record is written whole or not at all, never glued to the next
  one. `log_metrics`, `log_params` and `log_artifact` raise `DiskFullError` ("no space left on
  device: <path>") for a record they could not write, so the caller knows the step is not recorded;
  `finish` that cannot record the end leaves the run RUNNING (never FINISHED with a gap).
- MLflow refuses a record for good (a 4xx: bad name, deleted run): the record is dropped with an
  error log; everything else goes on.

Guarantee for metrics: for each run and each (metric key, step), MLflow keeps exactly one value, the
first one delivered, which is the first one logged as long as the spool of the process that logged
it survives. A resumed loop may therefore re-log the steps after its last checkpoint: what MLflow
already holds is dropped. Each `log_metrics` call (one step) is delivered in one `log_batch` call,
together with the sentinel `tracking/step_logged`, so it arrives whole or not at all. This rests on:
- the sentinel: at (re-)open the thread reads its history (which steps MLflow holds) and checks
  records at those steps key by key against `get_metric_history`; after that, on its own record of
  what it delivered. So one process writes a run at a time: two live writers are not coordinated;
- a SQL-backed store (sqlite, PostgreSQL, MySQL, directly or behind `mlflow server`): a batch
  re-sent after a lost reply is byte-for-byte the spooled one, and MLflow's SQL store keys metrics
  on (key, timestamp, step, value), so the re-send adds nothing;
- steps of at most 999 metrics: a larger step needs several calls (MLflow takes 1000 metrics per
  call) and is not all-or-nothing; if its process dies between calls and the step is later re-logged
  through another spool, the part already delivered can appear twice.
Params keep their first value (MLflow refuses changes; a changed value is reported and skipped).
Artifacts are uploaded at least once; an upload overwrites the same path.

MLflow retries each HTTP request itself (7 times with exponential backoff: minutes), which would
delay delivery for minutes after the server comes back. The delivery thread retries on its own, so
for http(s) URIs the tracker sets MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 and caps
MLFLOW_HTTP_REQUEST_TIMEOUT at `http_timeout_s`, for the whole process.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import re
import shutil
import time
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quadrants.tracking.delivery import (
    SENTINEL_KEY,
    Delivery,
    RunRequest,
    experiment_id_for,
    is_permanent,
    run_request_record,
)
from quadrants.tracking.disk_full import DiskFullError, is_disk_full
from quadrants.tracking.links import ROLE_TAG
from quadrants.tracking.spool import Spool

log = logging.getLogger("quadrants.tracking")

SWEEP_ID_TAG = "quadrants.sweep_id"
MAX_PARAM_VALUE_CHARS = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
MAX_KEY_CHARS = 250  # MAX_ENTITY_KEY_LENGTH
RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")
_VALID_KEY = re.compile(r"^[/\w.\- :]*$")  # MLflow's rule for metric and param names (non-Windows)

__all__ = ["SENTINEL_KEY", "MlflowTracker", "end_parent_run", "start_parent_run"]


class MlflowTracker:
    """Logs a run to MLflow through a durable spool and a delivery thread
    (see the module docstring).

    Args:
        tracking_uri: e.g. `http://host:5000` or `sqlite:////abs/path/mlflow.db`.
        experiment: experiment name; created if missing.
        run_name: shown in the UI (`mlflow.runName`); used when the run is created.
        tags: set when the run is created.
        parent_run_id: makes the run a child (`mlflow.parentRunId`), e.g. of `start_parent_run`.
        spool_dir: this run's spool; one process at a time (a second one raises `SpoolBusyError`).
        flush_every_s: how often the thread sends what has accumulated.
        artifact_location: artifact root if the experiment has to be created.
        start_timeout_s: how long `start()` waits for its first attempt to open the run.
        http_timeout_s: upper bound on one HTTP request to the server.
        max_backoff_s: longest wait between retries while the store is failing.
        fsync: fsync each record (protects against power loss; a process kill
            loses nothing either way).
        copy_artifacts_up_to: files up to this size are copied into the spool by `log_artifact`,
            so they can change or vanish before delivery; larger ones are read when delivered.
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        *,
        run_name: str | None = None,
        tags: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
        spool_dir: Path,
        flush_every_s: float = 2.0,
        artifact_location: str | None = None,
        start_timeout_s: float = 30.0,
        http_timeout_s: float = 15.0,
        max_backoff_s: float = 5.0,
        fsync: bool = True,
        copy_artifacts_up_to: int = 16 << 20,
    ) -> None:
        self._spool = Spool(Path(spool_dir), fsync=fsync)
        recorded = self._spool.state.get("tracking_uri")
        if recorded not in (None, tracking_uri) and self._spool.state.get("run_id"):
            log.warning(
                "%s holds run %s of %s; delivering it to %s (the same store under another name?)",
                spool_dir,
                self._spool.state["run_id"],
                recorded,
                tracking_uri,
            )
        self._spool.update_state(tracking_uri=tracking_uri, experiment=experiment)
        if tracking_uri.startswith(("http://", "https://")):
            bound_mlflow_http_retries(http_timeout_s)
        self._request = RunRequest(
            tracking_uri,
            experiment,
            run_name,
            {str(k): str(v) for k, v in (tags or {}).items()},
            parent_run_id,
            artifact_location,
        )
        self._session = uuid.uuid4().hex
        self._options = {"flush_every_s": flush_every_s, "max_backoff_s": max_backoff_s}
        self._start_timeout_s = start_timeout_s
        self._copy_limit = copy_artifacts_up_to
        self._delivery: Delivery | None = None
        self._finished = False
        # set by `finish`: records (or the run's end) still in the spool when this process ended
        self.undelivered = False
        self._warned: set[str] = set()
        self._valid_keys: set[str] = set()
        atexit.register(_flush_at_exit, weakref.ref(self))

    # ---- Tracker protocol -----------------------------------------------------------------------

    @property
    def run_id(self) -> str | None:
        """The MLflow run id once known (None before `start`, or while the run
        cannot be created)."""
        return self._delivery.run_id if self._delivery is not None else None

    @property
    def spool_dir(self) -> Path:
        return self._spool.directory

    def add_tags(self, tags: Mapping[str, str]) -> None:
        """More tags for the run, set when it is created: call before `start` (a re-opened run keeps
        the tags it was created with; nothing is sent from here)."""
        if self._delivery is None:
            merged = {**self._request.tags, **{str(k): str(v) for k, v in tags.items()}}
            self._request = RunRequest(**{**self._request.__dict__, "tags": merged})

    def start(self, run_id: str | None = None) -> str | None:
        """Open the run: re-open `run_id` (status back to RUNNING), else the run `spool_dir` belongs
        to, else create one. Waits for the first attempt (at most `start_timeout_s`); returns the
        run id, or None if the store could not be reached and no run id is known yet (the thread
        keeps trying; `run_id` tells when it exists). Records already in the spool go to that run
        first. Raises ValueError if `run_id` differs from the run `spool_dir` still has records
        for."""
        if self._delivery is not None:
            return self.run_id
        recorded = self._spool.state.get("run_id")
        if run_id is not None and recorded not in (None, run_id):
            if self._spool.pending():
                raise ValueError(
                    f"{self.spool_dir} still holds undelivered records of run {recorded}; "
                    f"deliver them (start() without a run id) or use another spool_dir"
                )
            self._spool.update_state(run_id=None)
            recorded = None
        request = RunRequest(**{**self._request.__dict__, "run_id": run_id or recorded})
        # what creating the run needs, for `python -m quadrants.tracking deliver` to create it
        # after this process is gone (tracking/redeliver.py)
        self._spool.update_state(request=run_request_record(self._request))
        self._delivery = Delivery(self._spool, request, session=self._session, **self._options)
        self._delivery.start()
        if not self._delivery.first_attempt.wait(self._start_timeout_s):
            log.warning(
                "MLflow at %s did not answer within %.0f s; training goes on and the run will be "
                "opened in the background",
                request.tracking_uri,
                self._start_timeout_s,
            )
        return self.run_id

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Spool one step's metrics (never blocks on the network). Raises `DiskFullError` only when
        the record cannot be written to disk: the step is then not recorded, and the caller must not
        count it as done (the training loop stops; quadrants.run.loop)."""
        try:
            if self._finished:
                self._warn_once("finished", "logging after finish() is ignored")
                return
            clean: dict[str, float] = {}
            for key, value in metrics.items():
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    self._warn_once(
                        f"value:{key}",
                        f"metric {key!r}: {type(value).__name__} is not a number; dropped",
                    )
                    continue
                if self._key_ok(key, "metric"):
                    clean[key] = number
            if clean:
                self._spool.append(
                    {"kind": "metrics", "step": int(step), "ts": _now_ms(), "metrics": clean}
                )
        except DiskFullError:
            raise
        except Exception as error:  # noqa: BLE001 - other trouble never stops training
            self._warn_once(
                f"spool:{type(error).__name__}", f"could not spool metrics of step {step}: {error}"
            )

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Spool params; nested mappings are flattened with '.', values become strings
        (<= 6000 chars). MLflow keeps the first value of a param: a different value logged later is
        reported and ignored."""
        try:
            flat: dict[str, str] = {}
            for key, value in _flatten(params).items():
                text = str(value)
                if len(text) > MAX_PARAM_VALUE_CHARS:
                    self._warn_once(
                        f"long:{key}",
                        f"param {key!r} is {len(text)} characters; kept the first "
                        f"{MAX_PARAM_VALUE_CHARS}",
                    )
                    text = text[:MAX_PARAM_VALUE_CHARS]
                if self._key_ok(key, "param"):
                    flat[key] = text
            if self._finished:
                self._warn_once("finished", "logging after finish() is ignored")
            elif flat:
                self._spool.append({"kind": "params", "params": flat})
        except DiskFullError:
            raise
        except Exception as error:  # noqa: BLE001
            self._warn_once(f"params:{type(error).__name__}", f"could not spool params: {error}")

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Spool an artifact (a file or a directory); the thread uploads it, retrying on failure."""
        try:
            path = Path(path).resolve()
            if self._finished or not path.exists():
                self._warn_once(
                    f"artifact:{path}", f"artifact {path} not logged (missing, or after finish())"
                )
                return
            copied = path.is_file() and path.stat().st_size <= self._copy_limit
            holder = self.spool_dir / "artifacts" / uuid.uuid4().hex
            try:
                if copied:
                    holder.mkdir(parents=True)
                    path = Path(shutil.copy2(path, holder / path.name))
                self._spool.append(
                    {
                        "kind": "artifact",
                        "path": str(path),
                        "artifact_path": artifact_path,
                        "copied": copied,
                    }
                )
            except OSError as error:  # a half-made copy is of no use: give the space back
                shutil.rmtree(holder, ignore_errors=True)
                if is_disk_full(error):
                    raise DiskFullError(getattr(error, "path", None) or holder) from None
                raise
        except DiskFullError:
            raise
        except Exception as error:  # noqa: BLE001
            self._warn_once(
                f"artifact:{type(error).__name__}", f"could not spool artifact {path}: {error}"
            )

    def flush(self, timeout_s: float | None = 60.0) -> bool:
        """Wait until everything spooled so far is delivered (True) or `timeout_s` passes (False).
        Records MLflow refused for good (bad names, a deleted run) count as
        done; they are logged."""
        try:
            if self._delivery is None or not self._delivery.alive:
                return not self._spool.pending()
            return self._delivery.wait_delivered(self._spool.end, timeout_s)
        except Exception as error:  # noqa: BLE001
            self._warn_once("flush", f"flush failed: {error}")
            return False

    def finish(self, status: str = "FINISHED", timeout_s: float = 60.0) -> None:
        """Deliver what is spooled, then end the run with `status` (FINISHED, FAILED or KILLED).
        Never raises. If the store stays unreachable for `timeout_s`, the run stays RUNNING in
        MLflow and the records stay in `spool_dir`: the next tracker started on it delivers them
        (and, having re-opened the run, ends it with its own `finish`)."""
        if self._finished:
            return
        try:
            status = status.upper()
            if status not in RUN_STATUSES:
                log.warning("unknown run status %r; ending the run as FAILED", status)
                status = "FAILED"
            try:
                self._spool.append(
                    {
                        "kind": "status",
                        "status": status,
                        "end_time": _now_ms(),
                        "session": self._session,
                    }
                )
            except DiskFullError as error:  # the end cannot be recorded: the run stays RUNNING
                self._finished = True
                self.undelivered = True
                log.error(
                    "could not record the end of run %s as %s (the disk of %s is full): it stays "
                    "RUNNING in MLflow; run the same command again once there is space, and it "
                    "resumes and ends the run",
                    self.run_id,
                    status,
                    error.path.parent,
                )
                self.flush(
                    min(timeout_s, 5.0)
                )  # what was spooled before goes out if the store takes it
                return
            self._finished = True
            if self._delivery is None:
                self.undelivered = True
                log.warning(
                    "finish() before start(): nothing was sent; the records stay in %s",
                    self.spool_dir,
                )
            elif not self.flush(timeout_s):
                self.undelivered = True
                if self._delivery.store_disk_full:  # flush stopped waiting at once (delivery.py)
                    log.warning(
                        "MLflow at %s cannot take the records: the disk under the store is full "
                        "(%s); run %s stays RUNNING. They are kept in %s, and a tracker started "
                        "on that directory delivers them once there is space.",
                        self._request.tracking_uri,
                        self._delivery.last_error,
                        self.run_id,
                        self.spool_dir,
                    )
                    return
                log.warning(
                    "MLflow at %s: records still undelivered after %.0f s (last error: %s); run "
                    "%s stays RUNNING. They are kept in %s, and a tracker started on that "
                    "directory delivers them.",
                    self._request.tracking_uri,
                    timeout_s,
                    self._delivery.last_error,
                    self.run_id,
                    self.spool_dir,
                )
        except Exception as error:  # noqa: BLE001
            self.undelivered = True
            log.warning("finish() failed: %s", error)
        finally:
            self._finished = True
            if self._delivery is not None:
                self._delivery.stop(join_s=5.0)
            else:
                self._spool.close()

    def __enter__(self) -> MlflowTracker:  # noqa: PYI034 - not meant to be subclassed
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.finish(
            "FINISHED"
            if kind is None
            else ("KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED")
        )

    # ---- helpers --------------------------------------------------------------------------------

    def _key_ok(self, key: str, what: str) -> bool:
        if key in self._valid_keys:
            return True
        if not isinstance(key, str):
            self._warn_once(f"key:{key!r}", f"{what} name {key!r} is not a string; dropped")
            return False
        norm = os.path.normpath(key)
        if (
            key
            and len(key) <= MAX_KEY_CHARS
            and _VALID_KEY.match(key)
            and norm == key
            and not norm.startswith(("/", ".."))
        ):
            self._valid_keys.add(key)
            return True
        self._warn_once(
            f"key:{key}",
            f"{what} name {key!r} is not accepted by MLflow (letters, digits, _ - . "
            f"space : /, no '//' or '..', at most {MAX_KEY_CHARS} characters); dropped",
        )
        return False

    def _warn_once(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            log.warning(message)


def start_parent_run(
    tracking_uri: str,
    experiment: str,
    name: str,
    tags: Mapping[str, str],
    *,
    artifact_location: str | None = None,
    timeout_s: float = 30.0,
) -> str:
    """Create the parent run of a sweep, or re-open the one that exists; return its id.

    Idempotent on (`name`, `tags["quadrants.sweep_id"]`): a relaunched sweep gets the same parent
    (children carry the sweep id too; the parent is told apart by a `quadrants.role` tag).
    Synchronous, for a launcher: retries transient failures for up to `timeout_s`, then raises.
    Two launchers racing to create the same parent can create two.
    """
    from mlflow.tracking import MlflowClient

    sweep_id = tags.get(SWEEP_ID_TAG)
    if not sweep_id or "'" in sweep_id or "'" in name:
        raise ValueError(
            f"a parent run needs a {SWEEP_ID_TAG} tag, and no quotes in it or the name"
        )
    if tracking_uri.startswith(("http://", "https://")):
        bound_mlflow_http_retries(15.0)
    query = (
        f"tags.`{SWEEP_ID_TAG}` = '{sweep_id}' and tags.`{ROLE_TAG}` = 'sweep_parent' "
        f"and attributes.run_name = '{name}'"
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client = MlflowClient(tracking_uri)
            experiment_id = experiment_id_for(client, experiment, artifact_location)
            # searched before every attempt: a create whose reply was lost is found, not repeated
            found = client.search_runs(
                [experiment_id], query, order_by=["attributes.start_time ASC"], max_results=1
            )
            if found:
                run = found[0]
                if run.info.status != "RUNNING":
                    client.update_run(run.info.run_id, status="RUNNING")
                return run.info.run_id
            run_tags = {**{str(k): str(v) for k, v in tags.items()}, ROLE_TAG: "sweep_parent"}
            return client.create_run(experiment_id, run_name=name, tags=run_tags).info.run_id
        except Exception as error:
            if is_permanent(error) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def end_parent_run(tracking_uri: str, run_id: str, status: str = "FINISHED") -> None:
    """Mark a sweep's parent run terminated (synchronous, one attempt; may raise)."""
    from mlflow.tracking import MlflowClient

    if tracking_uri.startswith(("http://", "https://")):
        bound_mlflow_http_retries(15.0)
    MlflowClient(tracking_uri).set_terminated(run_id, status)


def bound_mlflow_http_retries(timeout_s: float) -> None:
    """Turn off MLflow's own HTTP retries and cap its per-request timeout, for this process."""
    timeout = max(1, math.ceil(timeout_s))
    current = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT")
    if current is not None and current.isdigit() and 0 < int(current) < timeout:
        timeout = int(current)
    wanted = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout)}
    changed = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    if changed:
        os.environ.update(changed)
        log.debug("set %s for this process: the delivery thread retries on its own", changed)


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _now_ms() -> int:
    return int(time.time() * 1000)


def _flush_at_exit(ref: weakref.ref[MlflowTracker]) -> None:
    """At interpreter exit, give an unfinished tracker a few seconds to deliver
    (the thread is a daemon)."""
    tracker = ref()
    if tracker is not None and not tracker._finished and tracker._delivery is not None:
        tracker.flush(timeout_s=10.0)
