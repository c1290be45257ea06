"""The sample artifacts' cadence (run/sample_artifacts.py): every `tracking.log_samples_every`
steps and the last step, on rank 0 of a run with a run directory. The writer is replaced by a
recorder (the records themselves: run/samples.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import quadrants.run.sample_artifacts as sample_artifacts
from quadrants.config import RunConfig
from quadrants.run.sample_artifacts import SampleArtifacts
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker


def _written(monkeypatch, run_dir, *, every: int, first: int, is_main: bool = True):
    """(steps written, the artifacts logged) over steps first+1..10."""
    written: list[int] = []

    def write_samples(path: Path, output, tokenizer, step: int) -> Path:
        written.append(step)
        assert output == f"output of step {step}"
        return path

    monkeypatch.setattr(sample_artifacts, "write_samples", write_samples)
    cfg = RunConfig()
    cfg.tracking.log_samples_every, cfg.train.steps = every, 10
    ctx = SimpleNamespace(
        plan=RunPlan.parse(cfg, files=False), tokenizer=None, dist=SimpleNamespace(is_main=is_main)
    )
    tracker = RecordingTracker()
    samples = SampleArtifacts(ctx, run_dir, tracker)
    for step in range(first + 1, 11):
        samples.maybe(step, f"output of step {step}")
    return written, tracker.artifacts


@pytest.mark.parametrize(
    ("every", "first", "expected"),
    [
        (3, 0, [3, 6, 9, 10]),  # multiples of 3 up to 10, then the last step 10
        (5, 0, [5, 10]),  # 10 is a multiple and the last step: written once
        (0, 0, []),  # never
        (3, 7, [9, 10]),  # resumed after step 7, mid-interval: 8 skipped, 9 due, 10 last
    ],
)
def test_written_steps(monkeypatch, tmp_path: Path, every: int, first: int, expected) -> None:
    written, artifacts = _written(monkeypatch, tmp_path, every=every, first=first)
    assert written == expected
    assert artifacts == [tmp_path / "samples" / f"step_{s:06d}.json" for s in expected]


def test_no_samples_off_rank_0_or_without_a_run_directory(monkeypatch, tmp_path: Path) -> None:
    assert _written(monkeypatch, tmp_path, every=3, first=0, is_main=False) == ([], [])
    assert _written(monkeypatch, None, every=3, first=0) == ([], [])
