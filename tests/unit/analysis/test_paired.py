"""Paired comparison PHR − NHR on the hand-made study (conftest.py); t = 12.7062... (two seeds)."""

from __future__ import annotations

import math

import pytest

from quadrants.analysis import paired

T1 = math.tan(math.pi * 0.475)


@pytest.fixture(scope="module")
def comparison(study_frames):
    runset, points = study_frames
    return paired.paired_comparison(
        runset.runs, points, "PHR", "NHR", rows=("quadrant",), ks={"aime24": 4, "math500": 4}
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "bench, metric, diffs, mean, half",
    [
        # seed 0, seed 1 differences PHR - NHR
        ("aime24", "avg", (0.10, 0.20), 0.15, T1 * 0.05),  # 0.5-0.4, 0.6-0.4
        ("aime24", "pass", (0.10, 0.00), 0.05, T1 * 0.05),  # 0.8-0.7, 0.9-0.9
        ("math500", "avg", (-0.05, -0.05), -0.05, 0.0),  # 0.7-0.75, 0.8-0.85
        ("math500", "pass", (-0.05, 0.20), 0.075, T1 * 0.125),  # 0.9-0.95, 1.0-0.8
        # per seed, the mean over the two benchmarks: avg (0.10-0.05)/2, (0.20-0.05)/2; pass (0.10-0.05)/2, (0.00+0.20)/2
        ("mean over benchmarks", "avg", (0.025, 0.075), 0.05, T1 * 0.025),
        ("mean over benchmarks", "pass", (0.025, 0.10), 0.0625, T1 * 0.0375),
    ],
)
def test_differences(comparison, bench, metric, diffs, mean, half):
    line = next(li for li in comparison.lines if li.benchmark == bench and li.metric == metric)
    assert line.differences == pytest.approx(diffs, abs=1e-12)
    assert line.estimate.mean == pytest.approx(mean, abs=1e-12)
    assert line.estimate.half_width == pytest.approx(half, abs=1e-12)


def test_markdown_and_wins(comparison):
    text = paired.to_markdown(comparison)
    assert comparison.seeds == ("0", "1") and comparison.notes == ()
    # 15.0 +- 63.5 -> [-48.5, +78.5]; wins: seeds with a positive difference
    assert "| aime24 | Avg@4 | +15.0 | [-48.5, +78.5] | 2/2 |" in text
    assert "| aime24 | Pass@4 | +5.0 | [-58.5, +68.5] | 1/2 |" in text
    assert "| math500 | Avg@4 | -5.0 | [-5.0, -5.0] | 0/2 |" in text


def test_unpaired_seed_and_unknown_row(study_frames):
    runset, points = study_frames
    # PLR ran seed 0 only: one pair, no interval, and the note says so
    result = paired.paired_comparison(
        runset.runs, points, "PHR", "PLR", rows=("quadrant",), ks={"aime24": 4}
    )
    assert result.seeds == ("0",)
    assert result.notes == (
        "seed(s) ['1'] ran for only one of the two methods and are left out",
        "one common seed: differences are shown without an interval",
    )
    line = result.lines[0]
    assert (
        line.estimate.mean == pytest.approx(0.20, abs=1e-12) and not line.estimate.has_ci
    )  # 0.5 - 0.3
    assert "| aime24 | Avg@4 | +20.0 | — (1 seed) | 1/1 |" in paired.to_markdown(result)
    with pytest.raises(
        ValueError, match=r"no row 'GRPO' for --compare; rows are \['NHR', 'PHR', 'PLR'\]"
    ):
        paired.paired_comparison(
            runset.runs, points, "GRPO", "PHR", rows=("quadrant",), ks={"aime24": 4}
        )


def test_the_detectable_column_separates_power_from_the_pairs_own_test():
    # the words of the minimal-detectable column (paired._verdict), by hand:
    # differences 0.10, 0.14 (2 seeds): mean 0.12, sd 0.0283, se 0.02, t(0.975, 1) = 12.706,
    # interval 0.12 ± 0.254 = [-0.134, 0.374] holds 0: below a limit of 0.327 and not told apart
    from quadrants.analysis.paired import _verdict
    from quadrants.analysis.stats import seed_estimate

    assert _verdict(seed_estimate([0.10, 0.14]), 0.327) == "below: not told apart"
    # differences 0.12, 0.14, 0.16, 0.15, 0.17 (5 seeds): mean 0.148, sd 0.01924, se 0.00860,
    # t(0.975, 4) = 2.776, interval 0.148 ± 0.0239 = [0.124, 0.172]: excludes 0, so below a
    # pooled limit of 0.186 it is still told apart
    five = seed_estimate([0.12, 0.14, 0.16, 0.15, 0.17])
    assert abs(five.low - 0.1241) < 1e-3 and abs(five.high - 0.1719) < 1e-3
    assert _verdict(five, 0.186) == "below, interval excludes 0"
    # at or above the limit: reached (sign does not matter)
    assert _verdict(seed_estimate([-0.2, -0.22]), 0.2) == "reached"
