"""Coverage per position (probe/coverage.py `per_position`): each position's own coverage, its
distribution, and the positions with zero true credit kept apart."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.probe.coverage import Coverage, per_position, simulate_coverage, summary_text

from .test_real_world_coverage import real_positions


def test_per_position_by_hand():
    """Three worlds, the first two of position 5 (posterior draws of one position), the third of
    position 7; two repetitions. Position 5 covered in 3 of its 4 (world, repetition) pairs: 0.75;
    position 7 in 1 of 2: 0.5. Position 5's worlds have true I 0 (and 1e-13, below ZERO_CREDIT):
    zero credit; position 7 has credit. With credit: one position, minimum 0.5, under 0.8 and
    under 0.6 both 100 %."""
    covered = torch.tensor([[True, False, True], [True, True, False]])
    truth = torch.tensor([0.0, 1e-13, 0.1], dtype=torch.float64)
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    table = per_position(Coverage(truth, zeros, covered, zeros), torch.tensor([5, 5, 7]))
    assert table.position.tolist() == [5, 7]
    assert table.coverage.tolist() == [0.75, 0.5]
    assert table.zero.tolist() == [True, False]
    credit = table.summary("credit")
    assert credit["positions"] == 1 and credit["minimum"] == 0.5
    assert credit["under_0_8"] == 1.0 and credit["under_0_6"] == 1.0
    assert table.summary("zero")["minimum"] == 0.75
    everything = table.summary("all")
    assert everything["positions"] == 2 and everything["mean"] == 0.625
    assert math.isnan(per_position(Coverage(truth[2:], zeros[:, 2:], covered[:, 2:], zeros[:, 2:]),
                                   torch.tensor([7])).summary("zero")["minimum"])  # fmt: skip
    assert "zero true credit: 1 positions" in summary_text(table)


@pytest.mark.slow
def test_the_starting_policys_zero_credit_positions_are_covered_for_free():
    """On the fixture's 48 starting-policy positions (observed frequencies as the truth), 16 have
    true credit exactly 0 (every branch ended alike in all 64 continuations; a 17th has 2.5e-7
    nats). The interval, clipped at 0, covers each of them in every repetition, so they lift the
    pooled coverage; the positions with credit are what the interval is for."""
    positions = real_positions("tiny")
    worlds = positions.frequencies()
    cov = simulate_coverage(
        worlds, continuations=16, repetitions=8, generator=torch.Generator().manual_seed(16)
    )
    table = per_position(cov, worlds.position)
    assert int(table.zero.sum()) == 16 and table.coverage.numel() == 48
    assert bool((table.coverage[table.zero] == 1.0).all())
    credit = table.summary("credit")
    assert credit["positions"] == 32
    # pooled over all 48, the free coverage of the zero positions counts a third of the weight
    pooled = float(cov.covered.double().mean())
    assert pooled == pytest.approx((16 * 1.0 + 32 * credit["mean"]) / 48, abs=1e-12)
    assert credit["mean"] < pooled
