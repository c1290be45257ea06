"""Probe planning: stratified positions with design weights, the cost line, config validation."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from quadrants.config import ProbeConfig, RunConfig
from quadrants.probe.positions import branching_cost, select_positions
from quadrants.run_plan import RunPlan


def test_positions_are_stratified_by_quadrant_and_entropy_with_design_weights():
    # one sequence of 8 tokens: quadrant 0 (PHR) on tokens 0-5, quadrant 3 (NLR) on 6-7; token 5 is
    # not a candidate. PHR entropies [0.1, 0.2, 0.3, 0.4, 0.5] cut into 2 bins at the median 0.3:
    # bin 0 = {0.1, 0.2} (right=True puts 0.3 in bin 1), bin 1 = {0.3, 0.4, 0.5}; NLR's two tokens
    # make two bins of one token each. 4 positions dealt round-robin over the 4 cells: one from each.
    entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 0.01, 0.02]])
    quadrants = torch.tensor([[0, 0, 0, 0, 0, 0, 3, 3]])
    candidates = torch.tensor([[True] * 5 + [False, True, True]])
    out = select_positions(
        entropy,
        quadrants,
        candidates,
        positions=4,
        entropy_bins=2,
        generator=torch.Generator().manual_seed(0),
    )
    tokens = sorted(out.token.tolist())
    assert len(out) == 4 and 5 not in tokens
    assert sum(t in (0, 1) for t in tokens) == 1 and sum(t in (2, 3, 4) for t in tokens) == 1
    assert {6, 7} <= set(tokens)
    # design weights: cell size / drawn = 2, 3, 1, 1 -> they add up to the 7 candidates
    assert sorted(out.weight.tolist()) == [1.0, 1.0, 2.0, 3.0]
    assert out.weight.sum().item() == 7.0
    assert set(out.quadrant.tolist()) == {0, 3} and (out.sequence == 0).all()


def test_asking_for_more_positions_than_candidates_takes_them_all_once():
    entropy = torch.rand(2, 5, generator=torch.Generator().manual_seed(1))
    quadrants = torch.tensor([[0, 1, 2, 3, 0], [1, 1, 2, 2, 3]])
    candidates = torch.ones(2, 5, dtype=torch.bool)
    out = select_positions(
        entropy, quadrants, candidates, positions=50, entropy_bins=3, generator=torch.Generator()
    )
    assert len(out) == 10 and len(set(zip(out.sequence.tolist(), out.token.tolist()))) == 10
    assert (out.weight == 1).all()


def test_cost_counts_rollouts_tokens_and_calls():
    # branches per position [3, 1, 5] x K = 8 -> 72 rollouts, x 48 tokens = 3456; 72 / 32 -> 3 calls
    cost = branching_cost(
        torch.tensor([3, 1, 5]), continuations=8, max_new_tokens=48, batch_size=32
    )
    assert (cost.rollouts, cost.max_tokens, cost.generate_calls) == (72, 3456, 3)
    assert "72 branching rollouts" in cost.line()


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("coverage", 0.0, "(0, 1]"),
        ("continuations", 1, "[2, inf)"),
        ("pseudocount", 0.0, "(0, inf)"),
        ("confidence", 1.0, "(0, 1)"),
        ("branches", 0, "[1, inf)"),
        ("every", -1, "[0, inf)"),
    ],
)
def test_wrong_probe_values_fail_at_validation_naming_the_key(key, value, allowed):
    cfg = RunConfig(probe=replace(ProbeConfig(), **{key: value}))
    with pytest.raises(ValueError) as err:
        RunPlan.parse(cfg)
    assert f"probe.{key}={value}" in str(err.value) and allowed in str(err.value)
