"""reward=random in a whole training step on the tiny world (in process): the reward the step trains
on is the draw of the `reward` stream over the verifier's outcomes, the true solve rate is logged
beside it, and a step repeated from the same state draws the same rewards."""

from __future__ import annotations

import random

import pytest
import torch

from quadrants import seeds
from quadrants.config import RunConfig
from quadrants.rewards.confound import training_rewards
from quadrants.rewards.grader import Grader, Outcome
from quadrants.run.build import build_context
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.train.collect import collect_rollouts
from quadrants.train.step import train_step
from tests.worlds import small_world


def random_reward_config() -> RunConfig:
    cfg = small_world(seed=3)
    cfg.reward.name = "random"
    return cfg


@pytest.mark.slow
def test_a_step_trains_on_the_random_reward_and_logs_the_true_solve_rate(base_policy):
    cfg = random_reward_config()
    torch.manual_seed(cfg.seed)
    with Grader(num_workers=0) as grader:
        ctx = build_context(RunPlan.parse(cfg), grader)
        # the collect phase alone, then the whole step from the same state: the step collects
        # the same batch again (every draw is seeded by (seed, step, round))
        first = collect_rollouts(
            ctx.engine,
            grader,
            ctx.task,
            ctx.forwards.placement,
            ctx.collect,
            0,
            pad_id=int(ctx.tokenizer.pad_token_id),
        )
        output = train_step(ctx, 0)
    # the rewards are the stream's Bernoulli draw at p = 0.5 (reward=random's default)
    rng = random.Random(seeds.reward(cfg.seed, 0, 0))
    expected = training_rewards("random", first.outcomes, rng=rng)
    assert first.rewards.tolist() == expected
    assert first.hits is not None and torch.equal(first.hits, first.rewards)
    # the step's own collection draws the same rewards, and its metrics put the two side by side
    collected, metrics = output.collected, output.metrics
    assert collected.rewards.tolist() == expected
    assert [o.value for o in collected.outcomes] == [o.value for o in first.outcomes]
    true_rate = sum(o is Outcome.correct for o in collected.outcomes) / 16
    # the warm tiny policy solves some (8 of 16 at seed 3), so p > 0 and the draw is not all zeros
    assert 0 < true_rate < 1 and 0 < sum(expected) < 16
    assert metrics[keys.train("solve_rate")] == pytest.approx(true_rate)
    assert metrics[keys.train("reward_mean")] == pytest.approx(sum(expected) / 16)
    # the advantages follow the random reward, not the verifier: a group is constant (no
    # advantage) exactly when its four random rewards agree
    advantages = output.batch.advantages.view(4, 4)
    drawn = torch.tensor(expected).view(4, 4)
    constant = (drawn == drawn[:, :1]).all(1)
    assert torch.equal(advantages.abs().sum(1) == 0, constant)
