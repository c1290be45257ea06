"""Does a tracking server answer? Asked once before a run starts: a server that is down at start is
almost always a wrong or missing address, which the spool's patience would otherwise hide (a run
tracking nothing). Outages that begin later are the spool's to ride out."""

from __future__ import annotations

import urllib.error
import urllib.request

URI_VARIABLE = "MLFLOW_TRACKING_URI"


def server_problem(uri: str, timeout_s: float = 5.0) -> str | None:
    """Why the http(s) tracking server at `uri` cannot be reached (None: it answered; any HTTP
    status counts as an answer). Other URIs (sqlite, file) are not asked."""
    if not uri.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


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
