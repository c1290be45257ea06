"""A confound reward as a user runs it: `python -m quadrants.sweep -m quadrant=PHR,NHR reward=random`
runs both arms, and each logs the reward it trained on next to the verifier's solve rate, every
step (the rates themselves: tests/unit/train/test_random_reward_step.py)."""

from __future__ import annotations

import pytest

from tests.sweep_store import steps_of, sweep_arms


@pytest.mark.slow
@pytest.mark.integration  # runs the sweep command
def test_the_quadrant_sweep_runs_under_the_random_reward(tmp_path):
    children = sweep_arms(tmp_path, "quadrant=PHR,NHR", "reward=random", "train.steps=2")
    assert sorted(r.data.tags["quadrant"] for r in children) == ["NHR", "PHR"]
    for run in children:
        assert run.data.params["reward"] == "random" and run.data.tags["reward"] == "random"
        for key in ("train/reward_mean", "train/solve_rate"):
            assert steps_of(tmp_path, run.info.run_id, key) == [1, 2], key
