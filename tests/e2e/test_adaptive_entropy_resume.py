"""Adaptive entropy control carries its coefficient across steps and through a checkpoint: 3 steps
straight and 2 steps, stop, resume to 3 log the same coefficient and loss at step 3 (CPU, tiny
world). A target far above the tiny policy's entropy keeps the bonus on, so c rises by Δ a step."""

from __future__ import annotations

import pytest
import torch

from quadrants.run.checkpoint import load_latest
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.tracking.base import NullTracker
from tests.worlds import small_world


class Recording(NullTracker):
    def __init__(self) -> None:
        super().__init__()
        self.history: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics, step: int) -> None:
        self.history[step] = dict(metrics)


def run(run_dir, total: int) -> dict[int, dict[str, float]]:
    cfg = small_world(seed=1)
    cfg.objective.name = "adaptive_entropy"
    cfg.objective.params = {"target": 50.0, "delta": 0.01, "coef_max": 1.0}
    cfg.run_dir, cfg.train.steps, cfg.checkpoint.every = str(run_dir), total, 1
    torch.manual_seed(cfg.seed)
    tracker = Recording()
    run_training(RunPlan.parse(cfg), tracker)
    return tracker.history


def test_the_coefficient_survives_a_resume(base_policy, tmp_path):
    straight = run(tmp_path / "straight", 3)
    coef = keys.objective("entropy_coef")
    # c0 0, then +0.01 after each step whose entropy is below 50 (always)
    assert [straight[s][coef] for s in (1, 2, 3)] == pytest.approx([0.0, 0.01, 0.02], abs=1e-9)
    run(tmp_path / "resumed", 2)
    saved = load_latest(tmp_path / "resumed")
    assert saved is not None and saved.state["objective_state"] == pytest.approx(
        {"coef": 0.02, "enabled": 1.0}
    )
    resumed = run(tmp_path / "resumed", 3)
    assert sorted(resumed) == [3]  # only the step after the checkpoint ran
    assert resumed[3][coef] == pytest.approx(0.02, abs=1e-9)
    assert resumed[3][keys.objective("loss")] == pytest.approx(
        straight[3][keys.objective("loss")], abs=1e-6
    )
