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
"""

from __future__ import annotations

from urllib.parse import quote

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
# what a run is, on every run quadrants creates: train (a training job), eval (python -m
# quadrants.evaluate), probe (python -m quadrants.probe), sweep_parent (a sweep's parent run).
# Runs created before training runs were tagged have no role.
ROLE_TAG = "quadrants.role"
TRAIN_ROLE = "train"
TRAINING_KIND = "custom_model_development"
LOCAL_UI = "http://127.0.0.1:5000"
# the runs table's "Run Name" column as its sort menu names it (other keys: "Sort: undefined")
RUN_NAME_SORT_KEY = "tags.`mlflow.runName`"
_WORKFLOW = "workflowType=machine_learning"


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
    are rows of their own, not folded under the parent), in MLflow's default columns."""
    query = _WORKFLOW
    if view:  # the view's own search facets apply only when the URL has none (tracking/view.py)
        query += f"&viewStateShareKey={quote(view, safe='')}"
    elif sweep_id:
        search = quote(sweep_filter(sweep_id), safe="")
        sort = quote(RUN_NAME_SORT_KEY, safe="")
        query += f"&orderByKey={sort}&orderByAsc=true&searchFilter={search}"
    return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs?{query}"


def run_url(tracking_uri: str, experiment_id: str, run_id: str, tab: str | None = None) -> str:
    """A run's page (`tab`: e.g. "model-metrics", or "artifacts/analysis/report.html")."""
    path = f"/#/experiments/{experiment_id}/runs/{run_id}" + (f"/{tab}" if tab else "")
    return f"{ui_base(tracking_uri)}{path}?{_WORKFLOW}"


REPORT_TAB = "artifacts/analysis/report.html"  # the analysis report on a sweep's parent run


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
    run holds, opened in MLflow's artifact viewer. No experiment id (store unreachable): only the
    command."""
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
