"""Where a researcher opens what a command tracked: MLflow UI links to an
experiment's runs and a run.

MLflow 3.17's UI has two modes, "GenAI" and "Model training", chosen by a `workflowType` query
parameter or, without one, by the mode last used in that browser (GenAI in a fresh one). Every
experiment quadrants creates carries the kind tag `mlflow.experimentKind = custom_model_development`
("Machine learning" in MLflow's experiment list), and every link carries
`workflowType=machine_learning`, so a link opens the training view in any browser.

A sweep's runs-page link opens the view the sweep stored on its experiment (tracking/view.py:
its training runs, with quadrant, objective, seed and the final metrics as columns); without a
stored view it carries the same filter and order itself, in MLflow's default columns. The filter
is on the sweep and on the training runs (`quadrants.role = train`, so the
evaluation and probe runs of the sweep's checkpoints are not mixed into the quadrant list; runs
created before that tag existed are not shown either), the order by name: MLflow nests child
runs under their (collapsed) parent only in its default order (by start time), so sorted by name the
four quadrant runs are rows of their own, and their curves are in the chart view without a click.

With a tracking server the links start with its URL; with the local SQLite store they point at
`mlflow ui --backend-store-uri <store>` on its default address, and
`ui_command` says how to start it.

What the links are built from. MLflow has no public function that returns a UI address (its own
"View run ... at:" line is built inside `TrackingServiceClient._log_url`,
mlflow/tracking/_tracking_service/client.py, as `<host>/#/experiments/<id>/runs/<run id>` and
`<host>/#/experiments/<id>`). So the links are put together here from three kinds of pieces:
- MLflow's public API, checked against the installed MLflow by tests/unit/tracking/test_links.py:
  the run-name tag `mlflow.runName` (MLFLOW_RUN_NAME, mlflow/utils/mlflow_tags.py, a documented
  system tag) in the search syntax of `MlflowClient.search_runs` (a filter
  tags.`key` = 'value', an order by tags.`key`), and the address `mlflow ui` listens on by default
  (`--host 127.0.0.1`, `--port 5000`: HOST and PORT in mlflow/utils/cli_args.py);
- the UI's two page routes, unchanged from MLflow 1.x to 3.17: an experiment `/experiments/<id>`,
  a run `/experiments/<id>/runs/<run id>` (mlflow/mlflow, mlflow/server/js/src/experiment-tracking/
  routes.js in 1.x, routes.ts `RoutePaths.experimentPage` and `runPage` in 3.x);
- the UI's state in the URL, not an API and changed between releases: the `workflowType` mode,
  the runs tab `/runs` with its search facets (`searchFilter`, `orderByKey`, `orderByAsc`), the
  stored view `viewStateShareKey` (tracking/view.py) and run tabs such as `/artifacts/<path>`
  (`/artifactPath/<path>` in 1.x).
The third kind is used only when the installed MLflow is a version whose UI was checked with these
links (VERIFIED_UI, the version pyproject.toml pins; tests/browser/test_dashboard.py opens them in
Chromium). With any other version the links are the two plain pages, the experiment and the run,
and a one-line warning says so once per process. The check reads the installed MLflow: a local
store's UI is `mlflow ui` from it; a tracking server serves its own UI, the checked one only when
the server runs the same MLflow.
"""

from __future__ import annotations

import functools
import logging
from urllib.parse import quote

log = logging.getLogger(__name__)

# the MLflow versions whose UI state in a URL (module docstring) was checked in a browser, the pin
# in pyproject.toml among them (tests/unit/tracking/test_links.py). Add a version only after
# `bash tests/browser/run.sh` passes with it installed.
VERIFIED_UI = frozenset({"3.17.2"})

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
# what a run is, on every run quadrants creates: train (a training job), eval (python -m
# quadrants.evaluate), probe (python -m quadrants.probe), sweep_parent (a sweep's parent run).
# Runs created before training runs were tagged have no role.
ROLE_TAG = "quadrants.role"
TRAIN_ROLE = "train"
TRAINING_KIND = "custom_model_development"
LOCAL_UI = "http://127.0.0.1:5000"  # `mlflow ui`'s default --host and --port
# the runs table's "Run Name" column as its sort menu names it (other keys: "Sort: undefined"):
# search_runs' order-by key of the tag MLFLOW_RUN_NAME (kept a literal so that importing this module
# does not import mlflow; test_links checks it against mlflow)
RUN_NAME_SORT_KEY = "tags.`mlflow.runName`"
_WORKFLOW = "workflowType=machine_learning"


def verified_ui() -> bool:
    """Whether the installed MLflow is a version whose UI the links' URL state was checked with
    (VERIFIED_UI). If not, the links are the plain pages, and a warning says so once per process."""
    import mlflow

    if mlflow.__version__ in VERIFIED_UI:
        return True
    _warn_plain_links(mlflow.__version__)
    return False


@functools.cache
def _warn_plain_links(version: str) -> None:
    checked = ", ".join(sorted(VERIFIED_UI))
    log.warning(
        "MLflow %s's web UI was not checked with quadrants' links (checked: %s): the links open "
        "the plain experiment and run pages, without the sweep's filter, columns or report tab "
        "(install mlflow==%s for them)",
        version,
        checked,
        checked,
    )


def ui_base(tracking_uri: str) -> str:
    """The UI address for a store: the server itself, or where `mlflow ui` listens by default."""
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return LOCAL_UI


def ui_command(tracking_uri: str) -> str | None:
    """The command that serves a local store's UI (None for a tracking server,
    which is its own UI)."""
    if tracking_uri.startswith(("http://", "https://")):
        return None
    return f"mlflow ui --backend-store-uri {tracking_uri}"


def sweep_filter(sweep_id: str) -> str:
    """MLflow's search filter for a sweep's training runs (no evaluation, probe or parent run)."""
    return f"tags.`quadrants.sweep_id` = '{sweep_id}' and tags.`{ROLE_TAG}` = '{TRAIN_ROLE}'"


def experiment_url(
    tracking_uri: str, experiment_id: str, sweep_id: str | None = None, view: str | None = None
) -> str:
    """The runs page of an experiment in the training view. With `view` (a share key stored by
    tracking/view.py), that view: the sweep's training runs with their quadrant, objective, seed
    and final metrics as columns. Else with `sweep_id`, that sweep's training runs only
    (`quadrants.role = train`: no evaluation, probe or parent run), sorted by name (so child runs
    are rows of their own, not folded under the parent), in MLflow's default columns.
    With an MLflow whose UI was not checked (verified_ui), the experiment's page alone."""
    if not verified_ui():
        return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}"
    query = _WORKFLOW
    if view:  # the view's own search facets apply only when the URL has none (tracking/view.py)
        query += f"&viewStateShareKey={quote(view, safe='')}"
    elif sweep_id:
        search = quote(sweep_filter(sweep_id), safe="")
        sort = quote(RUN_NAME_SORT_KEY, safe="")
        query += f"&orderByKey={sort}&orderByAsc=true&searchFilter={search}"
    return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs?{query}"


def run_url(tracking_uri: str, experiment_id: str, run_id: str, tab: str | None = None) -> str:
    """A run's page (`tab`: e.g. "model-metrics", or "artifacts/analysis/report.html"). With an
    MLflow whose UI was not checked (verified_ui), the run's page alone (no tab)."""
    if not verified_ui():
        return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs/{run_id}"
    path = f"/#/experiments/{experiment_id}/runs/{run_id}" + (f"/{tab}" if tab else "")
    return f"{ui_base(tracking_uri)}{path}?{_WORKFLOW}"


REPORT_ARTIFACT = "analysis/report.html"  # the analysis report on a sweep's parent run
REPORT_TAB = f"artifacts/{REPORT_ARTIFACT}"


def link_lines(
    tracking_uri: str,
    experiment_id: str | None,
    *,
    sweep_id: str | None = None,
    view: str | None = None,
    runs: dict[str, str] | None = None,
    report_run: str | None = None,
) -> list[str]:
    """The lines a command prints: how to open the UI, the experiment's runs page, then one line per
    `{label: run id}` (e.g. {"parent run": ...}), then with `report_run` the analysis report that
    run holds, opened in MLflow's artifact viewer (with an MLflow whose UI was not checked: the
    run's page, and the artifact's path). No experiment id (store unreachable): only the command."""
    lines = []
    command = ui_command(tracking_uri)
    if command:
        lines.append(f"quadrants: browse with  {command}   (then open the links below)")
    if experiment_id is None:
        return lines
    runs_page = experiment_url(tracking_uri, experiment_id, sweep_id, view)
    lines.append(f"quadrants: runs        {runs_page}")
    for label, run_id in (runs or {}).items():
        if run_id:
            lines.append(f"quadrants: {label:<11} {run_url(tracking_uri, experiment_id, run_id)}")
    if report_run:
        report = run_url(tracking_uri, experiment_id, report_run, REPORT_TAB)
        if not verified_ui():
            report += f"   (artifact {REPORT_ARTIFACT})"
        lines.append(f"quadrants: {'report':<11} {report}")
    return lines


def experiment_id_of(tracking_uri: str, experiment: str) -> str | None:
    """The id of experiment `experiment` in the store, or None (missing, or
    the store unreachable)."""
    try:
        from mlflow.tracking import MlflowClient

        found = MlflowClient(tracking_uri).get_experiment_by_name(experiment)
    except Exception:  # noqa: BLE001 - a link is a convenience: never fail a command over it
        return None
    return None if found is None else found.experiment_id
