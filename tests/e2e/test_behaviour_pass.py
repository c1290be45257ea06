"""train.behaviour_pass=auto (old log-probs and entropy recorded by the HF engine while it samples)
against always (the trainer's no-grad recompute), for every registered objective: one step from the
same weights and seed, the warm-started tiny policy, real math-verify rewards.

What may differ is float32 summation order only (token-by-token decoding through a KV cache vs
one forward over the whole sequence). Tolerances: log-probs and entropies atol 1e-5 (they reach
~15 nats, where a float32 ulp is ~1e-6; observed <= 2e-6); the loss and every logged metric atol
1e-5 (observed <= 1e-6), the signed Δ log-prob means rel 1e-4 and the flip fractions only in
range (both below); the quadrant masks and advantages exactly.
"""

from __future__ import annotations

import pytest
import torch

from quadrants.objectives.registry import get_objective, known_objectives
from quadrants.ops.quadrants import Quadrant
from quadrants.rewards.grader import Grader
from quadrants.run.build import build_context
from quadrants.run_plan import RunPlan
from quadrants.train.step import train_step
from tests.flip_metrics import flip_metric_agrees

from .test_objectives_train import small_config


def one_step(objective: str, behaviour_pass: str, **train):
    cfg = small_config(objective)
    cfg.train.behaviour_pass = behaviour_pass
    cfg.train.threads = 1
    for key, value in train.items():
        setattr(cfg.train, key, value)
    torch.manual_seed(cfg.seed)
    with Grader(num_workers=1) as grader:
        ctx = build_context(RunPlan.parse(cfg), grader)
        return train_step(ctx, 0)


@pytest.mark.parametrize("objective", known_objectives())
def test_engine_numbers_give_the_recomputed_step(objective, base_policy):
    recomputed, recorded = one_step(objective, "always"), one_step(objective, "auto")
    a, b = recomputed.batch, recorded.batch
    rollouts = recorded.collected.rollouts
    if get_objective(
        objective
    ).recomputed_old_logp:  # KL-Cov: auto keeps the pass (kl_cov.py says why)
        assert torch.equal(a.old_logp, b.old_logp) and torch.equal(a.entropy, b.entropy)
    else:  # auto used the engine's numbers as they are; always recomputed them (not bit-equal)
        assert torch.equal(b.old_logp, rollouts.behaviour_logp) and torch.equal(
            b.entropy, rollouts.behaviour_entropy
        )
        assert not torch.equal(a.old_logp, b.old_logp)
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.rewards, b.rewards)
    torch.testing.assert_close(b.old_logp, a.old_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(b.entropy, a.entropy, rtol=0, atol=1e-5)
    assert torch.equal(b.advantages, a.advantages)
    for q in Quadrant:
        assert torch.equal(b.quadrants[q], a.quadrants[q]), q
    torch.testing.assert_close(b.quadrants.threshold, a.quadrants.threshold, rtol=0, atol=1e-5)
    torch.testing.assert_close(b.group_entropy_mean, a.group_entropy_mean, rtol=0, atol=1e-5)
    torch.testing.assert_close(b.group_entropy_std, a.group_entropy_std, rtol=0, atol=1e-5)
    assert 0 < float(a.advantages.abs().sum())  # some groups carry signal
    assert set(recomputed.metrics) == set(recorded.metrics)
    for key, value in recomputed.metrics.items():
        if key.startswith("time/"):
            continue
        agrees = flip_metric_agrees(key, recorded.metrics[key], value, 1e-5)
        if agrees is not None:  # tests/flip_metrics.py
            assert agrees, (key, recorded.metrics[key], value)
        else:
            assert recorded.metrics[key] == pytest.approx(value, abs=1e-5), key
