"""The random control through the loss (train/score.py `draw_control`, objectives/loss.py): with
Horvitz–Thompson weights, the average gradient of many draws on one fixed batch is the full
objective's; without them it is π times it."""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest
import torch

from quadrants.models.loading import load_policy
from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.loss import LossSettings, compute_loss
from quadrants.objectives.registry import known_objectives, resolve_objective
from quadrants.ops.quadrants import Quadrant, QuadrantSettings, RandomControl
from quadrants.train.gradless_rows import rows_with_gradient
from quadrants.train.score import draw_control
from tests.unit.ops.test_random_control import hand_batch
from tests.unit.train.test_accumulate import PARAMS, seeded_batch

DRAWS = 3000


def gradient(name: str, tb, logp0: torch.Tensor, quadrant: QuadrantSettings) -> torch.Tensor:
    """d loss / d logp ([B, T]) of objective `name` on `tb` at log-probs `logp0`."""
    spec, params = resolve_objective(name, {})
    logp = logp0.clone().requires_grad_(True)
    loss, _ = compute_loss(
        spec, params, tb, PolicyOutput(logp=logp), LossSettings(quadrant=quadrant)
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return grad


def mean_gradient(name: str, tb, logp0, control: RandomControl) -> torch.Tensor:
    settings = QuadrantSettings(control=control)
    total = torch.zeros_like(logp0)
    for step in range(DRAWS):
        total += gradient(name, draw_control(tb, settings, seed=0, step=step), logp0, settings)
    return total / DRAWS


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grpo", "dapo"])
@pytest.mark.parametrize(
    ("by_sign", "pi", "target_keep"),
    [
        # one stratum: PHR's 5 of the 15 tokens, pi = 1/3; HT estimates every token's term
        (False, 5 / 15, None),
        # by sign: 5 of the 7 positive tokens, pi = 5/7; the negative stratum is never drawn, so
        # HT estimates the objective over the positive tokens (PHR + PLR) only
        (True, 5 / 7, (Quadrant.PHR, Quadrant.PLR)),
    ],
)
def test_ht_average_gradient_is_the_full_objectives(name, by_sign, pi, target_keep):
    tb = hand_batch()
    # log-probs off the behaviour ones (ratios exp(±0.1), exp(±0.3)), so the clipped surrogate's
    # gradient differs from token to token, some clipped to 0
    offsets = torch.tensor([[0.1, -0.1, 0.3, -0.3]]).expand(4, 4)
    logp0 = (tb.old_logp + offsets) * tb.response_mask
    target = gradient(name, tb, logp0, QuadrantSettings(keep=target_keep))  # [B, T]: c_t
    assert float(target.abs().sum()) > 0
    weighted = mean_gradient(name, tb, logp0, RandomControl((Quadrant.PHR,), by_sign, "ht"))
    plain = mean_gradient(name, tb, logp0, RandomControl((Quadrant.PHR,), by_sign, "none"))
    # Tolerance. The loss is linear in each token's term under the draw-independent normaliser
    # 1/15, so entry t of one draw's gradient is (z_t / pi) c_t, z_t = 1 when t is drawn
    # (P = pi); its variance is c_t^2 (1 - pi) / pi, and the mean of D draws has
    # E ||mean - c||^2 = sum_t c_t^2 (1 - pi) / (pi D) (different draws independent; the
    # covariance between tokens of one draw falls on different entries). With pi = 1/3 and
    # D = 3000 the expected relative error is sqrt(2/3000) = 0.026. ||mean - c||^2 / E[...] is
    # about a chi^2 with <= 15 dof over its dof; 3x the RMS (9x its mean) is beyond its 1e-6 tail,
    # and the draws are seeded, so the check is deterministic.
    rms = math.sqrt(float((target**2).sum()) * (1 - pi) / (pi * DRAWS))
    assert float((weighted - target).norm()) <= 3 * rms
    # unweighted, the control estimates pi times the target (its tokens carry their plain loss)
    assert float((plain - pi * target).norm()) <= 3 * rms * pi
    # and the two are told apart: (1 - pi) ||c|| is 25 (pi = 1/3) or 7 (pi = 5/7) times 3 x rms
    assert float((plain - target).norm()) > 3 * rms


def test_control_draws_per_step_and_weights_only_with_ht():
    tb = hand_batch()
    plain = QuadrantSettings(control=RandomControl((Quadrant.PHR,)))
    ht = QuadrantSettings(control=RandomControl((Quadrant.PHR,), reweight="ht"))
    a, b = draw_control(tb, plain, 0, 4), draw_control(tb, ht, 0, 4)
    assert a.control_weight is None and torch.equal(b.control_weight, tb.response_mask * 3.0)
    assert torch.equal(a.control_mask, b.control_mask)  # the same stream: reweighting draws alike
    assert int(a.control_mask.sum()) == 5
    assert draw_control(tb, QuadrantSettings(keep=(Quadrant.PHR,)), 0, 4) is tb


def test_loss_refuses_a_control_without_its_draw():
    tb = hand_batch()
    spec, params = resolve_objective("grpo", {})
    settings = LossSettings(quadrant=QuadrantSettings(control=RandomControl((Quadrant.PHR,))))
    with pytest.raises(ValueError, match="control_mask is None"):
        compute_loss(spec, params, tb, PolicyOutput(logp=tb.old_logp), settings)


@functools.cache
def model_batch():
    """test_accumulate's 6-row batch from the tiny random policy (built once for the module)."""
    return seeded_batch(load_policy("tiny-random", seed=0)[0])


@pytest.mark.parametrize("objective", known_objectives())
def test_a_control_drawing_the_phr_tokens_is_the_phr_arm(objective):
    """Every registered objective: a control whose draw happens to be exactly the PHR tokens gives
    quadrant=PHR's loss, metrics, gradient and rows with gradient, bit for bit (the control is a
    keep set like any other, under the same normaliser)."""
    batch = model_batch()
    spec, params = resolve_objective(objective, PARAMS.get(objective, {}))
    arm = LossSettings(quadrant=QuadrantSettings(keep=(Quadrant.PHR,)))
    control = LossSettings(quadrant=QuadrantSettings(control=RandomControl((Quadrant.PHR,))))
    controlled = dataclasses.replace(batch, control_mask=batch.quadrants.PHR)
    results = []
    for settings, tb in ((arm, batch), (control, controlled)):
        draws = torch.Generator().manual_seed(0)  # Clip-Cov's draw, the same in both
        logp = (tb.old_logp + 0.05).requires_grad_(True)
        entropy = tb.entropy.clone().requires_grad_(True) if spec.wants_entropy(params) else None
        loss, metrics = compute_loss(
            spec, params, tb, PolicyOutput(logp, entropy), settings, generator=draws
        )
        (grad,) = torch.autograd.grad(loss, logp, allow_unused=True)
        rows = rows_with_gradient(tb, settings, spec, params)
        results.append((loss.detach(), metrics, grad, rows))
    (loss, metrics, grad, rows), (got_loss, got_metrics, got_grad, got_rows) = results
    assert torch.equal(got_loss, loss) and set(got_metrics) == set(metrics)
    assert all(torch.equal(got_metrics[k], v) for k, v in metrics.items())
    assert (grad is None and got_grad is None) or torch.equal(got_grad, grad)
    assert torch.equal(got_rows, rows)
