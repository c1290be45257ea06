"""The runs-page view a sweep's link opens in MLflow: its training runs, one row each, with the
quadrant, objective and seed and the final Avg@n, Pass@n and entropy as columns.

In MLflow 3.17 a link cannot choose the runs table's columns: the URL sets the search facets only
(`searchFilter`, `orderByKey`, `orderByAsc`, `startTime`, `lifecycleFilter`, `modelVersionFilter`,
`datasetsFilter`; mlflow/mlflow, mlflow/server/js/src/experiment-tracking/components/
experiment-page/hooks/useExperimentPageSearchFacets.tsx). The visible columns are browser state
(`selectedColumns`, kept in local storage; by default Source, Models and Dataset, and every metric,
parameter and tag column hidden: `initialHide: true` in utils/experimentPage.column-utils.tsx).
What does carry columns is MLflow's own "share view" link, `?viewStateShareKey=<key>`: the page
reads the experiment tag `mlflow.sharedViewState.<key>` (a JSON object), applies its search facets
and its UI state (`selectedColumns`, `runsHiddenMode`, ...; merged onto the defaults, the per-run
fields dropped) and does not write that view into the browser's own state
(hooks/useSharedExperimentViewState.ts, as bundled in mlflow 3.17.2's
server/js/build/static/js/3878.*.chunk.js). It applies the tag only when the URL has no search
facets of its own, so the link carries the key alone. The tag's value is a "saved view" envelope,
`{"name", "createdAt", "updatedAt", "state": <the state as a JSON string>}` (3448.*.chunk.js, module
53787; utils/savedViewEnvelope.ts upstream): the page reads it first and names it in its
saved-views menu. The format is the UI's, not a documented API:
tests/browser/test_dashboard.py checks it against the pinned MLflow, and the view is stored only
when the installed MLflow is a version so checked (links.verified_ui; with another, the link is
the experiment's plain page, which reads no view, and nothing is written to the experiment).

A column key is MLflow's canonical sort key, `<metrics|params|tags>.` + the name in backquotes.
A key no run has logged yet is simply not shown until one does.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable

from quadrants.tracking.links import RUN_NAME_SORT_KEY, sweep_filter, verified_ui

log = logging.getLogger(__name__)

VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # the UI's EXPERIMENT_PAGE_VIEW_STATE_SHARE_TAG_PREFIX
ROW_TAGS = ("quadrant", "objective", "seed")  # on every training run (run/run_info.py)


def view_key(sweep_id: str) -> str:
    """The share key of a sweep's view (letters, digits, '-', '.': a valid tag key and URL part)."""
    return f"quadrants-{sweep_id}"


def column(kind: str, name: str) -> str:
    """MLflow's canonical column key: `kind` is metrics, params or tags."""
    return f"{kind}.`{name}`"


def view_state(sweep_id: str, metric_columns: Iterable[str]) -> dict:
    """The shared view: the sweep's training runs sorted by name (so child runs are rows of their
    own, not folded under the parent), every run drawn in the charts (MLflow's default draws the
    first 10), and the row tags then `metric_columns` as the table's columns."""
    columns = [column("tags", tag) for tag in ROW_TAGS]
    columns += [column("metrics", name) for name in metric_columns]
    return {
        "searchFilter": sweep_filter(sweep_id),
        "orderByKey": RUN_NAME_SORT_KEY,
        "orderByAsc": True,
        "selectedColumns": columns,
        "runsHiddenMode": "SHOW_ALL",
    }


def envelope(sweep_id: str, state: dict, now_ms: int | None = None) -> dict:
    """The saved-view record MLflow's UI stores a view in: its menu name, times in ms, the state
    as a JSON string."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return {
        "name": f"quadrants sweep {sweep_id}",
        "createdAt": now_ms,
        "updatedAt": now_ms,
        "state": json.dumps(state),
    }


def publish_view(
    tracking_uri: str, experiment_id: str, sweep_id: str, metric_columns: Iterable[str]
) -> str | None:
    """Store the sweep's view on the experiment (overwriting an earlier one); its share key, or
    None when the store refused (the caller links the plain filter instead) or the installed
    MLflow's UI was not checked with views (verified_ui: nothing stored, the link is plain)."""
    if not verified_ui():
        return None
    try:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri).set_experiment_tag(
            experiment_id,
            VIEW_TAG_PREFIX + view_key(sweep_id),
            json.dumps(envelope(sweep_id, view_state(sweep_id, metric_columns))),
        )
    except Exception as err:  # noqa: BLE001 - a view is a convenience: never fail a command over it
        log.warning("could not store the runs-page view of sweep %s: %s", sweep_id, err)
        return None
    return view_key(sweep_id)


def stored_view(tracking_uri: str, experiment_id: str, sweep_id: str) -> str | None:
    """The share key of the sweep's view if the experiment holds it (a sweep run by
    `quadrants.sweep` stored it), else None."""
    try:
        from mlflow.tracking import MlflowClient

        tags = MlflowClient(tracking_uri).get_experiment(experiment_id).tags
    except Exception:  # noqa: BLE001 - a link is a convenience
        return None
    return view_key(sweep_id) if VIEW_TAG_PREFIX + view_key(sweep_id) in tags else None
