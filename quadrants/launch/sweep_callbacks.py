"""Hydra callbacks around a sweep, run in the submitting process.

Before the jobs: build the embedded base policy once if the sweep uses it (so parallel jobs do not
all wait on one build), open the sweep's MLflow parent run and record it in `<sweep dir>/sweep.json`
(the jobs read it there, on this machine or on any node sharing the file system), and print where
the runs go. After the jobs: print a summary table of the sweep's runs, put it on the parent run
(its description) with the analysis report (`analysis/report.html`: table and figures in one page
that MLflow shows inline), close the parent run, and print the links to the runs page, the parent
run and the report.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger("quadrants.sweep")


def _uri(config: DictConfig) -> str:
    if config.tracking.uri:
        return str(config.tracking.uri)
    return f"sqlite:///{Path(config.outputs).expanduser().resolve() / 'mlflow.db'}"


def _sweep_dir(config: DictConfig) -> Path:
    return Path(config.outputs).expanduser().resolve() / config.study / config.sweep_id


def _announce(uri: str) -> None:
    print(f"quadrants: tracking to {uri}", flush=True)


def _print_links(config: DictConfig, uri: str, parent: str | None, *, report: bool = False) -> None:
    """The UI links (the runs link opens the sweep's stored view: tracking/view.py); `report`: the
    parent holds the analysis report, linked directly."""
    from quadrants.tracking.headline import headline_sources
    from quadrants.tracking.links import experiment_id_of, link_lines
    from quadrants.tracking.view import publish_view

    experiment_id = experiment_id_of(uri, str(config.study))
    view = None
    if experiment_id is not None:
        columns = headline_sources(
            dict(config.eval.benchmarks), str(config.task.name), int(config.eval.samples)
        )
        view = publish_view(uri, experiment_id, str(config.sweep_id), columns)
    for line in link_lines(
        uri,
        experiment_id,
        sweep_id=str(config.sweep_id),
        view=view,
        runs={"parent run": parent},
        report_run=parent if report else None,
    ):
        print(line, flush=True)


def _report_on_parent(config: DictConfig, uri: str, parent: str) -> bool:
    """Summary and report on the parent run; whether the report was logged there."""
    from quadrants.launch.sweep_report import report_on_parent

    out = _sweep_dir(config) / "analysis" if config.tracking.report else None
    count = report_on_parent(uri, str(config.study), str(config.sweep_id), parent, out)
    if out is not None:
        print(
            f"quadrants: analysis report ({count} files) in {out}, logged on the parent run",
            flush=True,
        )
    return out is not None and count > 0


def _prepare_model(config: DictConfig) -> None:
    if config.model.name_or_path == "tiny":
        from quadrants.models.loading import load_policy

        load_policy("tiny")  # builds and caches the base policy on first use


_open_parent: tuple[str, str] | None = (
    None  # (tracking URI, run id) of the parent this process opened
)


_sweep_seen: Path | None = None  # the sweep directory of this command (set when it starts)


def report_pending() -> bool:
    """Say which runs of this command's sweep ended with records MLflow has not taken, each with
    its deliver command; True when there are any (the command then exits non-zero)."""
    if _sweep_seen is None:
        return False
    from quadrants.tracking.redeliver import pending_runs
    from quadrants.tracking.setup import deliver_command

    try:
        pending = pending_runs(_sweep_seen)
    except Exception as err:  # noqa: BLE001 - the report never hides the sweep's own end
        log.warning("could not check the runs' tracking spools: %s", err)
        return False
    if not pending:
        return False
    lines = "\n".join(f"  {run.name}: {deliver_command(run)}" for run in pending)
    print(
        f"quadrants: {len(pending)} run(s) of sweep {_sweep_seen.name} ended with records not "
        f"delivered to MLflow (pending; their runs show RUNNING there, steps missing). Send "
        f"them once the store answers:\n{lines}",
        flush=True,
    )
    return True


def _seen(config: DictConfig) -> None:
    global _sweep_seen
    _sweep_seen = _sweep_dir(config)


def close_open_parent(status: str) -> None:
    """End the parent run this process opened and has not closed (a sweep whose launcher failed)."""
    global _open_parent
    if _open_parent is None:
        return
    uri, parent = _open_parent
    _open_parent = None
    try:
        from quadrants.tracking.mlflow_tracker import end_parent_run

        end_parent_run(uri, parent, status)
        log.warning("the sweep ended early: its parent run %s is closed as %s", parent, status)
    except Exception as err:  # noqa: BLE001
        log.warning("could not close the parent run %s: %s", parent, err)


class SweepCallback(Callback):
    """Parent run, base-policy build and summary table around a Hydra run or multirun."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _seen(config)
        _announce(_uri(config))
        _prepare_model(config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._summary(config)
        _print_links(config, _uri(config), None)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _seen(config)
        uri = _uri(config)
        _announce(uri)
        _prepare_model(config)
        sweep_dir = _sweep_dir(config)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        path = sweep_dir / "sweep.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        parent = record.get("parent_run_id")
        try:
            from quadrants.tracking.mlflow_tracker import start_parent_run
            from quadrants.tracking.setup import store_artifact_location

            parent = start_parent_run(
                uri,
                str(config.study),
                str(config.sweep_id),
                {"quadrants.study": str(config.study), "quadrants.sweep_id": str(config.sweep_id)},
                artifact_location=store_artifact_location(uri),
            )
        except Exception as err:  # noqa: BLE001 - tracking trouble never stops a sweep
            log.warning(
                "could not open the sweep's parent run at %s (%s); runs will have no parent",
                uri,
                err,
            )
        else:
            global _open_parent
            _open_parent = (uri, parent)
        record.update(
            {
                "sweep_id": str(config.sweep_id),
                "study": str(config.study),
                "tracking_uri": uri,
                "parent_run_id": parent,
            }
        )
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(path)
        print(f"quadrants: sweep {config.sweep_id} -> {sweep_dir}", flush=True)
        _print_links(config, uri, parent)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from quadrants.launch.local_jobs import stopped_by

        if stopped_by() is not None:  # the jobs checkpointed and stopped: no summary of a half
            print(
                f"quadrants: sweep {config.sweep_id} stopped; run the same command to resume it",
                flush=True,
            )
            return  # the command closes the parent run as KILLED (launch/sweep.py)
        global _open_parent
        _open_parent = None  # closed below, as before
        self._summary(config)
        record_path = _sweep_dir(config) / "sweep.json"
        parent = (
            json.loads(record_path.read_text()).get("parent_run_id")
            if record_path.exists()
            else None
        )
        reported = False
        if parent:
            try:
                reported = _report_on_parent(config, _uri(config), parent)
            except Exception as err:  # noqa: BLE001 - a missing report never fails a finished sweep
                log.warning(
                    "could not put the summary and analysis report on the parent run %s: %s",
                    parent,
                    err,
                )
            try:
                from quadrants.tracking.mlflow_tracker import end_parent_run

                end_parent_run(_uri(config), parent)
            except Exception as err:  # noqa: BLE001
                log.warning("could not close the parent run %s: %s", parent, err)
        _print_links(config, _uri(config), parent, report=reported)

    def _summary(self, config: DictConfig) -> None:
        uri = _uri(config)
        try:
            from quadrants.tracking.summary import sweep_summary

            print(sweep_summary(uri, str(config.study), str(config.sweep_id)), flush=True)
        except Exception as err:  # noqa: BLE001
            log.warning("could not build the sweep summary from %s: %s", uri, err)
        _announce(uri)
