"""Atomic training checkpoints: everything needed to continue a run as if it had never stopped.

A checkpoint holds the model, optimizer and scheduler states, the RNG states, the number of completed
steps (which is also the data position: each step draws its prompts from a seed derived from the step)
and the tracker's run id. It is written to `<run_dir>/checkpoints/step_<n>.tmp` and renamed to
`step_<n>` only when complete, so a job killed mid-write leaves the previous checkpoint intact and a
resume never reads a half-written one. The last `keep` checkpoints are kept.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

log = logging.getLogger("quadrants.checkpoint")

_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """What `load_latest` found: completed steps, the tracker run id, and the raw state."""

    step: int
    run_id: str | None
    state: dict[str, Any]
    path: Path


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    run_id: str | None,
    keep: int = 2,
) -> Path:
    """Write the checkpoint after `step` completed steps atomically; prune older ones. Returns its path."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:07d}"
    tmp = root / f"step_{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    state = {
        "step": step,
        "run_id": run_id,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": _rng_state(),
    }
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
    return final


def load_latest(run_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint under `run_dir`, or None."""
    root = Path(run_dir) / "checkpoints"
    complete = sorted(_complete(root)) if root.exists() else []
    if not complete:
        return None
    step, path = complete[-1]
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
    return Checkpoint(step=step, run_id=state.get("run_id"), state=state, path=path)


def restore(checkpoint: Checkpoint, *, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """Load a checkpoint's states into live objects (model, optimizer, scheduler, RNGs)."""
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
