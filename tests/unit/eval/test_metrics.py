"""Avg@k, unbiased Pass@k, its curve, the error bars and the paper's avg column, by hand."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from quadrants.eval.metrics import (
    PAPER_BENCHMARKS,
    avg_at_k,
    avg_at_k_estimate,
    bootstrap_interval,
    curve_ks,
    mean_pass_at_k,
    paper_avg,
    pass_at_k,
    pass_at_k_curve,
    pass_at_k_estimate,
    standard_error_estimate,
)


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


# --- pass@k of one problem ----------------------------------------------------------------------


def test_no_correct_sample_gives_zero():
    assert pass_at_k(8, 0, 1) == 0.0
    assert pass_at_k(8, 0, 8) == 0.0


def test_all_correct_gives_one():
    assert pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 8, 5) == 1.0


def test_k_equal_n_is_one_as_soon_as_one_sample_is_correct():
    # every k-subset is the whole set of n samples
    assert pass_at_k(16, 1, 16) == 1.0
    assert pass_at_k(16, 0, 16) == 0.0


def test_n4_c2_k2():
    # 1 - C(2,2)/C(4,2) = 1 - 1/6: of the 6 pairs of samples only {wrong, wrong} misses
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6, rel=1e-15)


def test_k1_is_the_fraction_correct():
    # 1 - C(n-c,1)/C(n,1) = 1 - (n-c)/n = c/n
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3, rel=1e-15)


def test_n1024_matches_exact_fractions():
    # exact rational value from math.comb; the log-space product must agree to ~1e-15 relative
    for c in (1, 2, 7, 100, 512, 1000, 1023):
        for k in (1, 2, 16, 256, 1000, 1024):
            exact = exact_pass_at_k(1024, c, k)
            assert pass_at_k(1024, c, k) == pytest.approx(float(exact), rel=1e-13, abs=0), (c, k)


def test_tiny_values_keep_relative_precision():
    # n = 4096, c = 1, k = 1: exactly 1/4096; 1 - (1 - 1/4096) would lose ~4 digits to cancellation
    assert pass_at_k(4096, 1, 1) == pytest.approx(1 / 4096, rel=1e-14)
    # n = 100000, c = 3, k = 2 runs without factorials and matches the exact fraction
    assert pass_at_k(100_000, 3, 2) == pytest.approx(
        float(exact_pass_at_k(100_000, 3, 2)), rel=1e-13
    )


def test_k_greater_than_n_is_a_clear_error():
    with pytest.raises(ValueError, match=r"pass@5 needs at least k samples.*n=4"):
        pass_at_k(4, 1, 5)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 1, 0)])
def test_bad_counts_are_errors(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# --- over problems ------------------------------------------------------------------------------


def test_avg_at_k_is_the_mean_of_c_over_n():
    # problems with 1/4, 4/4, 0/4 correct -> (0.25 + 1 + 0) / 3
    assert avg_at_k([4, 4, 4], [1, 4, 0]) == pytest.approx(1.25 / 3, rel=1e-15)


def test_avg_at_k_allows_different_n_per_problem():
    # 1/2 and 3/4 -> 0.625
    assert avg_at_k([2, 4], [1, 3]) == pytest.approx(0.625, rel=1e-15)


def test_mean_pass_at_k_by_hand():
    # n = 4: c = 2, k = 2 -> 5/6; c = 0 -> 0; c = 4 -> 1; mean (5/6 + 0 + 1) / 3 = 11/18
    assert mean_pass_at_k([4, 4, 4], [2, 0, 4], 2) == pytest.approx(11 / 18, rel=1e-15)


def test_pass_at_1_equals_avg_at_k():
    ns, cs = [8, 8, 8, 8], [0, 3, 5, 8]
    assert mean_pass_at_k(ns, cs, 1) == pytest.approx(avg_at_k(ns, cs), rel=1e-15)


def test_mismatched_or_empty_inputs_are_errors():
    with pytest.raises(ValueError, match="2 sample counts but 1 correct"):
        avg_at_k([4, 4], [1])
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], [], 1)


# --- curve --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "ks"),
    [
        (1, [1]),
        (2, [1, 2]),
        (4, [1, 2, 4]),
        (6, [1, 2, 4, 6]),
        (32, [1, 2, 4, 8, 16, 32]),
        (48, [1, 2, 4, 8, 16, 32, 48]),
        (1024, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]),
    ],
)
def test_curve_ks_are_powers_of_two_plus_n(n, ks):
    assert curve_ks(n) == ks


def test_pass_at_k_curve_by_hand():
    # one problem, n = 4, c = 1: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2, pass@4 = 1
    curve = pass_at_k_curve([4], [1])
    assert list(curve) == [1, 2, 4]
    assert curve[1] == pytest.approx(0.25, rel=1e-15)
    assert curve[2] == pytest.approx(0.5, rel=1e-15)
    assert curve[4] == 1.0


def test_curve_stops_at_the_smallest_n():
    # n = 6 and n = 4: k = 6 is not defined for the second problem
    assert list(pass_at_k_curve([6, 4], [1, 1])) == [1, 2, 4]


def test_curve_is_non_decreasing():
    curve = pass_at_k_curve([64] * 5, [0, 1, 5, 30, 64])
    values = list(curve.values())
    assert all(a <= b for a, b in itertools.pairwise(values))


# --- confidence intervals -----------------------------------------------------------------------


def test_standard_error_by_hand():
    # scores 0, 0.25, 0.5, 0.75, 1: mean 0.5, sample variance (0.25+0.0625+0+0.0625+0.25)/4
    # = 0.15625, stderr sqrt(0.15625 / 5) = 0.1767767; 95 % half width 1.959964 * that = 0.3464760
    estimate = standard_error_estimate([0.0, 0.25, 0.5, 0.75, 1.0])
    assert estimate.value == 0.5
    assert estimate.stderr == pytest.approx(0.1767766953, rel=1e-9)
    assert estimate.low == pytest.approx(0.5 - 0.3464759561, rel=1e-9)
    assert estimate.high == pytest.approx(0.5 + 0.3464759561, rel=1e-9)
    assert (estimate.confidence, estimate.num_problems) == (0.95, 5)


def test_interval_is_clipped_to_the_unit_interval():
    # scores 0, 0, 0, 1: mean 0.25, stderr 0.25, half width 0.49 -> low clipped at 0
    estimate = standard_error_estimate([0.0, 0.0, 0.0, 1.0])
    assert estimate.stderr == pytest.approx(0.25, rel=1e-12)
    assert estimate.low == 0.0
    assert estimate.high == pytest.approx(0.25 + 1.959963985 * 0.25, rel=1e-9)


def test_one_problem_has_no_error_bar():
    estimate = standard_error_estimate([0.5])
    assert estimate.value == 0.5 and math.isnan(estimate.stderr) and math.isnan(estimate.low)


def test_metric_estimates_use_per_problem_scores():
    # avg: c/n = 0.25, 0.75 -> mean 0.5, stderr |0.75-0.25| / 2 = 0.25
    avg = avg_at_k_estimate([4, 4], [1, 3])
    assert (avg.value, avg.stderr) == (pytest.approx(0.5), pytest.approx(0.25, rel=1e-12))
    # pass@2: 1 - C(3,2)/C(4,2) = 0.5 and 1 - 0 = 1 -> mean 0.75, stderr 0.25
    pass2 = pass_at_k_estimate([4, 4], [1, 3], 2)
    assert (pass2.value, pass2.stderr) == (pytest.approx(0.75), pytest.approx(0.25, rel=1e-12))


def test_bootstrap_is_seeded_and_brackets_the_mean():
    scores = [0.0, 0.25, 0.5, 0.75, 1.0] * 20
    first = bootstrap_interval(scores, seed=3, num_resamples=2_000)
    assert first == bootstrap_interval(scores, seed=3, num_resamples=2_000)
    low, high = first
    assert low < 0.5 < high
    # 100 problems: the bootstrap and the normal interval agree to within resampling noise
    normal = standard_error_estimate(scores)
    assert low == pytest.approx(normal.low, abs=0.02)
    assert high == pytest.approx(normal.high, abs=0.02)


def test_bootstrap_of_constant_scores_is_a_point():
    assert bootstrap_interval([1.0, 1.0, 1.0], num_resamples=100) == (1.0, 1.0)


def test_bad_confidence_is_an_error():
    with pytest.raises(ValueError, match="confidence"):
        standard_error_estimate([0.5, 0.5], confidence=1.0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_interval([0.5], confidence=0.0)


# --- the paper's avg column ---------------------------------------------------------------------


def test_paper_avg_is_the_mean_of_the_six():
    # GRPO row of the paper's table 1: 34.0, 9.3, 58.6, 79.9, 38.1, 42.8 -> 262.7 / 6 = 43.78
    row = dict(zip(PAPER_BENCHMARKS, [34.0, 9.3, 58.6, 79.9, 38.1, 42.8]))
    assert paper_avg({**row, "gsm8k": 90.0}) == pytest.approx(43.7833333, rel=1e-7)


def test_paper_avg_refuses_a_missing_benchmark():
    row = dict.fromkeys(PAPER_BENCHMARKS[:-1], 0.5)
    with pytest.raises(ValueError, match="missing \\['olympiadbench'\\]"):
        paper_avg(row)
