"""Is the tracking target an MLflow store this run can write to? Asked once before a run starts: a
wrong or missing target at start is almost always a mistake, which the spool's patience would
otherwise hide (a run that trains and tracks nothing). Outages that begin later are the spool's to
ride out.

Every scheme is asked with a real MLflow call
(`MlflowClient(uri).search_experiments(max_results=1)`, what the MLflow UI's first page asks), so
a web service that is not MLflow is refused; a local store (a SQLite file, a `file:` directory)
must also sit in a directory this process can write. A local store that does not exist yet is not
created here (nothing is written before the run): its nearest existing directory must take a file.
"""

from __future__ import annotations

import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

URI_VARIABLE = "MLFLOW_TRACKING_URI"


def local_store_path(uri: str) -> Path | None:
    """The file (sqlite) or directory (file:, a bare path) of a local store; None for a remote one.
    `sqlite:////abs/x.db` is `/abs/x.db` (SQLAlchemy's form: three slashes, then the path)."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "file":
        return Path(urllib.parse.unquote(parsed.path))
    if parsed.scheme == "" and uri:
        return Path(uri)
    return None


def directory_problem(path: Path) -> str | None:
    """Why no store can be written at `path` (None: its directory, or the nearest existing one
    above it, is a directory that takes a file). A probe file is created and removed: the
    permission bits alone do not say it for root or on a read-only mount."""
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    try:
        with tempfile.TemporaryFile(dir=parent):
            return None
    except OSError as error:
        return f"{parent} is not writable ({error.strerror or type(error).__name__})"


def server_problem(uri: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers HTTP at the http(s) `uri` (None: something answered, with any status;
    whether it is MLflow is `store_problem`'s question)."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


@contextmanager
def _bounded_http(timeout_s: float) -> Iterator[None]:
    """MLflow's REST client without its own retries (7, with backoff: minutes) and with a short
    timeout, for the one question asked here (mlflow/environment_variables.py
    MLFLOW_HTTP_REQUEST_MAX_RETRIES and MLFLOW_HTTP_REQUEST_TIMEOUT, read at each request)."""
    wanted = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, int(timeout_s))),
    }
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def mlflow_problem(uri: str, timeout_s: float = 10.0) -> str | None:
    """Why MLflow's own client cannot list an experiment at `uri` (None: it could)."""
    from mlflow.tracking import MlflowClient

    try:
        with _bounded_http(timeout_s):
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as error:  # noqa: BLE001 - any failure of the call is the answer
        first = (str(error).strip().splitlines() or [""])[0][:300]
        return f"{type(error).__name__}: {first}" if first else type(error).__name__
    return None


def store_problem(uri: str) -> tuple[str, str] | None:
    """(kind, reason) of what is wrong with the tracking target `uri`, or None. Kinds:
    `unreachable` (nothing answers HTTP there), `not_mlflow` (an answer, but MLflow's call
    fails), `unwritable` (a local store's directory), `store` (a local store MLflow cannot read)."""
    local = local_store_path(uri)
    if local is not None:
        if local.is_dir() and uri.startswith("sqlite:"):
            return "unwritable", f"{local} is a directory, not a SQLite file"
        problem = directory_problem(local if uri.startswith("sqlite:") else local / "store")
        if problem is not None:
            return "unwritable", problem
        if not local.exists():
            return None  # created by the run; asking MLflow now would create it
        problem = mlflow_problem(uri)
        return None if problem is None else ("store", problem)
    if uri.startswith(("http://", "https://")):
        problem = server_problem(uri)
        if problem is not None:
            return "unreachable", problem
    problem = mlflow_problem(uri)
    return None if problem is None else ("not_mlflow", problem)


def unreachable_message(uri: str, reason: str, variable_value: str | None) -> str:
    """The compose-time error for an unreachable server, naming MLFLOW_TRACKING_URI."""
    source = (
        f"{URI_VARIABLE}={variable_value}"
        if variable_value is not None
        else f"{URI_VARIABLE} is not set, so tracking=server uses its default"
    )
    return (
        f"tracking.uri={uri}: no MLflow tracking server answers there ({reason}); {source}. "
        f"Start the server (mlflow server --host 0.0.0.0 --port 5000 --backend-store-uri ...), set "
        f"{URI_VARIABLE} to its address (http://HOST:PORT), or use tracking=local"
    )


def store_message(uri: str, kind: str, reason: str, variable_value: str | None) -> str:
    """The compose-time error for a tracking target that is not a writable MLflow store."""
    if kind == "unreachable":
        return unreachable_message(uri, reason, variable_value)
    if kind == "not_mlflow":
        return (
            f"tracking.uri={uri}: something answers there, but not an MLflow tracking server "
            f"(listing one experiment failed: {reason}). Check the host and port (another service "
            f"on that port?), or use tracking=local"
        )
    if kind == "unwritable":
        return (
            f"tracking.uri={uri}: the store cannot be written there ({reason}). Point "
            "tracking.uri at a directory this user can write (sqlite:////ABS/PATH/mlflow.db), or "
            "drop it for the default store under outputs"
        )
    return (
        f"tracking.uri={uri}: MLflow cannot read this store ({reason}). Is it an MLflow store "
        "(a SQLite file that mlflow created)? Point tracking.uri at another file, or drop it"
    )
