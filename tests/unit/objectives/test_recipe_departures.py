"""Archer's and Skywork-OR1's recipes where the suite first departed from them (docs/science.md,
the recipe table): the loss over the nominal mini-batch (`minibatch_scale`), a mini-batch that
keeps no row adding nothing to adaptive_entropy's controller, and the controller holding on a step
without input."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.objectives.batch import PolicyOutput, make_token_batch
from quadrants.objectives.control import STATE_KEY, advance_state, with_initial_state
from quadrants.objectives.loss import LossSettings, compute_loss, mini_batch_normaliser
from quadrants.objectives.registry import resolve_objective
from quadrants.train.update import mean_metrics


def dropped_groups_batch():
    """3 groups x 2 responses, T = 3, full length; rewards [1, 1 | 1, 0 | 0, 0]: groups 0 and 2
    are constant (dropped by dynamic sampling), group 1 is kept with A = +0.5 (row 2), -0.5
    (row 3) (normalize_std=False). Old log-probs -1 everywhere."""
    mask = torch.ones(6, 3, dtype=torch.bool)
    return make_token_batch(
        sequences=torch.zeros(6, 4, dtype=torch.long),
        attention_mask=torch.cat([torch.ones(6, 1, dtype=torch.bool), mask], dim=1),
        response_mask=mask,
        old_logp=torch.full((6, 3), -1.0),
        entropy=torch.full((6, 3), 0.5),
        rewards=torch.tensor([1.0, 1, 1, 0, 0, 0]),
        group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
        normalize_std=False,
    )


def loss_of(name, loss_agg, **params):
    spec, full = resolve_objective(name, params)
    tb = dropped_groups_batch()
    logp = tb.old_logp.clone()
    logp[2] += 0.1  # row 2 at ratio e^0.1 = 1.105 (inside every clip here)
    entropy = tb.entropy.clone()
    settings = LossSettings(loss_agg=loss_agg)
    loss, metrics = compute_loss(spec, full, tb, PolicyOutput(logp, entropy), settings)
    return loss, metrics, spec, full, tb, settings


# The surrogate per token is -A·r: row 2 -0.5·e^0.1 = -0.55259, row 3 +0.5 (ratio 1).
ROW2, ROW3 = -0.5 * math.exp(0.1), 0.5


@pytest.mark.parametrize(
    ("name", "loss_agg", "kept_value"),
    [
        # Archer, seq-mean-token-mean: each kept row's mean, summed: ROW2 + ROW3 = -0.05259; over
        # the 2 kept rows: -0.026295; over the nominal 6 rows: -0.0087649 (kept / nominal = 1/3)
        ("archer", "seq-mean-token-mean", (ROW2 + ROW3) / 2),
        # adaptive_entropy (c0 = 0: no bonus), token-mean over the 6 kept tokens:
        # 3 (ROW2 + ROW3) / 6; nominal: the normaliser 6 tokens x 6 / 2 rows = 18
        ("adaptive_entropy", "token-mean", 3 * (ROW2 + ROW3) / 6),
    ],
)
def test_the_loss_is_over_the_nominal_minibatch_as_the_authors(name, loss_agg, kept_value):
    kept, _, _, _, _, _ = loss_of(name, loss_agg, minibatch_scale="kept")
    nominal, _, spec, full, tb, settings = loss_of(name, loss_agg)  # the default: nominal
    assert float(kept) == pytest.approx(kept_value, rel=1e-6)
    assert float(nominal) == pytest.approx(kept_value * 2 / 6, rel=1e-6)
    # the micro-batch path's normaliser (decomposable objectives) carries the same factor
    normaliser = mini_batch_normaliser(spec, full, tb, settings)
    assert float(normaliser) == pytest.approx(2 * 3 if loss_agg != "token-mean" else 6 * 3)


def test_every_row_kept_changes_nothing():
    spec, full = resolve_objective("archer", {})
    tb = dropped_groups_batch().select(torch.tensor([2, 3]))  # group 1 only: 2 of 2 rows kept
    logp = tb.old_logp + torch.tensor([[0.1], [0.0]])
    settings = LossSettings(loss_agg="seq-mean-token-mean")
    nominal, _ = compute_loss(spec, full, tb, PolicyOutput(logp, tb.entropy), settings)
    _, kept_params = resolve_objective("archer", {"minibatch_scale": "kept"})
    kept, _ = compute_loss(spec, kept_params, tb, PolicyOutput(logp, tb.entropy), settings)
    assert float(nominal) == float(kept)


def test_a_minibatch_without_kept_rows_adds_nothing_to_the_controller():
    """Two mini-batches: {rows 2, 3} keeps group 1 (estimate -mean old log-prob = 1.0), {0, 1, 4,
    5} keeps none. The step's input is 1.0, not (1.0 + 0) / 2 = 0.5 as before."""
    spec, full = resolve_objective("adaptive_entropy", {})
    tb = dropped_groups_batch()
    estimates = []
    for rows in ([2, 3], [0, 1, 4, 5]):
        mini = tb.select(torch.tensor(rows))
        _, metrics = compute_loss(
            spec, full, mini, PolicyOutput(mini.old_logp, mini.entropy), LossSettings()
        )
        estimates.append(metrics)
    assert float(estimates[0]["entropy_estimate"]) == pytest.approx(1.0)
    assert math.isnan(float(estimates[1]["entropy_estimate"]))
    assert mean_metrics(estimates)["entropy_estimate"] == pytest.approx(1.0)


def test_the_controller_holds_without_input():
    spec, full = resolve_objective("adaptive_entropy", {"target": 1.0, "coef_init": 0.002})
    state = with_initial_state(spec, full)
    before = dict(state[STATE_KEY])
    advance_state(spec, state, {}, prefix="o/")  # a skipped step logs no objective metric
    assert state[STATE_KEY] == before
    advance_state(spec, state, {"o/entropy_estimate": 0.5}, prefix="o/")  # below 1.0: +1e-4
    assert state[STATE_KEY] == pytest.approx({"coef": 0.0021, "enabled": 1.0})


@pytest.mark.parametrize(
    ("params", "skips"),
    [
        ({}, True),
        ({"skip_unmixed_steps": False}, False),
        ({"dynamic_sampling": False}, False),  # no group is dropped: nothing to skip on
    ],
)
def test_adaptive_entropy_skips_unmixed_steps_by_default(params, skips):
    spec, full = resolve_objective("adaptive_entropy", params)
    assert spec.skips_unmixed(full) is skips
    archer, archer_params = resolve_objective("archer", {})
    assert not archer.skips_unmixed(archer_params)


@pytest.mark.parametrize("name", ["archer", "adaptive_entropy"])
def test_an_unknown_minibatch_scale_is_refused_naming_the_key(name):
    with pytest.raises(ValueError, match=r"minibatch_scale='rows' is unknown; choose one of"):
        resolve_objective(name, {"minibatch_scale": "rows"})
