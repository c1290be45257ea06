"""More trackers beside MLflow (`tracking.sinks`): TensorBoard event files and a W&B run, fed the
same records as MLflow.

`MirroredTracker` wraps the run's MLflow tracker (tracking/setup.py `make_tracker`): every
`log_params` and `log_metrics` call goes to MLflow's spool first, then, as the same mapping with the
same step, to each sink. A sink never stops training: its first failure is logged once and the sink
is switched off for the rest of the run (MLflow goes on). Artifacts and the run's end go to MLflow
only (a W&B run is ended, a TensorBoard writer closed).

- ``tensorboard``: `torch.utils.tensorboard.SummaryWriter` (needs the `tensorboard` package: pip
  install -e '.[tensorboard]') writing to ``<run_dir>/tensorboard``; every metric a scalar at its
  step, the params one text entry. `tensorboard --logdir outputs/<study>/<sweep_id>` shows the
  sweep's runs side by side. A resumed run re-logs the steps after its last checkpoint; the writer
  is opened with `purge_step` set to the first step this process logs, so TensorBoard drops what an
  earlier process wrote from that step on (torch/utils/tensorboard/writer.py `SummaryWriter`:
  "events whose global_step larger or equal to purge_step will be hidden"): each step shows once.
- ``wandb``: `wandb.init` (pip install -e '.[wandb]') with the run's name, the study as project and
  the sweep id as group, writing under ``<run_dir>/wandb`` (wandb's own directory name). Offline
  unless told otherwise: without a `WANDB_MODE` in the environment the mode is ``offline`` (no
  network at run time; `wandb sync <run_dir>/wandb/offline-run-*` uploads later);
  `WANDB_MODE=online` logs live. The W&B run id is kept in the run directory, so a resumed run
  continues the same W&B run (`resume="allow"`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from quadrants.tracking.base import DelegatingTracker, Tracker

log = logging.getLogger("quadrants.tracking")

# sink name -> (the module it needs, the extra that installs it)
SINKS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}
TENSORBOARD_DIR = "tensorboard"
WANDB_ID_FILE = "wandb_run_id"


def check_sinks(sinks: list[str]) -> None:
    """Compose-time: every name known and its package importable; ValueError naming the key and
    the pip command."""
    import importlib.util

    for name in sinks:
        if name == "mlflow":  # always on; saying so is allowed
            continue
        if name not in SINKS:
            raise ValueError(
                f"tracking.sinks: {name!r} is unknown; choose from {['mlflow', *SINKS]} (MLflow "
                "is always on), e.g. tracking.sinks=[tensorboard]"
            )
        module, extra = SINKS[name]
        if importlib.util.find_spec(module) is None:
            raise ValueError(
                f"tracking.sinks: {name!r} needs the {module} package, which is not installed: "
                f"pip install -e '.[{extra}]' (or pip install {module}), or drop {name} from "
                "tracking.sinks"
            )


class Sink(Protocol):
    def log_params(self, params: Mapping[str, str]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self, status: str) -> None: ...


def flat_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested params flattened with '.', values as text (what MLflow's params hold)."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_params(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


class TensorBoardSink:
    """Scalars and a params table into `<run_dir>/tensorboard` (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._writer: Any = None
        self._params: dict[str, str] = {}

    def _open(self, step: int) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.directory), purge_step=step)
            if self._params:
                self._write_params()
        return self._writer

    def _write_params(self) -> None:
        rows = "\n".join(f"| {k} | {v} |" for k, v in sorted(self._params.items()))
        self._writer.add_text("params", f"| param | value |\n|---|---|\n{rows}", 0)

    def log_params(self, params: Mapping[str, str]) -> None:
        self._params.update(params)
        if self._writer is not None:
            self._write_params()

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        writer = self._open(step)
        for key, value in metrics.items():
            writer.add_scalar(key, float(value), step)
        writer.flush()

    def close(self, status: str) -> None:
        if self._writer is not None:
            self._writer.close()


class WandbSink:
    """A W&B run under `<run_dir>/wandb`, offline unless `WANDB_MODE` says otherwise."""

    def __init__(self, run_dir: Path, *, project: str, name: str, group: str | None) -> None:
        import wandb

        id_file = Path(run_dir) / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        self._run = wandb.init(
            project=project,
            name=name,
            group=group,
            id=run_id,
            resume="allow",
            dir=str(run_dir),  # wandb writes into its wandb/ there
            mode=os.environ.get("WANDB_MODE") or "offline",
        )

    def log_params(self, params: Mapping[str, str]) -> None:
        self._run.config.update(dict(params), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log({k: float(v) for k, v in metrics.items()}, step=step)

    def close(self, status: str) -> None:
        self._run.finish(exit_code=0 if status == "FINISHED" else 1)


def make_sinks(
    names: list[str], run_dir: Path, *, project: str, name: str, group: str | None
) -> dict[str, Sink]:
    """The sinks `tracking.sinks` names (MLflow, always on, is not one of them)."""
    sinks: dict[str, Sink] = {}
    for sink in names:
        if sink == "tensorboard":
            sinks[sink] = TensorBoardSink(Path(run_dir) / TENSORBOARD_DIR)
        elif sink == "wandb":
            sinks[sink] = WandbSink(run_dir, project=project, name=name, group=group)
    return sinks


class MirroredTracker(DelegatingTracker):
    """A `Tracker`: MLflow (the wrapped tracker) first, then the same records to every sink."""

    def __init__(self, tracker: Tracker, sinks: Mapping[str, Sink]) -> None:
        super().__init__(tracker)
        self._sinks = dict(sinks)

    def _each(self, what: str, call: Any) -> None:
        for name, sink in list(self._sinks.items()):
            try:
                call(sink)
            except Exception as error:  # noqa: BLE001 - a second tracker never stops training
                log.warning(
                    "tracking sink %s failed (%s: %s) while logging %s; it is off for the rest of "
                    "this run, MLflow goes on",
                    name,
                    type(error).__name__,
                    error,
                    what,
                )
                del self._sinks[name]

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._tracker.log_params(params)
        flat = flat_params(params)
        self._each("params", lambda sink: sink.log_params(flat))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._tracker.log_metrics(metrics, step)  # raises DiskFullError: the step is not recorded
        self._each(f"step {step}", lambda sink: sink.log_metrics(metrics, step))

    def finish(self, status: str = "FINISHED") -> None:
        try:
            self._tracker.finish(status)
        finally:
            self._each("the end", lambda sink: sink.close(status))
            self._sinks.clear()
