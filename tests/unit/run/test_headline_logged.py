"""The training loop logs the headline keys (final/avg_at_<n>, final/pass_at_<n>, final/entropy)
with its last step only, as copies of that step's full keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from quadrants.config import ObjectiveConfig, RunConfig
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker


@pytest.mark.subprocess
def test_the_last_step_carries_the_headline_keys(tmp_path: Path) -> None:
    cfg = RunConfig(seed=3, run_dir=str(tmp_path / "run"), objective=ObjectiveConfig(name="grpo"))
    cfg.model.name_or_path = "tiny-random"
    cfg.train.steps, cfg.train.prompts_per_step, cfg.rollout.group_size = 2, 2, 2
    cfg.rollout.max_new_tokens = cfg.eval.max_new_tokens = 6
    cfg.train.threads, cfg.tracking.log_samples_every = 1, 0
    cfg.eval.problems, cfg.eval.samples, cfg.eval.every = 2, 2, 0  # held-out split, n = 2
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    logged = dict(tracker.history)
    assert [step for step, _ in tracker.history] == [0, 1, 2]
    assert not any(key.startswith("final/") for key in {**logged[0], **logged[1]})
    last = logged[2]
    assert sorted(k for k in last if k.startswith("final/")) == [
        "final/avg_at_2",
        "final/entropy",
        "final/pass_at_2",
    ]
    assert last["final/avg_at_2"] == round(last["eval/arithmetic/avg_at_2"], 4)
    assert last["final/pass_at_2"] == round(last["eval/arithmetic/pass_at_2"], 4)
    assert last["final/entropy"] == round(last["train/entropy"], 4)  # rounded for the table
