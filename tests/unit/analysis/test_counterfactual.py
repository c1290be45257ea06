"""The counterfactual table by hand (quadrants/analysis/counterfactual_table.py): per-arm effects and
paired differences with their t-intervals over batches, and the additivity bookkeeping."""

from __future__ import annotations

import math

import pytest

from quadrants.analysis.counterfactual_table import (
    additivity,
    arm_lines,
    difference_lines,
    to_frame,
    to_text,
)

# three batches; PHR's effect 1, 2, 3 and the control's 0.5, 2.5, 2 on metric m
EFFECTS = {
    0: {"PHR": {"m": 1.0}, "random": {"m": 0.5}},
    1: {"PHR": {"m": 2.0}, "random": {"m": 2.5}},
    2: {"PHR": {"m": 3.0}, "random": {"m": 2.0}},
}
T_975_2 = 4.302652729911275  # Student t, 2 degrees of freedom, 97.5th percentile


def test_each_arm_has_its_mean_and_t_interval_over_batches():
    phr, control = arm_lines(EFFECTS, ["PHR", "random"], ["m"])
    # PHR: mean 2, sample sd 1 (deviations -1, 0, 1: (1 + 0 + 1) / 2 = 1), half = t * 1 / sqrt(3)
    assert phr.values == (1.0, 2.0, 3.0)
    assert phr.estimate.mean == pytest.approx(2.0)
    assert phr.estimate.half_width == pytest.approx(T_975_2 / math.sqrt(3))  # 2.484
    # random: mean 5/3, deviations -7/6, 5/6, 1/3: squares 49/36 + 25/36 + 4/36 = 78/36, / 2
    assert control.estimate.mean == pytest.approx(5 / 3)
    sd = math.sqrt(78 / 36 / 2)  # 1.0408
    assert control.estimate.half_width == pytest.approx(T_975_2 * sd / math.sqrt(3))  # 2.586


def test_the_difference_is_paired_batch_by_batch():
    (line,) = difference_lines(EFFECTS, ["PHR", "random"], "random", ["m"])
    # per batch 1 - 0.5, 2 - 2.5, 3 - 2: 0.5, -0.5, 1; mean 1/3; deviations 1/6, -5/6, 2/3:
    # squares (1 + 25 + 16) / 36 = 7/6, / 2 = 7/12
    assert line.arm == "PHR − random"
    assert line.values == pytest.approx((0.5, -0.5, 1.0))
    assert line.estimate.mean == pytest.approx(1 / 3)
    assert line.estimate.half_width == pytest.approx(T_975_2 * math.sqrt(7 / 12) / math.sqrt(3))
    # the unpaired intervals (2.48 and 2.59 wide halves) would be far wider than this 1.90
    assert line.estimate.half_width == pytest.approx(1.897, abs=1e-3)


def test_a_missing_value_has_no_interval():
    effects = {0: {"PHR": {"m": math.nan}}, 1: {"PHR": {"m": 1.0}}}
    (line,) = arm_lines(effects, ["PHR"], ["m"])
    assert line.estimate is None
    frame = to_frame([line])
    assert math.isnan(frame.loc[0, "mean"]) and frame.loc[0, "n"] == 2
    assert "nan" in to_text([line], ["m"], 0.95, "Δ")


def test_additivity_bookkeeping():
    effects = {
        # 1 + 2 + 3 + 4 = 10 against 10.5: residual -0.5, relative 0.5 / (10.5 + 10) = 0.02439
        0: {"PHR": {"m": 1.0}, "PLR": {"m": 2.0}, "NHR": {"m": 3.0}, "NLR": {"m": 4.0},
            "all": {"m": 10.5}},
        # -1 + 1 + 0.5 + 0.5 = 1 against 1: residual 0
        1: {"PHR": {"m": -1.0}, "PLR": {"m": 1.0}, "NHR": {"m": 0.5}, "NLR": {"m": 0.5},
            "all": {"m": 1.0}},
    }  # fmt: skip
    check = additivity(effects, "m")
    assert check.sums == (10.0, 1.0) and check.alls == (10.5, 1.0)
    assert check.residuals == (-0.5, 0.0)
    assert check.relative == pytest.approx((0.5 / 20.5, 0.0))
    assert check.worst == pytest.approx(0.024390, abs=1e-6)


def test_additivity_needs_the_four_quadrants_and_all():
    with pytest.raises(ValueError, match=r"missing \['PLR', 'NHR', 'NLR', 'all'\]"):
        additivity(EFFECTS, "m")


def test_the_frame_keeps_every_batch():
    frame = to_frame(arm_lines(EFFECTS, ["PHR"], ["m"]))
    assert list(frame.columns) == [
        "arm", "metric", "mean", "half_width", "low", "high", "n", "batch_0", "batch_1", "batch_2",
    ]  # fmt: skip
    assert frame.loc[0, "low"] == pytest.approx(2.0 - T_975_2 / math.sqrt(3))
