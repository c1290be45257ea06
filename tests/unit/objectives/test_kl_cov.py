"""KL-Cov: loss_t = -A r_t + coef |logπ - logπ_old| on the top k = max(floor(fraction N), 1) tokens by cov."""

import math

import pytest
import torch

from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.registry import get_objective, resolve_objective

from .helpers import LOG2, close, cov_batch, grad_of, run

# ratio 2 everywhere: |logπ - logπ_old| = log 2; no ratio clip, so every token has gradient.
# cov = [[3, 1, -2], [2, -2, 2]] (see helpers.COV_LOGP); per-token loss = -2 A + log2 * selected
RATIOS = [[2.0] * 4, [2.0] * 4]


@pytest.mark.parametrize(
    "fraction, selected",
    [
        (0.2, [[1, 0, 0], [0, 0, 0]]),  # k = floor(1.2) = 1: cov 3 at (0,0)
        (1e-4, [[1, 0, 0], [0, 0, 0]]),  # k = max(0, 1) = 1
        (0.5, [[1, 0, 0], [1, 0, 1]]),  # k = 3: 3, 2, 2 (next is 1 at (0,1))
        (1.0, [[1, 1, 1], [1, 1, 1]]),  # k = 6
    ],
)
def test_kl_cov_selects_the_top_k_by_covariance(fraction, selected):
    tb, logp = cov_batch(RATIOS)
    spec, params = resolve_objective("kl_cov", {"fraction": fraction})
    out = spec.fn(tb, PolicyOutput(logp=logp), **params)
    sel = torch.tensor(selected, dtype=torch.float32)
    adv = torch.tensor([[2.0] * 3, [-2.0] * 3])
    close(out.per_token_loss[:, :3], -2 * adv + LOG2 * sel)
    close(out.per_token_loss[:, 3], [0.0, 0.0])  # padding
    k = int(sel.sum())
    close(out.metrics["selected_frac"], k / 6)
    close(out.policy_metrics["kl_cov_penalty"].over_rows(None), k * LOG2 / 6)
    close(out.policy_metrics["ratio_mean"].over_rows(None), 2.0)


@pytest.mark.parametrize(
    "fraction, loss_agg, expected",
    [
        # Σ -2A = -12 + 12 = 0, plus k log 2
        (0.2, "token-mean", LOG2 / 6),  # 0.115525
        (0.5, "token-mean", 3 * LOG2 / 6),  # 0.346574
        (0.2, "seq-mean-token-sum", (-12 + LOG2 + 12) / 2),  # 0.346574
    ],
)
def test_kl_cov_loss_by_hand(fraction, loss_agg, expected):
    tb, logp = cov_batch(RATIOS)
    loss, _ = run("kl_cov", tb, logp, loss_agg=loss_agg, fraction=fraction)
    close(loss, expected)


def test_kl_cov_gradient_pattern():
    # d/dlogp = -A r + coef * sign(logp - old) * selected = -2A + selected, / 6
    tb, logp = cov_batch(RATIOS)
    loss, _ = run("kl_cov", tb, logp, fraction=0.5, coef=1.0)
    close(grad_of(loss, logp), [[-3 / 6, -4 / 6, -4 / 6, 0.0], [5 / 6, 4 / 6, 5 / 6, 0.0]])
    tb, logp = cov_batch(RATIOS)
    loss, _ = run("kl_cov", tb, logp, fraction=0.2, coef=0.5)
    close(loss, 0.5 * LOG2 / 6)
    close(grad_of(loss, logp), [[-3.5 / 6, -4 / 6, -4 / 6, 0.0], [4 / 6, 4 / 6, 4 / 6, 0.0]])


@pytest.mark.parametrize(
    "params, pattern",
    [
        ({"fraction": 0.0}, r"fraction=0.0 is out of range; allowed: \(0, 1\]"),
        ({"fraction": 2.0}, r"fraction=2.0 is out of range"),
        ({"coef": -1.0}, r"coef=-1.0 is out of range"),
    ],
)
def test_kl_cov_validation(params, pattern):
    with pytest.raises(ValueError, match=pattern):
        resolve_objective("kl_cov", params)
    assert math.isclose(
        get_objective("kl_cov").defaults()["fraction"], 2e-3
    )  # a fraction, not a percent


def test_kl_cov_is_the_plain_policy_gradient_at_the_first_update():
    # ratio 1 everywhere (logp = old_logp exactly, as on a step's first update): the penalty
    # coef * |logp - old| is 0 and so is its gradient (d|x|/dx = sgn(0) = 0), whatever the
    # selection: d/dlogp = -A r / 6 = -A / 6 with A = +2 / -2, and every selected token is inert
    tb, logp = cov_batch([[1.0] * 4, [1.0] * 4])
    loss, metrics = run("kl_cov", tb, logp, fraction=0.5, coef=1.0)
    close(grad_of(loss, logp), [[-2 / 6, -2 / 6, -2 / 6, 0.0], [2 / 6, 2 / 6, 2 / 6, 0.0]])
    close(metrics["penalty_inert_frac"], 1.0)
    # ratio 2 (a later update): no selected token is inert
    tb, logp = cov_batch(RATIOS)
    _, metrics = run("kl_cov", tb, logp, fraction=0.5)
    close(metrics["penalty_inert_frac"], 0.0)
