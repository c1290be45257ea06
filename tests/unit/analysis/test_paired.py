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
    # 15.0 +- 63.5 -> [-48.5, +78.5]; wins: seeds with a positive difference, with the exact
    # sign-test p: 2 of 2 ahead -> 2 x (1/2)^2 = 0.5; 1 of 2 -> 1
    assert "| aime24 | Avg@4 | +15.0 | [-48.5, +78.5] | 2/2 (0.5) |" in text
    assert "| aime24 | Pass@4 | +5.0 | [-58.5, +68.5] | 1/2 (1) |" in text
    # math500 Avg: both differences -0.05: no spread over 2 seeds, so no t-test, TOST or MDD
    assert "| math500 | Avg@4 | -5.0 | [-5.0, -5.0] | 0/2 (0.5) | — | — | — | 0.0 | — | — |" in text
    assert "no spread over the seeds: no test" in text
    assert "reached" not in text


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


def test_every_line_carries_its_own_tests(comparison):
    """aime24 Avg: differences 0.10, 0.20 (2 seeds): mean 0.15, sd 0.0707, se 0.05, t = 3 on 1
    degree of freedom: two-sided p = 1 - 2 atan(3)/pi = 0.2048 (Cauchy). TOST at ±0.05: the
    one-sided t's are (0.15 + 0.05)/0.05 = 4 (p = 1/2 - atan(4)/pi = 0.0780) and
    (0.15 - 0.05)/0.05 = 2 toward +margin (p = 1/2 + atan(2)/pi = 0.8524): the larger, 0.8524.
    Five lines with a spread (math500 Avg has none), one family: Holm multiplies the smallest p
    by 5."""
    line = next(li for li in comparison.lines if li.benchmark == "aime24" and li.metric == "avg")
    assert line.sd == pytest.approx(math.sqrt(0.005), rel=1e-12)
    assert line.t_p == pytest.approx(1 - 2 * math.atan(3) / math.pi, rel=1e-9)
    assert line.tost_p == pytest.approx(0.5 + math.atan(2) / math.pi, rel=1e-9)
    assert line.sign_p == 0.5
    tested = [li for li in comparison.lines if not math.isnan(li.t_p)]
    assert comparison.margin == 0.05 and len(comparison.lines) == 6 and len(tested) == 5
    smallest = min(tested, key=lambda li: li.t_p)
    assert smallest.holm_p == pytest.approx(min(1.0, 5 * smallest.t_p), rel=1e-12)
    assert all(li.holm_p >= li.t_p for li in tested)
    # its own MDD at 2 seeds, from its own sd (analysis.power), and the seeds ±5 points need
    from quadrants.analysis import power

    assert line.detectable == pytest.approx(
        power.minimal_detectable_difference(math.sqrt(0.005), 2), rel=1e-12
    )
    assert line.needed == power.seeds_needed(math.sqrt(0.005), 0.05)


def test_a_margin_that_is_not_positive_is_refused(study_frames):
    runset, points = study_frames
    for margin in (0.0, -0.05, math.nan):
        with pytest.raises(ValueError, match=r"--margin .*must be a positive .*--margin 0\.05"):
            paired.paired_comparison(
                runset.runs, points, "PHR", "NHR", rows=("quadrant",), ks={"aime24": 4},
                margin=margin,
            )  # fmt: skip


def test_the_pooled_figure_is_labelled_a_design_quantity(comparison):
    text = paired.to_markdown(comparison, {("aime24", "avg"): 0.327})
    assert "design MDD (pooled)" in text and "not a test of this pair" in text
    assert "reached" not in text
