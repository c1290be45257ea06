"""`train.decode_replay_mb` (quadrants/train/replay.py): the step's first update replays the fast
decode's projection outputs; one step with it against one without, from the same weights and seed,
for every registered objective, on the warm-started tiny policy with real math-verify rewards.

The batch is 8 prompts x 4 in mini-batches of 16, so the first mini-batch replays and the second
recomputes (its weights have moved). What may differ is float32 rounding (the decode multiplies one
row per sequence at a time, the recomputed forward all rows at once). Tolerances: every logged
metric atol 1e-5 (the loss, the gradient norm, clip fractions ...; observed ~1e-6), every parameter
after the step within 2e-5 except at most one entry in 10,000, and every entry within one lr-sized
step, 1e-4 (AdamW's first steps move an entry by about lr = 1e-4 times m/√v, so an entry whose
gradient is itself at rounding level, ~1e-9, can move differently in the two runs; observed at most
7.9e-6 on AMD EPYC with oneDNN matmuls, and on an Intel Xeon with torch's matmuls one entry of a
65,536-entry o_proj at 3.0e-5 (dapo) and 2.3e-5 (grpo), every other entry within 2e-5). The gradients themselves are compared at 1e-5 relative
in tests/unit/models/test_replay.py."""

from __future__ import annotations

import pytest
import torch

from quadrants.objectives.registry import get_objective, known_objectives
from quadrants.rewards.grader import Grader
from quadrants.tracking import keys
from quadrants.train.loop import build_context
from quadrants.train.step import train_step

from .test_objectives_train import small_config

REPLAYED = keys.train("decode_replay")


def one_step(objective: str, replay_mb: float, keep: str = "all", micro: int = 0):
    cfg = small_config(objective, keep)
    cfg.train.decode_replay_mb = replay_mb
    cfg.train.micro_batch_size = micro
    cfg.train.threads = 1
    torch.manual_seed(cfg.seed)
    with Grader(num_workers=1) as grader:
        ctx = build_context(cfg, grader)
        out = train_step(ctx, 0)
        return out.metrics, [p.detach().clone() for p in ctx.model.parameters()]


def assert_same_step(plain, replayed):
    (plain_metrics, plain_params), (metrics, params) = plain, replayed
    assert set(metrics) == set(plain_metrics)
    for key, value in plain_metrics.items():
        if not key.startswith("time/") and key != REPLAYED:
            assert metrics[key] == pytest.approx(value, abs=1e-5), key
    for a, b in zip(plain_params, params):
        diff = (b - a).abs()
        # every entry within one lr-sized step (1e-4); beyond 2e-5 at most 1 entry in 10,000 (the
        # rounding-level gradients that AdamW's m/sqrt(v) enlarges; module docstring)
        assert diff.max().item() < 1e-4, diff.max().item()
        assert (diff > 2e-5).sum().item() <= max(1, diff.numel() // 10_000), diff.max().item()


@pytest.mark.parametrize("objective", known_objectives())
def test_replay_gives_the_recomputed_step(objective, base_policy):
    plain, replayed = one_step(objective, 0), one_step(objective, 2048)
    assert plain[0][REPLAYED] == 0.0
    # KL-Cov recomputes its old log-probs with the trainer's forward, so nothing replays
    assert replayed[0][REPLAYED] == float(not get_objective(objective).recomputed_old_logp)
    assert_same_step(plain, replayed)


def test_replay_under_isolation_and_micro_batches(base_policy):
    """quadrant=PHR (rows without a PHR token run without grad, replayed too) with micro-batches of
    4 (each accumulated pass replays its own rows)."""
    plain, replayed = one_step("dapo", 0, "PHR", 4), one_step("dapo", 2048, "PHR", 4)
    assert replayed[0][REPLAYED] == 1.0
    assert_same_step(plain, replayed)


def test_a_budget_below_the_batch_records_nothing(base_policy):
    """0.01 MiB is below the batch's outputs: the step recomputes, bit for bit the plain step."""
    plain, small = one_step("dapo", 0), one_step("dapo", 0.01)
    assert small[0][REPLAYED] == 0.0
    for a, b in zip(plain[1], small[1]):
        assert torch.equal(a, b)
