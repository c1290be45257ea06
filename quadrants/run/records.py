"""What a run records and keeps besides its metrics: run.json (the tracker's run id), the task's
tags and params and its first rendered prompt, the resume from the newest checkpoint, the
checkpoint saves (every `checkpoint.every` steps, on a signal, on a full disk; the optimizer's
states brought back from the host around each), and the stop on a full disk, agreed by every rank.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quadrants.distributed.agreement import raise_on_every_rank
from quadrants.objectives.control import STATE_KEY, restore_state
from quadrants.run.build import Run
from quadrants.run.checkpoint import load_latest, restore, save_checkpoint
from quadrants.run.offload import OptimizerOffload
from quadrants.run.resume_identity import identity_record
from quadrants.tracking.base import Tracker
from quadrants.tracking.disk_full import DiskFullError, is_disk_full

log = logging.getLogger("quadrants.train")


def task_tags(task: Any) -> dict[str, str]:
    """What a dataset task did to its rows, as run tags: `quadrants.decontaminated` (training
    problems dropped as benchmark problems) and `quadrants.skipped_empty`
    (rows without an answer)."""
    return {
        f"quadrants.{name}": str(getattr(task, name))
        for name in ("decontaminated", "skipped_empty")
        if hasattr(task, name)
    }


def log_task(ctx: Run, tracker: Tracker, run_dir: Path | None) -> None:
    """The task's counts as params, and the first training prompt, rendered, as an artifact."""
    task = ctx.task
    info = {"prompt.rendered_format": getattr(getattr(task, "render", None), "format", "raw")}
    for name in ("decontaminated", "skipped_empty", "too_long", "too_long_heldout"):
        if hasattr(task, name):
            info[f"task.{name}"] = getattr(task, name)
    tracker.log_params(info)
    if getattr(task, "decontaminated", 0):
        log.info(
            "task %s: %d training problems dropped as benchmark problems (decontamination)",
            task.name,
            task.decontaminated,
        )
    if run_dir is not None and ctx.dist.is_main:
        (problem,) = task.train_batch(1, random.Random(ctx.plan.seed))
        path = run_dir / "prompt_example.txt"
        path.write_text(problem.prompt)
        tracker.log_artifact(path, "prompt")
        log.info(
            "first training prompt, as the model sees it (%s):\n%s",
            info["prompt.rendered_format"],
            problem.prompt,
        )


def resume(ctx: Run, run_dir: Path | None) -> tuple[int, str | None, dict[int, dict[str, float]]]:
    """(completed steps, known run id, metrics the tracker could not record) from the newest
    checkpoint and run.json in `run_dir`."""
    if run_dir is None:
        return 0, None, {}
    known_id = _read_run_id(run_dir)
    checkpoint = load_latest(run_dir)
    if checkpoint is None:
        return 0, known_id, {}
    restore(checkpoint, model=ctx.model, optimizer=ctx.optimizer, scheduler=ctx.scheduler)
    restore_state(ctx.params, checkpoint.state.get("objective_state"))
    ctx.engine.sync_weights(ctx.model)  # a separate engine (vLLM) still holds the starting weights
    log.info("resumed from %s (step %d)", checkpoint.path, checkpoint.step)
    return (
        checkpoint.step,
        checkpoint.run_id or known_id,
        dict(checkpoint.state.get("unlogged_metrics") or {}),
    )


def _read_run_id(run_dir: Path) -> str | None:
    path = run_dir / "run.json"
    return json.loads(path.read_text()).get("run_id") if path.exists() else None


def write_run_id(run_dir: Path, run_id: str | None) -> None:
    if run_id is not None and _read_run_id(run_dir) != run_id:
        tmp = run_dir / "run.json.tmp"
        tmp.write_text(json.dumps({"run_id": run_id}))
        tmp.replace(run_dir / "run.json")


@contextmanager
def stop_if_disk_full(
    ctx: Run,
    run_dir: Path | None,
    tracker: Tracker,
    step: int,
    metrics: dict[str, float],
    offload: OptimizerOffload | None = None,
) -> Iterator[None]:
    """Recording step `step` (its metrics, samples, checkpoint) ran out of disk: try to checkpoint
    the step with its metrics inside (a resumed run logs them), then stop with one DiskFullError
    naming the path. A re-run with space resumes from the newest checkpoint; MLflow drops what it
    holds.

    Several ranks come here together, since the save is collective: a full disk in rank 0's
    records is raised on every rank by `disk_full_on_any_rank`, and a checkpoint's by DCP itself
    (`dcp.save` gathers every rank's write result and raises one CheckpointException on every
    rank: torch/distributed/checkpoint/state_dict_saver.py `_save_state_dict`, utils.py
    `_DistWrapper.all_reduce`)."""
    try:
        yield
    except Exception as error:
        if not is_disk_full(error):
            raise
        path = _full_path(error, run_dir)
        saved = "checkpoints are off"
        if run_dir is not None and ctx.plan.checkpoint.every:
            try:
                save_step(ctx, run_dir, step, tracker, offload, unlogged_metrics={step: metrics})
                saved = f"step {step} is checkpointed with its metrics"
            except Exception as again:  # noqa: BLE001 - the first error is the one to report
                saved = f"its checkpoint could not be written either ({type(again).__name__})"
        raise DiskFullError(
            path,
            f"stopped at step {step}: {saved}; free space and run the same command again to resume",
        ) from None


@contextmanager
def disk_full_on_any_rank(ctx: Run, run_dir: Path | None) -> Iterator[None]:
    """The block's full disk, raised on every rank when any rank hit it. One process: the block
    as it is, no exchange.

    Several ranks: the block holds what only rank 0 writes (the tracker's metrics, the samples,
    run.json), so a full disk there is rank 0's alone, while the save `stop_if_disk_full` then
    writes is collective. After the block the ranks exchange where their disk was full
    (distributed/agreement.py `raise_on_every_rank`), and every rank leaves it the same way: a rank
    that hit it with its own error, the others with a `DiskFullError` naming that path "on rank r".
    So all of them enter `stop_if_disk_full`'s save together, as one process does, instead of rank 0
    saving while the others wait in the next collective (a hang until the process group's timeout).
    Another error is raised at once, as before (the other ranks then wait in that exchange)."""
    if not ctx.dist.sharded:
        yield
        return
    full: Exception | None = None
    try:
        yield
    except Exception as error:
        if not is_disk_full(error):
            raise
        full = error
    raise_on_every_rank(
        full,
        ctx.dist,
        lambda error: str(_full_path(error, run_dir)),
        lambda rank, path: DiskFullError(f"{path} on rank {rank}"),
    )


def _full_path(error: BaseException, run_dir: Path | None) -> Path | str:
    """The file (or directory) a disk-full `error` names, else the run directory."""
    return getattr(error, "path", None) or getattr(error, "filename", None) or run_dir or "?"


def save_step(
    ctx: Run,
    run_dir: Path,
    step: int,
    tracker: Tracker,
    offload: OptimizerOffload | None,
    **extra: Any,
) -> None:
    """The one way the loop writes a checkpoint (every `checkpoint.every` steps, on a signal, and
    on a full disk): the optimizer's states brought back to the device first when
    train.offload_optimizer keeps them on the host (the full-disk save used to write them without
    that), then `save_checkpoint` with the run's objective state. `extra`: `rng` (a signal's RNG
    states) or `unlogged_metrics` (a full disk's)."""
    with _states_on_device(offload):
        save_checkpoint(
            run_dir,
            step,
            model=ctx.model,
            optimizer=ctx.optimizer,
            scheduler=ctx.scheduler,
            run_id=tracker.run_id,
            keep=ctx.plan.checkpoint.keep,
            objective_state=ctx.params.get(STATE_KEY),
            identity=identity_record(ctx.plan),
            **extra,
        )


def signal_save(ctx: Run, run_dir: Path | None, tracker: Tracker, offload: OptimizerOffload | None):
    """How a SLURM signal / SIGTERM checkpoints the last completed step (None:
    checkpoints are off)."""
    plan = ctx.plan
    if run_dir is None or not plan.checkpoint.every:
        return None

    def save(step: int, rng: Any) -> None:
        save_step(ctx, run_dir, step, tracker, offload, rng=rng)

    return save


def optimizer_offload(ctx: Run) -> OptimizerOffload | None:
    """train.offload_optimizer on an accelerator: the optimizer's states offloaded now (after a
    resume restored them to the device) and between its steps (quadrants/run/offload.py). A run
    whose device resolved to the CPU (train.device=auto without a GPU) has nothing to free."""
    if not ctx.plan.train.offload_optimizer:
        return None
    if ctx.device.type == "cpu":
        log.info("train.offload_optimizer: the states already live in host memory on the CPU")
        return None
    offload = OptimizerOffload(ctx.optimizer, ctx.device)
    offload.offload()
    return offload


@contextmanager
def _states_on_device(offload: OptimizerOffload | None) -> Iterator[None]:
    """The optimizer's states on the training device inside the block (a checkpoint save)."""
    if offload is None:
        yield
    else:
        with offload.loaded():
            yield
