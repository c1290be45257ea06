"""The set-up the commands that load a run share: `evaluate`, `probe` (a TARGET: a run, a
checkpoint, a model directory, `tiny`, a hub id) and `counterfactual` (a run's checkpoint).

- the command line of a TARGET command (`target_parser`) and its refusal, trimmed as a sweep's
  (`refusal`);
- the CPU threads (`use_threads`) and the answer grader (`grader`) of the command's run plan (its
  configuration, parsed once: quadrants/run_plan);
- the target policy loaded on `train.device`, the CPU tuned for it (`load_policy`);
- the command's own MLflow run (`own_run`): its folder `<outputs>/<study>/<role>/<target>/<UTC
  time>`, its tracker, the parameters and provenance logged first, the files read and the
  results folder logged last, and the run finished FINISHED or FAILED.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quadrants.eval.target import EvalTarget
    from quadrants.rewards.grader import Grader
    from quadrants.run_plan import RunPlan
    from quadrants.tracking.base import Tracker


def target_parser(
    prog: str, description: str, overrides: str, epilog: str | None = None
) -> argparse.ArgumentParser:
    """`PROG TARGET [overrides...] [--cfg]`: the command line of `evaluate` and `probe`
    (`overrides`: the help of the overrides, with an example)."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog)
    parser.add_argument("target", help="run dir | checkpoint dir | model dir | tiny | hub id")
    parser.add_argument("overrides", nargs="*", help=overrides)
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    return parser


def refusal(what: str, err: BaseException) -> str:
    """The message a command exits with when its config or target is refused before anything is
    loaded: Hydra's composition errors without their config search path, and the first line of
    the error's cause where it has one."""
    message = str(err).split("\nConfig search path:")[0].strip()
    if err.__cause__ is not None and str(err.__cause__).strip():
        message += f" ({str(err.__cause__).strip().splitlines()[0]})"
    return f"quadrants: invalid {what}, nothing was generated.\n  {message}"


def use_threads(plan: RunPlan) -> None:
    """`train.threads` (when set) as torch's intra-op threads of this process."""
    import torch

    if plan.train.threads:
        torch.set_num_threads(plan.train.threads)


GRADER_TIMEOUT_S = 5.0
"""Per-answer grading budget of a command (the trainer's grader, run/loop.py, uses the same)."""


def grader(plan: RunPlan) -> Grader:
    """The run's answer grader: `task.grader_workers` processes (0: one per CPU the task holds
    less one), `task.answer_extraction`; a context manager."""
    from quadrants.rewards.grader import Grader, grader_workers

    return Grader(
        num_workers=grader_workers(plan.task.grader_workers),
        timeout_s=GRADER_TIMEOUT_S,
        extraction=plan.task.answer_extraction,
    )


def load_policy(plan: RunPlan, target: EvalTarget) -> tuple[Any, Any]:
    """(model, tokenizer) of `target` in `model.dtype`, on `train.device`, the CPU tuned for it
    (`cpu.tune_for`: nothing unless the device is the CPU)."""
    from quadrants.cpu import tune_for
    from quadrants.device import resolve_device
    from quadrants.eval.target import load_target_policy

    model, tokenizer = load_target_policy(target, dtype=plan.model.dtype, seed=plan.seed)
    device = resolve_device(plan.train.device)
    tune_for(device, plan.train.cpu, [model])
    return model.to(device), tokenizer


def command_dir(plan: RunPlan, target: EvalTarget, role: str) -> Path:
    """``<outputs>/<study>/<role>/<target label>/<UTC time>``: one directory (and MLflow run) per
    command."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    label = "".join(ch if ch.isalnum() or ch in "-_.@=" else "_" for ch in target.label)
    return Path(plan.outputs).expanduser().resolve() / plan.study / role / label / stamp


@contextmanager
def own_run(
    plan: RunPlan,
    target: EvalTarget,
    *,
    role: str,
    doing: str,
    tags: Mapping[str, str],
    params: Mapping[str, Any],
    tracker: Tracker | None = None,
) -> Iterator[tuple[Tracker, Path]]:
    """The command's own MLflow run, named `<role> <target label>`, tagged `tags`: yields (its
    tracker, its folder `command_dir`); the command writes its results under `<folder>/results`.

    Before the body: `train.threads`, the folder, the run started (a line `quadrants: <doing>
    <target> (<kind>); MLflow run <id> at <uri>`), `params` and the environment's provenance
    logged. After it: the files read (the data's provenance) and the results folder (artifacts
    under `<role>`) logged, and the run finished: FAILED when anything raised. Pass `tracker` to
    log elsewhere (tests use `RecordingTracker`); it is started here and left open."""
    from quadrants.tasks.read_log import files_read
    from quadrants.tracking import provenance
    from quadrants.tracking.mlflow_tracker import MlflowTracker
    from quadrants.tracking.setup import artifact_location, tracking_uri

    use_threads(plan)
    directory = command_dir(plan, target, role)
    directory.mkdir(parents=True, exist_ok=True)
    own_tracker = tracker is None
    if tracker is None:
        tracker = MlflowTracker(
            tracking_uri(plan),
            plan.study,
            run_name=f"{role} {target.label}",
            tags=dict(tags),
            spool_dir=directory / "tracking",
            artifact_location=artifact_location(plan),
        )
    run_id = tracker.start()
    if isinstance(tracker, MlflowTracker):
        print(
            f"quadrants: {doing} {target.label} ({target.kind}); MLflow run {run_id} "
            f"at {tracking_uri(plan)}",
            flush=True,
        )
    tracker.log_params(params)
    tracker.log_params(provenance.params(files_read()))
    try:
        yield tracker, directory
        tracker.log_params(provenance.params(files_read(), environment=False))  # the data read
        tracker.log_artifact(directory / "results", role)
    except BaseException:
        if own_tracker:
            tracker.finish("FAILED")
        raise
    if own_tracker:
        tracker.finish("FINISHED")
