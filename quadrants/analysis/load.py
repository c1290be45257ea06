"""MLflow -> pandas: select the runs of a study or sweep and read their metrics and artifacts.

A selection names an MLflow store and any of: an experiment (one per study), a sweep id (the
`quadrants.sweep_id` tag), a parent run id, and extra `tag=value` filters. Sweep parent runs (tag
`quadrants.role = sweep_parent`) are never rows of a table; they are where the analysis is logged.

Held-out metrics are read by name, `eval/<benchmark>/avg_at_<k>` and `eval/<benchmark>/pass_at_<k>`
(`quadrants.tracking.keys`); their *final* value is the one logged at the largest step. So is
`eval/<benchmark>/problems`, how many problems that evaluation covered (`eval.limit` takes the first
N): the table compares only cells evaluated on the same problems (`problem_counts`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from quadrants.tracking.links import TRAIN_ROLE
from quadrants.tracking.mlflow_tracker import ROLE_TAG, SWEEP_ID_TAG

EVAL_KEY = re.compile(r"^eval/(?P<benchmark>[^/]+)/(?P<kind>avg|pass)_at_(?P<k>\d+)$")
"""An Avg@k / Pass@k metric name; anything else under eval/ (no_answer_frac, stderr, ...) is not."""
PROBLEMS_KEY = re.compile(r"^eval/(?P<benchmark>[^/]+)/problems$")
"""The number of problems a benchmark's evaluation covered (not a per-group count: those have more
parts). Runs from before the evaluation runner (and held-out checks from before it logged one)
lack it."""

PARENT_TAG = "mlflow.parentRunId"
STUDY_TAG = "quadrants.study"
SOURCE_RUN_TAG = "quadrants.source_run_id"
PROVENANCE = "provenance."  # quadrants.tracking.provenance.PREFIX
PROBLEM_TABLE = re.compile(
    r"(problem|per_problem|counts|nc)[^/]*\.(csv|json|jsonl)$", re.IGNORECASE
)
"""File names that may hold a per-problem (n, c) table (see `problem_tables`)."""


class SelectionError(ValueError):
    """The selection matched nothing usable; the message says what was looked
    for and what exists."""


@dataclass(frozen=True)
class Selection:
    """Which runs to analyse.

    Attributes:
        tracking_uri: the MLflow store (sqlite:///..., http://...).
        experiment: an experiment (study) name, or None for every experiment.
        sweep_id: value of the quadrants.sweep_id tag, or None.
        parent_run_id: only children of this run, or None.
        tags: extra (tag, value) equality filters.
    """

    tracking_uri: str
    experiment: str | None = None
    sweep_id: str | None = None
    parent_run_id: str | None = None
    tags: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        parts = [f"experiment={self.experiment}" if self.experiment else "all experiments"]
        if self.sweep_id:
            parts.append(f"sweep_id={self.sweep_id}")
        if self.parent_run_id:
            parts.append(f"parent={self.parent_run_id}")
        parts += [f"{k}={v}" for k, v in self.tags]
        return f"{', '.join(parts)} in {self.tracking_uri}"


@dataclass(frozen=True)
class RunSet:
    """The selected runs.

    Attributes:
        runs: one row per run: run_id, run_name, status, experiment_id, start_time, and one column
            per user tag (quadrant, objective, seed, ...; MLflow's own `mlflow.*` tags are left
            out).
        parent_run_id: the sweep's parent run (where the analysis is logged), or None.
        selection: what was asked for.
        label: a short name for output directories (the sweep id, or the experiment).
        eval_runs: {training run id: ids of the `python -m quadrants.evaluate` runs of its
            checkpoints} (tag quadrants.role = eval, quadrants.source_run_id = the training run);
            their metrics count as the training run's (`final_metrics`), they are not rows of their
            own.
        provenance: {run id: its `provenance.*` params} (versions, git commit, GPUs, data hashes:
            quadrants/tracking/provenance.py; empty for runs from before they were logged).
    """

    runs: pd.DataFrame
    parent_run_id: str | None
    selection: Selection
    label: str
    eval_runs: dict[str, list[str]] = field(default_factory=dict)
    provenance: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def run_ids(self) -> list[str]:
        return list(self.runs["run_id"])


def _quote(value: str) -> str:
    if "'" in value:
        raise SelectionError(f"quotes are not allowed in a selection value: {value!r}")
    return value


def _filter(selection: Selection) -> str:
    clauses = []
    if selection.sweep_id:
        clauses.append(f"tags.`{SWEEP_ID_TAG}` = '{_quote(selection.sweep_id)}'")
    if selection.parent_run_id:
        clauses.append(f"tags.`{PARENT_TAG}` = '{_quote(selection.parent_run_id)}'")
    clauses += [f"tags.`{_quote(k)}` = '{_quote(v)}'" for k, v in selection.tags]
    return " and ".join(clauses)


def _search(client: MlflowClient, experiment_ids: list[str], query: str) -> list[Run]:
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs(experiment_ids, query, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _experiment_ids(client: MlflowClient, experiment: str | None) -> list[str]:
    experiments = client.search_experiments()
    if experiment is None:
        return [e.experiment_id for e in experiments]
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = sorted(e.name for e in experiments)
        raise SelectionError(f"no experiment named {experiment!r}; the store has: {names}")
    return [found.experiment_id]


def latest_sweep(client: MlflowClient, experiment: str | None = None) -> tuple[str, str]:
    """(experiment name, sweep id) of the most recently started sweep parent run in the store."""
    ids = _experiment_ids(client, experiment)
    parents = client.search_runs(
        ids,
        f"tags.`{ROLE_TAG}` = 'sweep_parent'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not parents:
        raise SelectionError(
            "no sweep parent run in the store; select runs with --experiment (and --tag key=value)"
        )
    run = parents[0]
    return client.get_experiment(run.info.experiment_id).name, run.data.tags[SWEEP_ID_TAG]


def select_runs(client: MlflowClient, selection: Selection) -> RunSet:
    """The child runs the selection names, as a `RunSet`.

    Raises:
        SelectionError: nothing matched (the message lists what the store has).
    """
    ids = _experiment_ids(client, selection.experiment)
    matched = _search(client, ids, _filter(selection))
    # training runs only (role train, or none: made before the tag); a parent, evaluation or probe
    # run carries the sweep id too, and is never a row of its own here
    found = [r for r in matched if r.data.tags.get(ROLE_TAG) in (None, TRAIN_ROLE)]
    training_ids = {r.info.run_id for r in found}
    eval_runs: dict[str, list[str]] = {}
    # standalone evaluations of the selected runs' checkpoints, whatever the selection filter says
    for run in _search(
        client, sorted({r.info.experiment_id for r in found}) or ids, f"tags.`{ROLE_TAG}` = 'eval'"
    ):
        if run.data.tags.get(SOURCE_RUN_TAG) in training_ids:
            eval_runs.setdefault(run.data.tags[SOURCE_RUN_TAG], []).append(run.info.run_id)
    # an evaluation of something not selected (a base model) that the filter
    # matched: a row of its own
    found += [
        r
        for r in matched
        if r.data.tags.get(ROLE_TAG) == "eval"
        and r.data.tags.get(SOURCE_RUN_TAG) not in training_ids
    ]
    if not found:
        sweeps = sorted(
            {r.data.tags.get(SWEEP_ID_TAG, "") for r in _search(client, ids, "")} - {""}
        )
        raise SelectionError(
            f"no runs match {selection.describe()}; sweep ids in the store: {sweeps or 'none'}"
        )
    rows = []
    for run in found:
        row: dict[str, Any] = {
            "run_id": run.info.run_id,
            "run_name": run.info.run_name,
            "status": run.info.status,
            "experiment_id": run.info.experiment_id,
            "start_time": run.info.start_time,
        }
        row.update({k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")})
        row[PARENT_TAG] = run.data.tags.get(PARENT_TAG)
        rows.append(row)
    frame = pd.DataFrame(rows).sort_values(["run_name", "start_time"]).reset_index(drop=True)
    parent = selection.parent_run_id
    if parent is None:
        parents = {p for p in frame[PARENT_TAG] if p}
        parent = parents.pop() if len(parents) == 1 else None
    label = selection.sweep_id or selection.experiment or "runs"
    provenance = {
        run.info.run_id: {k: v for k, v in run.data.params.items() if k.startswith(PROVENANCE)}
        for run in found
    }
    return RunSet(frame, parent, selection, label, eval_runs, provenance)


def final_metrics(
    client: MlflowClient,
    run_ids: Sequence[str],
    eval_runs: Mapping[str, Sequence[str]] | None = None,
) -> pd.DataFrame:
    """The final value of every Avg@k / Pass@k metric (`EVAL_KEY`) and problem count
    (`PROBLEMS_KEY`) per run: the point at the largest step (then the latest timestamp), with that
    step. A run's `eval_runs` (standalone evaluations of its checkpoints, logged at the checkpoint's
    step) compete with its own in-training evaluations.

    Returns:
        columns run_id, key, step, value (run_id is the training run's).
    """
    rows = []
    for run_id in run_ids:
        best: dict[str, Any] = {}
        for source in [run_id, *((eval_runs or {}).get(run_id, []))]:
            for key in client.get_run(source).data.metrics:
                # only Avg@k / Pass@k and the problem count: a benchmark logs ~15 other eval keys
                if EVAL_KEY.match(key) or PROBLEMS_KEY.match(key):
                    last = max(
                        client.get_metric_history(source, key), key=lambda m: (m.step, m.timestamp)
                    )
                    if key not in best or (last.step, last.timestamp) > (
                        best[key].step,
                        best[key].timestamp,
                    ):
                        best[key] = last
        rows += [
            {"run_id": run_id, "key": key, "step": m.step, "value": m.value}
            for key, m in best.items()
        ]
    return pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])


def eval_points(metrics: pd.DataFrame) -> pd.DataFrame:
    """The Avg@k / Pass@k points among `metrics` (from `final_metrics` or `histories`).

    Returns:
        columns run_id, benchmark, kind ("avg" | "pass"), k, step, value.
    """
    rows = []
    for record in metrics.itertuples(index=False):
        match = EVAL_KEY.match(record.key)
        if match:
            rows.append(
                {
                    "run_id": record.run_id,
                    "benchmark": match["benchmark"],
                    "kind": match["kind"],
                    "k": int(match["k"]),
                    "step": int(record.step),
                    "value": float(record.value),
                }
            )
    return pd.DataFrame(rows, columns=["run_id", "benchmark", "kind", "k", "step", "value"])


def problem_counts(metrics: pd.DataFrame) -> pd.DataFrame:
    """The problem counts (`PROBLEMS_KEY`) among `metrics` (from `final_metrics` or `histories`).

    Returns:
        columns run_id, benchmark, step, problems; a run that logged no count has no row.
    """
    rows = []
    for record in metrics.itertuples(index=False):
        match = PROBLEMS_KEY.match(record.key)
        if match:
            rows.append(
                {
                    "run_id": record.run_id,
                    "benchmark": match["benchmark"],
                    "step": int(record.step),
                    "problems": int(record.value),
                }
            )
    return pd.DataFrame(rows, columns=["run_id", "benchmark", "step", "problems"])


def histories(client: MlflowClient, run_ids: Sequence[str], keys: Iterable[str]) -> pd.DataFrame:
    """Every logged point of the given metric keys (keys a run lacks are skipped).

    Returns:
        columns run_id, key, step, value, sorted by run, key, step.
    """
    wanted = list(keys)
    rows = []
    for run_id in run_ids:
        present = client.get_run(run_id).data.metrics
        for key in wanted:
            if key in present:
                rows += [
                    {"run_id": run_id, "key": key, "step": m.step, "value": m.value}
                    for m in client.get_metric_history(run_id, key)
                ]
    frame = pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])
    return frame.sort_values(["run_id", "key", "step"]).reset_index(drop=True)


def metric_keys(client: MlflowClient, run_ids: Sequence[str], prefix: str) -> list[str]:
    """The metric keys starting with `prefix` that any of the runs logged."""
    keys: set[str] = set()
    for run_id in run_ids:
        keys.update(k for k in client.get_run(run_id).data.metrics if k.startswith(prefix))
    return sorted(keys)


def _walk(client: MlflowClient, run_id: str, path: str | None, depth: int) -> list[str]:
    files = []
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            if depth > 0 and Path(info.path).name not in {"samples", "config", "checkpoints"}:
                files += _walk(client, run_id, info.path, depth - 1)
        else:
            files.append(info.path)
    return files


# MLflow draws a tqdm bar per download ("Downloading artifacts", mlflow/store/artifact/
# artifact_repo.py `download_artifacts` -> mlflow/utils/file_utils.py `ArtifactProgressBar`) unless
# this variable is false (mlflow/environment_variables.py; read at every download, MLflow 3.17)
PROGRESS_BAR_VARIABLE = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


@contextlib.contextmanager
def quiet_artifact_downloads() -> Iterator[None]:
    """No MLflow progress bar for the downloads inside (an analysis reads dozens of small files, and
    a sweep's summary printed a bar for each); a value the user set is left as it is."""
    if PROGRESS_BAR_VARIABLE in os.environ:
        yield
        return
    os.environ[PROGRESS_BAR_VARIABLE] = "false"
    try:
        yield
    finally:
        os.environ.pop(PROGRESS_BAR_VARIABLE, None)


def _download(client: MlflowClient, run_id: str, path: str, dst: Path) -> Path:
    with quiet_artifact_downloads():
        return Path(client.download_artifacts(run_id, path, str(dst)))


def load_samples(
    client: MlflowClient, run_id: str, cache: Path | None = None
) -> list[dict[str, Any]]:
    """Every sample record of the run's `samples/step_*.json` artifacts, each with its "step" added.

    The records are those of `quadrants.run.samples`: prompt, response, reward, advantage, and per
    token its text, entropy and quadrant. A run without the artifact gives [].
    """
    names = sorted(
        f.path for f in client.list_artifacts(run_id, "samples") if f.path.endswith(".json")
    )
    if not names:
        return []
    records = []
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        for name in names:
            payload = json.loads(_download(client, run_id, name, Path(tmp)).read_text())
            records += [
                {**sample, "step": payload.get("step")} for sample in payload.get("samples", [])
            ]
    return records


def _read_table(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path)
    if path.suffix == ".jsonl":
        return pd.DataFrame(
            [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        )
    payload = json.loads(path.read_text())
    if isinstance(payload, dict):
        payload = payload.get("problems", payload.get("records", payload))
    return pd.DataFrame(payload)


def problem_tables(
    client: MlflowClient, run_id: str, benchmarks: Iterable[str], default_step: int = -1
) -> dict[str, tuple[int, pd.DataFrame]]:
    """Per-problem (n, c) tables among the run's artifacts, by benchmark, the newest evaluation's.

    A file qualifies when its name looks like a per-problem table (`PROBLEM_TABLE`; the evaluation
    runner writes `eval/[step_<N>/]<benchmark>/counts.csv`), it has columns `n` and `c`, and its
    benchmark is known: a `benchmark` column, or a benchmark name as a path part or file-name stem.
    The step is the `step_<N>` in its path, else `default_step`; the largest step wins. A JSON file
    next to a CSV of the same name is the same table and is skipped. Files that do not parse are
    skipped (the logged pass_at_k points are used instead).

    Returns:
        {benchmark: (step, DataFrame with integer columns n and c, one row per problem)}.
    """
    known = set(benchmarks)
    candidates = [p for p in _walk(client, run_id, None, 3) if PROBLEM_TABLE.search(Path(p).name)]
    csvs = {str(Path(p).with_suffix("")) for p in candidates if p.endswith(".csv")}
    candidates = [
        p for p in candidates if p.endswith(".csv") or str(Path(p).with_suffix("")) not in csvs
    ]
    tables: dict[str, tuple[int, pd.DataFrame]] = {}

    def keep(bench: str, step: int, table: pd.DataFrame) -> None:
        if bench not in tables or step > tables[bench][0]:
            tables[bench] = (step, table[["n", "c"]].astype(int).reset_index(drop=True))

    def step_of(name: str) -> int:
        found = re.search(r"step_(\d+)", name)
        return int(found.group(1)) if found else default_step

    def path_benchmark(name: str) -> str | None:
        parts = {*Path(name).parts[:-1], Path(name).stem}
        parts |= {piece for part in list(parts) for piece in re.split(r"[_.\-]", part)}
        hits = sorted(known & parts)
        return hits[0] if len(hits) == 1 else None

    # newest first, so an older evaluation's table of an already found benchmark is never downloaded
    candidates.sort(key=step_of, reverse=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in candidates:
            step, bench = step_of(name), path_benchmark(name)
            if bench is not None and bench in tables and tables[bench][0] >= step:
                continue
            try:
                table = _read_table(_download(client, run_id, name, Path(tmp)))
            except (ValueError, OSError):
                continue
            if not {"n", "c"} <= set(table.columns) or table.empty:
                continue
            if "benchmark" in table.columns:
                for name_in_table, part in table.groupby("benchmark"):
                    keep(str(name_in_table), step, part)
            elif bench is not None:
                keep(bench, step, table)
    return tables


def newest_problem_tables(
    client: MlflowClient, run_id: str, eval_run_ids: Sequence[str], benchmarks: Iterable[str]
) -> dict[str, tuple[int, pd.DataFrame]]:
    """`problem_tables` of a training run and of its standalone evaluation runs (whose tables take
    the `quadrants.checkpoint_step` tag as their step), the newest per benchmark."""
    wanted = set(benchmarks)
    found: dict[str, tuple[int, pd.DataFrame]] = {}
    for source in [run_id, *eval_run_ids]:
        step = (
            int(client.get_run(source).data.tags.get("quadrants.checkpoint_step", -1))
            if source != run_id
            else -1
        )
        for bench, (at, table) in problem_tables(client, source, wanted, step).items():
            if bench not in found or at > found[bench][0]:
                found[bench] = (at, table)
    return found
