"""The in-training probe's cadence (run/probing.py): every `probe.every` steps, never the last step
for its own sake, never with `probe.every` 0. The probe itself is replaced by a recorder."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import quadrants.probe.measure as measure
from quadrants.config import RunConfig
from quadrants.run.probing import Probing
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker


@pytest.mark.parametrize(
    ("every", "first", "expected"),
    [
        (3, 0, [3, 6, 9]),  # multiples of 3 up to 10; the last step 10 is not one
        (5, 0, [5, 10]),  # 10 is a multiple
        (0, 0, []),  # never
        (3, 4, [6, 9]),  # resumed after step 4, mid-interval: 5 skipped, 6 due
    ],
)
def test_probed_steps(monkeypatch, every: int, first: int, expected: list[int]) -> None:
    probed: list[int] = []

    def probe_in_training(model, tokenizer, engine, grader, task, settings, dist, step, tracker):
        probed.append(step)
        return {"probe/cmi_mean": float(step)}

    monkeypatch.setattr(measure, "probe_in_training", probe_in_training)
    cfg = RunConfig()
    cfg.probe.every, cfg.train.steps = every, 10
    ctx = SimpleNamespace(
        plan=RunPlan.parse(cfg, files=False),
        model=None,
        tokenizer=None,
        engine=None,
        grader=None,
        task=None,
        dist=None,
    )
    probe = Probing(ctx, RecordingTracker())
    seen = {}
    for step in range(first + 1, 11):
        seen[step] = {}
        probe.maybe(step, seen[step])
    assert probed == expected
    assert {s: m for s, m in seen.items() if m} == {
        s: {"probe/cmi_mean": float(s)} for s in expected
    }
