"""Atomic training checkpoints: everything needed to continue a run as if it had never stopped.

A checkpoint holds the model, optimizer and scheduler states, the RNG states, the number of
completed steps (which is also the data position: each step draws its prompts from a seed derived
from the step) and the tracker's run id. It is written to `<run_dir>/checkpoints/step_<n>.tmp` and
renamed to `step_<n>` only when complete, so a job killed mid-write leaves the previous checkpoint
intact and a resume never reads a half-written one. The last `keep` checkpoints are kept.

Model and optimizer states are written with torch.distributed.checkpoint (`model_optim/`, one shard
file per rank, see distributed_checkpoint.py), so a checkpoint resumes with any number of ranks; the
rest (step, run id, scheduler, RNG) is `state.pt`, written by rank 0 last. Older checkpoints that
hold the model in `state.pt` still load.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quadrants.distributed.agreement import on_rank0
from quadrants.distributed.collectives import DistEnv, current
from quadrants.run.distributed_checkpoint import SHARDS_DIR, load_sharded, save_sharded
from quadrants.tracking.disk_full import DiskFullError, is_disk_full

log = logging.getLogger("quadrants.checkpoint")

IDENTITY_FILE = "config.json"  # the run's config record (run/resume_identity.py)
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """What `load_latest` found: completed steps, the tracker run id, and the raw state."""

    step: int
    run_id: str | None
    state: dict[str, Any]
    path: Path


def rng_state() -> dict[str, Any]:
    """This process's RNG states: torch's CPU generator, Python's, and with CUDA every device's
    generator (not run here: no GPU on these machines)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    cuda = state.get("cuda")  # absent in CPU checkpoints and those written before it was kept
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    run_id: str | None,
    keep: int = 2,
    rng: dict[str, Any] | None = None,
    unlogged_metrics: dict[int, dict[str, float]] | None = None,
    objective_state: dict[str, float] | None = None,
    identity: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint after `step` completed steps atomically; prune older
    ones. Returns its path.

    `objective_state`: the objective's state for the next step (objectives/control.py), when it
    has one; a resumed run continues with it. `identity`: the run's config record
    (run/resume_identity.py `identity_record`), kept as `config.json` for a resume to compare
    against.

    `rng`: the RNG states to store (default: the current ones), e.g. those at the end of `step` when
    the process has already gone on into the next step (a checkpoint written on a signal).
    `unlogged_metrics`: step -> metrics the tracker could not record (a full disk); a resumed run
    logs them first. Raises `DiskFullError` naming the checkpoint directory when the disk is full
    (the partial checkpoint is removed)."""
    root = Path(run_dir) / "checkpoints"
    try:
        return _save(
            root,
            step,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            run_id=run_id,
            keep=keep,
            rng=rng,
            unlogged_metrics=unlogged_metrics,
            objective_state=objective_state,
            identity=identity,
        )
    except (
        BaseException
    ) as error:  # torch.distributed.checkpoint's CheckpointException is a BaseException
        if not is_disk_full(error):
            raise
        shutil.rmtree(root / f"step_{step:07d}.tmp", ignore_errors=True)  # give the space back
        if isinstance(error, DiskFullError):  # another rank's, said as such (`_on_rank0`)
            raise
        raise DiskFullError(root) from None


def _save(
    root: Path,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    run_id: str | None,
    keep: int,
    rng: dict[str, Any] | None,
    unlogged_metrics: dict[int, dict[str, float]] | None,
    objective_state: dict[str, float] | None = None,
    identity: dict[str, Any] | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:07d}"
    tmp = root / f"step_{step:07d}.tmp"
    env = current()

    def start() -> None:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()

    def finish() -> None:
        state = {
            "step": step,
            "run_id": run_id,
            "scheduler": scheduler.state_dict(),
            "rng": rng if rng is not None else rng_state(),
            "unlogged_metrics": dict(unlogged_metrics or {}),
        }
        if objective_state is not None:
            state["objective_state"] = dict(objective_state)
        if identity is not None:
            (tmp / IDENTITY_FILE).write_text(json.dumps(identity, indent=1, sort_keys=True))
        with open(tmp / "state.pt", "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():  # a re-run of the same step (after a resume) replaces it
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
        for old in sorted(_complete(root))[:-keep]:
            shutil.rmtree(old[1], ignore_errors=True)

    _on_rank0(start, env, root)
    # every rank writes its shards; a failed write on any rank is raised on every rank
    # (torch/distributed/checkpoint/state_dict_saver.py `_save_state_dict`: the "write" step
    # goes through utils.py `_DistWrapper.all_reduce`, which gathers each rank's result and
    # broadcasts one CheckpointException)
    save_sharded(tmp / SHARDS_DIR, model, optimizer)
    _on_rank0(finish, env, root)
    return final


def _on_rank0(work: Callable[[], None], env: DistEnv, root: Path) -> None:
    """`work` on rank 0 only, then every rank raises if it failed (distributed/agreement.py
    `on_rank0`). In place of a barrier: the ranks exchange rank 0's outcome (one process: no
    exchange), so that a failure there (a full disk under `state.pt`) stops every rank at once
    instead of leaving the others waiting in a barrier that rank 0's next collective would then
    answer. Rank 0 raises its own error; the others a DiskFullError naming `root` for a full disk,
    else a RuntimeError with rank 0's error's repr."""

    def rebuild(_rank: int, said: str) -> Exception:
        if said == "full":
            return DiskFullError(f"{root} on rank 0")
        return RuntimeError(f"rank 0 could not write its part of the checkpoint: {said}")

    on_rank0(work, env, lambda error: "full" if is_disk_full(error) else repr(error), rebuild)


def has_checkpoint(run_dir: Path, step: int) -> bool:
    """Whether a complete checkpoint of `step` exists under `run_dir`."""
    return (Path(run_dir) / "checkpoints" / f"step_{step:07d}" / "state.pt").exists()


def latest_path(run_dir: Path) -> tuple[int, Path] | None:
    """(step, directory) of the newest complete checkpoint under `run_dir`, or None."""
    root = Path(run_dir) / "checkpoints"
    complete = sorted(_complete(root)) if root.is_dir() else []
    return complete[-1] if complete else None


def complete_steps(run_dir: Path) -> list[int]:
    """The steps of every complete checkpoint under `run_dir`, ascending ([] without any)."""
    root = Path(run_dir) / "checkpoints"
    return sorted(step for step, _ in _complete(root)) if root.is_dir() else []


def load_step(run_dir: Path, step: int) -> Checkpoint | None:
    """The complete checkpoint of `step` under `run_dir`, or None."""
    if not has_checkpoint(run_dir, step):
        return None
    path = Path(run_dir) / "checkpoints" / f"step_{step:07d}"
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
    return Checkpoint(step=step, run_id=state.get("run_id"), state=state, path=path)


def load_latest(run_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint under `run_dir`, or None."""
    found = latest_path(run_dir)
    if found is None:
        return None
    step, path = found
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
    return Checkpoint(step=step, run_id=state.get("run_id"), state=state, path=path)


def restore(
    checkpoint: Checkpoint, *, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> None:
    """Load a checkpoint's states into live objects (model, optimizer, scheduler, RNGs)."""
    if (checkpoint.path / SHARDS_DIR).exists():
        load_sharded(
            checkpoint.path / SHARDS_DIR, model, optimizer
        )  # resharded to this run's ranks
    else:
        model.load_state_dict(checkpoint.state["model"])
        optimizer.load_state_dict(checkpoint.state["optimizer"])
    scheduler.load_state_dict(checkpoint.state["scheduler"])
    _set_rng_state(checkpoint.state["rng"])


def _complete(root: Path) -> list[tuple[int, Path]]:
    out = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "state.pt").exists():
            out.append((int(m.group(1)), p))
    return out


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
