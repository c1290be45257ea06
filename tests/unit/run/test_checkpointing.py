"""The checkpoints' cadence and the saves before a stop (run/checkpointing.py): every
`checkpoint.every` steps and the last step; a full disk while recording a step saves it with its
metrics and stops; a reward that cannot be computed saves the step unless its regular checkpoint
just did. The saves are replaced by a recorder (they are run/records.py's `save_step`; the real one
under a full disk: test_disk_full_stop.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import quadrants.run.checkpointing as checkpointing
import quadrants.run.records as records
from quadrants.config import RunConfig
from quadrants.run.checkpointing import Checkpointing
from quadrants.run.grading import GradingFailed
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker
from quadrants.tracking.disk_full import DiskFullError


class Saves:
    """Records every save (step, what it carries besides) and every run.json write."""

    def __init__(self, monkeypatch) -> None:
        self.saved: list[tuple[int, dict]] = []
        self.run_ids: list[int] = []  # the steps run.json was written at
        self.step = 0

        def save_step(ctx, run_dir, step, tracker, offload, **extra):
            self.saved.append((step, extra))

        def write_run_id(run_dir, run_id):
            self.run_ids.append(self.step)

        # the loop's saves, and the full-disk stop's own (run/records.py)
        monkeypatch.setattr(checkpointing, "save_step", save_step)
        monkeypatch.setattr(records, "save_step", save_step)
        monkeypatch.setattr(checkpointing, "write_run_id", write_run_id)

    def steps(self) -> list[int]:
        return [step for step, _ in self.saved]


def _checkpoints(run_dir: Path | None, every: int, total: int = 10) -> Checkpointing:
    cfg = RunConfig()
    cfg.checkpoint.every, cfg.train.steps = every, total
    ctx = SimpleNamespace(
        plan=RunPlan.parse(cfg, files=False), dist=SimpleNamespace(sharded=False, is_main=True)
    )
    return Checkpointing(ctx, run_dir, RecordingTracker(), None)


def _record(checkpoints: Checkpointing, saves: Saves, first: int, total: int = 10) -> None:
    for step in range(first + 1, total + 1):
        saves.step = step
        with checkpoints.recording(step, {"train/loss": float(step)}):
            pass


@pytest.mark.parametrize(
    ("every", "first", "expected"),
    [
        (4, 0, [4, 8, 10]),  # multiples of 4 up to 10 (4, 8), then the last step 10
        (5, 0, [5, 10]),  # 10 is a multiple and the last step: saved once
        (1, 0, list(range(1, 11))),  # every step
        (0, 0, []),  # never
        (4, 5, [8, 10]),  # resumed after step 5, mid-interval: 6, 7 skipped, 8 due, 10 last
    ],
)
def test_saved_steps(monkeypatch, tmp_path: Path, every: int, first: int, expected) -> None:
    saves = Saves(monkeypatch)
    checkpoints = _checkpoints(tmp_path, every)
    _record(checkpoints, saves, first)
    assert saves.saved == [(step, {}) for step in expected]
    assert saves.run_ids == expected  # run.json before each save, inside the records
    assert (checkpoints.on_signal is None) == (every == 0)


def test_no_run_directory_no_checkpoints(monkeypatch) -> None:
    saves = Saves(monkeypatch)
    checkpoints = _checkpoints(None, every=4)
    _record(checkpoints, saves, 0)
    assert saves.saved == [] and checkpoints.on_signal is None


@pytest.mark.parametrize(("full_at", "expected"), [(6, [4, 6]), (8, [4, 8])])
def test_a_full_disk_saves_the_step_with_its_metrics_and_stops(
    monkeypatch, tmp_path: Path, full_at: int, expected: list[int]
) -> None:
    """every 4: step 4 saved as usual; the disk fills while step `full_at` is recorded (6: between
    saves; 8: a due step, whose regular save and run.json then do not happen): the stop saves it
    with its metrics inside, and no step after it runs."""
    saves = Saves(monkeypatch)
    checkpoints = _checkpoints(tmp_path, every=4)
    with pytest.raises(DiskFullError, match=rf"stopped at step {full_at}: step {full_at} is"):
        for step in range(1, 11):
            saves.step = step
            with checkpoints.recording(step, {"train/loss": float(step)}):
                if step == full_at:
                    raise DiskFullError(tmp_path / "spool")
    assert saves.steps() == expected
    assert saves.saved[-1] == (full_at, {"unlogged_metrics": {full_at: {"train/loss": full_at}}})
    assert saves.run_ids == [4]


def test_another_error_while_recording_saves_nothing(monkeypatch, tmp_path: Path) -> None:
    saves = Saves(monkeypatch)
    checkpoints = _checkpoints(tmp_path, every=4)
    with pytest.raises(KeyError):
        with checkpoints.recording(8, {}):  # a due step
            raise KeyError("not a full disk")
    assert saves.saved == [] and saves.run_ids == []


@pytest.mark.parametrize(
    ("every", "failed_at", "expected"),
    [
        (4, 6, [4, 6]),  # step 6 has no checkpoint of its own: saved before the stop
        (4, 8, [4, 8]),  # step 8 was just saved by its regular checkpoint: not twice
        (4, 10, [4, 8, 10]),  # the last step, saved as the last
        (0, 6, []),  # checkpoints off: nothing to resume from, nothing saved
    ],
)
def test_a_failed_grade_stops_with_the_step_saved(
    monkeypatch, tmp_path: Path, every: int, failed_at: int, expected: list[int]
) -> None:
    saves = Saves(monkeypatch)
    checkpoints = _checkpoints(tmp_path, every=every)
    with pytest.raises(GradingFailed):
        for step in range(1, 11):
            saves.step = step
            with checkpoints.recording(step, {}):
                pass
            with checkpoints.kept_if_grading_fails(step):
                if step == failed_at:
                    raise GradingFailed(f"step {step}")
    assert saves.steps() == expected


def test_a_step_that_passes_the_grading_guard_saves_nothing_more(monkeypatch, tmp_path) -> None:
    saves = Saves(monkeypatch)
    checkpoints = _checkpoints(tmp_path, every=4)
    with checkpoints.kept_if_grading_fails(6):
        pass
    with pytest.raises(ValueError):
        with checkpoints.kept_if_grading_fails(6):
            raise ValueError("not a grading failure")
    assert saves.saved == []
