"""DAPO dynamic sampling with refill and overlong shaping, end to end on the tiny world (CPU): the
refill logs its rounds and groups, fills the batch with mixed groups when it can, and a resumed run
regenerates the same rounds (every draw is seeded from the step and the round)."""

from __future__ import annotations

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.rewards.grader import Grader
from quadrants.run.build import build_context
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.tracking.base import NullTracker
from quadrants.train.step import train_step
from tests.worlds import small_world


def refill_config(overlong_buffer: int = 0) -> RunConfig:
    cfg = small_world(seed=1)
    cfg.objective.name = "dapo"
    cfg.rollout.refill_rounds = 3
    cfg.rollout.overlong_buffer = overlong_buffer  # of max_new_tokens 48
    return cfg


def steps(cfg: RunConfig, indices: list[int]) -> list[dict[str, float]]:
    torch.manual_seed(cfg.seed)
    with Grader(num_workers=1) as grader:
        ctx = build_context(RunPlan.parse(cfg), grader)
        return [train_step(ctx, index).metrics for index in indices]


def test_refill_trains(base_policy):
    cfg = refill_config()
    first, second = steps(cfg, [0, 1])
    for metrics in (first, second):
        rounds, kept = (
            metrics[keys.train("refill/rounds")],
            metrics[keys.train("refill/groups_kept")],
        )
        assert 0 <= rounds <= 3 and 0 <= kept <= 4
        assert metrics[keys.train("refill/groups_generated")] == 4 * (rounds + 1)
        assert kept == 4 or rounds == 3  # stopped early only with a full batch
        # the batch always holds 4 groups; the objective keeps the mixed ones (dynamic sampling)
        assert metrics[keys.objective("kept_group_frac")] == pytest.approx(kept / 4)
    assert any(m[keys.train("refill/rounds")] > 0 for m in (first, second)), "refill never ran"


class Recording(NullTracker):
    def __init__(self) -> None:
        super().__init__()
        self.history: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics, step: int) -> None:
        self.history[step] = dict(metrics)


def test_refill_is_deterministic_on_resume(base_policy, tmp_path):
    # 2 steps straight vs 1 step, stop, resume to 2: step 2 draws the same refill rounds. With the
    # overlong penalty on (responses past 32 of 48 tokens), which also enters the rewards.
    def run(run_dir, total):
        cfg = refill_config(overlong_buffer=16)
        cfg.run_dir, cfg.train.steps, cfg.checkpoint.every = str(run_dir), total, 1
        tracker = Recording()
        run_training(RunPlan.parse(cfg), tracker)
        return tracker.history

    straight = run(tmp_path / "straight", 2)
    run(tmp_path / "resumed", 1)
    resumed = run(tmp_path / "resumed", 2)
    assert sorted(resumed) == [2]  # only the step after the checkpoint ran
    for key in (
        "refill/rounds",
        "refill/groups_kept",
        "refill/groups_generated",
        "reward_mean",
        "overlong_penalty_mean",
        "response_length",
    ):
        assert resumed[2][keys.train(key)] == straight[2][keys.train(key)], key
    assert resumed[2][keys.objective("loss")] == pytest.approx(
        straight[2][keys.objective("loss")], abs=1e-6
    )
    assert (
        -1.0 <= straight[2][keys.train("overlong_penalty_mean")] < 0.0
    )  # some response was penalised
    # dynamic sampling drops exactly the groups refill did not count as mixed (correctness, not length)
    for metrics in (straight[1], straight[2]):
        assert metrics[keys.objective("kept_group_frac")] == pytest.approx(
            metrics[keys.train("refill/groups_kept")] / 4
        )
