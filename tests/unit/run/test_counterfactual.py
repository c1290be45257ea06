"""The paired one-step counterfactuals on the tiny model (quadrants/run/one_step_arms.py): the
first-order effects of the four quadrant arms add up to the plain objective's, and two arms with the
same mask have the same effects, bit for bit."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.ops.quadrants import Quadrant, RandomControl
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import SamplingSettings
from quadrants.run.build import build_context
from quadrants.run.one_step_arms import (
    FIRST_ORDER,
    GRAD_NORM,
    MEASURED,
    METRICS,
    QUADRANT_ARMS,
    Arm,
    Plan,
    arm_quadrant,
    grad_norm,
    gradient_step,
    run_arms,
    run_quadrant,
)
from quadrants.run_plan import RunPlan

# Tolerance of the additivity. With quadrant.denominator=all_response_tokens the loss of a keep set
# K is Σ_{t in K} ℓ_t / N, N every response token of the mini-batch, so the four quadrant losses
# sum to the plain loss and, autograd being linear, their gradients to its gradient; update_gradient
# takes every arm's mini-batch gradients at the same weights with the same order and draws, so the
# first-order effects −lr g·∇m add up exactly in real arithmetic. What is left is float32 rounding:
# each gradient entry is a float32 sum of its tokens' terms (u = 2^-24 ≈ 6e-8 per operation, and the
# tiny model's reductions run over at most a few thousand terms, so ≲ 1e-4 of the sum of |terms| in
# the worst case, ~sqrt(n)·u ≈ 3e-6 typically), and the dot with ∇m is taken in float64. The
# relative residual |Σ_q e_q − e_all| / (|e_all| + Σ_q |e_q|) therefore lies below 1e-4; measured:
# ≤ 5e-7 here (3.1e-8 to 4.9e-7 over both metrics and batches). A bookkeeping error moves it by a whole term: the same batches with
# quadrant.denominator=kept_tokens (each quadrant divided by its own count) give 0.1 to 1.
ADDITIVITY_TOLERANCE = 1e-4


def small(base_policy: str, **quadrant) -> RunConfig:
    assert base_policy  # built: "tiny" loads it from the cache
    cfg = RunConfig(seed=5)
    cfg.train.prompts_per_step, cfg.rollout.group_size = 4, 4
    cfg.train.mini_batch_size = 8  # two mini-batches a step: the first-order sum spans both
    cfg.train.threads, cfg.train.device = 1, "cpu"
    cfg.objective.name = "grpo"
    for key, value in quadrant.items():
        setattr(cfg.quadrant, key, value)
    return cfg


def outcomes(cfg: RunConfig, arms: list[tuple[str, str]], control=None, update="adam", eta=None):
    """run_arms over `arms` ((label, arm name) pairs), 2 batches, 12 held-out problems x 2."""
    with Grader(num_workers=0) as grader:
        plan = RunPlan.parse(cfg)
        ctx = build_context(plan, grader)
        run = run_quadrant(plan.quadrant_settings)
        built = [Arm(label, arm_quadrant(name, run, control)) for label, name in arms]
        sampling = SamplingSettings(n=2, temperature=1.0, max_new_tokens=48)
        plan = Plan(
            step=3, seed=cfg.seed, batches=2, problems=ctx.task.heldout(12), sampling=sampling,
            chunk=12, update=update, eta=eta,
        )  # fmt: skip
        return run_arms(ctx, built, plan)


@functools.cache
def additive(base_policy: str, denominator: str):
    arms = [(q, q) for q in (*QUADRANT_ARMS, "all")]
    return outcomes(small(base_policy, denominator=denominator), arms)


def relative_residual(effects, metric: str, batch: int) -> float:
    terms = [effects[batch][q][metric] for q in QUADRANT_ARMS]
    full = effects[batch]["all"][metric]
    return abs(math.fsum(terms) - full) / (abs(full) + math.fsum(abs(t) for t in terms))


@pytest.mark.slow
def test_first_order_effects_of_the_quadrants_add_up_to_all(base_policy):
    result = additive(base_policy, "all_response_tokens")
    assert result.correct > 0  # a held-out log-likelihood to move
    for batch in (0, 1):
        for metric in FIRST_ORDER:
            assert abs(result.effects[batch]["all"][metric]) > 0  # not a sum of zeros
            assert relative_residual(result.effects, metric, batch) <= ADDITIVITY_TOLERANCE


@pytest.mark.slow
def test_a_mask_dependent_normaliser_breaks_the_additivity(base_policy):
    """The check can fail: under kept_tokens each quadrant's loss is divided by its own count."""
    result = additive(base_policy, "kept_tokens")
    worst = max(relative_residual(result.effects, m, b) for m in FIRST_ORDER for b in (0, 1))
    assert worst > 1e3 * ADDITIVITY_TOLERANCE


@pytest.mark.slow
def test_two_arms_with_the_same_mask_have_the_same_effects(base_policy):
    """threshold fixed at 0 nats puts every token in the high half, so PHR is every token of
    non-negative advantage; the control matched to PHR per sign draws all of them: the same set.
    PHR twice checks that each arm starts from the restored state."""
    cfg = small(base_policy, threshold="fixed", threshold_value=0.0)
    control = RandomControl((Quadrant.PHR,), match_sign=True)
    arms = [("PHR", "PHR"), ("PHR again", "PHR"), ("random", "random"), ("all", "all")]
    result = outcomes(cfg, arms, control)
    for batch in (0, 1):
        effects = result.effects[batch]
        for metric in METRICS:
            same = [effects[arm][metric] for arm in ("PHR", "PHR again", "random")]
            assert same[0] == same[1] == same[2] or all(math.isnan(v) for v in same), metric
        # and the mask matters: all's first-order effect is another number
        assert effects["all"]["logl_first_order"] != effects["PHR"]["logl_first_order"]


def test_gradient_step_and_norm_by_hand():
    """Two parameters with gradients (3, 0) and (4,): ||g|| = 5. SGD at lr 0.1 moves them by
    -0.3, 0, -0.4; the normalized step of length 1 by -g/5 = -0.6, 0, -0.8 (length 1)."""
    a = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    b = torch.nn.Parameter(torch.tensor([0.5]))
    c = torch.nn.Parameter(torch.tensor([9.0]))  # no gradient: untouched, counts as zero
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert grad_norm([a, b, c]) == 5.0
    gradient_step([a, b, c], 0.1)
    assert torch.allclose(a.detach(), torch.tensor([0.7, 2.0]))
    assert torch.allclose(b.detach(), torch.tensor([0.1])) and c.item() == 9.0
    gradient_step([a, b], 1.0 / grad_norm([a, b]))
    assert torch.allclose(a.detach(), torch.tensor([0.1, 2.0]))
    assert torch.allclose(b.detach(), torch.tensor([-0.7]))


@pytest.mark.slow
def test_the_null_arm_moves_nothing_without_the_optimizer_state(base_policy):
    """Under --update sgd and normalized the null arm (empty keep set) has no gradient, so it
    does not move: every measured effect is exactly 0 (the accuracy is resampled with the same
    seeds from the same weights), its gradient norm 0. PHR's gradient norm is the same in every
    update (it is taken at the checkpoint's weights before the step) and it does move."""
    cfg = small(base_policy)
    arms = [("null", "null"), ("PHR", "PHR")]
    by_update = {u: outcomes(cfg, arms, update=u) for u in ("sgd", "normalized")}
    for update, result in by_update.items():
        for batch in (0, 1):
            null = result.effects[batch]["null"]
            assert all(null[m] == 0.0 for m in (*MEASURED, GRAD_NORM)), (update, null)
            assert result.effects[batch]["PHR"][GRAD_NORM] > 0.0
            assert result.effects[batch]["PHR"]["entropy"] != 0.0
    for batch in (0, 1):
        assert (
            by_update["sgd"].effects[batch]["PHR"][GRAD_NORM]
            == by_update["normalized"].effects[batch]["PHR"][GRAD_NORM]
        )
    # the normalized step's length is lr x ||g_all|| of each batch: one number per batch
    assert set(by_update["normalized"].etas) == {0, 1}
    assert all(eta > 0 for eta in by_update["normalized"].etas.values())
    assert by_update["sgd"].etas == {}
