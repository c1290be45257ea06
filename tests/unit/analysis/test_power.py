"""The statistics of `python -m analysis power` (quadrants/analysis/power.py) against hand
arithmetic and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from quadrants.analysis import power
from quadrants.eval.metrics import avg_at_k_estimate


def test_sampling_variance_of_avg_is_the_unbiased_binomial_one():
    # (n, c) = (4, 2), (4, 0): per problem c (n - c) / (n² (n - 1)) = 4/48 and 0; over P² = 4 -> 1/48
    assert power.sampling_variance([4, 4], [2, 0], 1) == pytest.approx(1 / 48, rel=1e-12)


def test_sampling_variance_of_pass_at_k_is_the_plug_in_times_n_over_n_minus_1():
    # k = n = 4: the problem scores 1[c > 0]; at p = 2/4, q = 1 - 0.5^4 = 15/16, variance q (1 - q)
    # = 15/256, times 4/3 = 5/64; the unsolved problem adds 0; over P² = 4 -> 5/256
    assert power.sampling_variance([4, 4], [2, 0], 4) == pytest.approx(5 / 256, rel=1e-12)


def test_sampling_variance_refuses_a_problem_with_one_answer():
    with pytest.raises(ValueError, match="n >= 2"):
        power.sampling_variance([1, 4], [1, 2], 1)


def test_the_logged_standard_error_gives_the_same_variance_as_the_counts():
    # the same two problems: Avg = 0.25, scores (0.5, 0) have variance 0.125, se² = 0.125 / 2;
    # P m (1 - m) - (P - 1) P se² = 0.375 - 0.125 = 0.25, over P² (n - 1) = 12 -> 1/48
    assert power.sampling_variance_from_stderr(0.25, math.sqrt(0.0625), 2, 4) == pytest.approx(
        1 / 48, rel=1e-12
    )
    # and on 50 random problems of 8 answers, through the evaluation's own standard error
    rng = np.random.default_rng(0)
    cs = [int(c) for c in rng.integers(0, 9, size=50)]
    estimate = avg_at_k_estimate([8] * 50, cs)
    assert power.sampling_variance_from_stderr(
        estimate.value, estimate.stderr, 50, 8
    ) == pytest.approx(power.sampling_variance([8] * 50, cs, 1), rel=1e-9)


def test_variance_split_of_two_arms_by_hand():
    # PHR (0.50, 0.60), NHR (0.40, 0.46): within-arm squares 2 * 0.05² + 2 * 0.03² = 0.0068 over
    # A (S - 1) = 2 -> 0.0034; paired differences (0.10, 0.14) have variance 0.0008 = 2 MS_resid,
    # so residual 0.0004 and shared 0.0034 - 0.0004 = 0.003; sampling the mean of 0.001, 0.002,
    # 0.003, 0.002 = 0.002, training 0.0034 - 0.002 = 0.0014
    split = power.variance_split(
        {"PHR": {"0": 0.50, "1": 0.60}, "NHR": {"0": 0.40, "1": 0.46}},
        {("PHR", "0"): 0.001, ("PHR", "1"): 0.002, ("NHR", "0"): 0.003, ("NHR", "1"): 0.002},
    )
    assert split.within == pytest.approx(0.0034, abs=1e-15)
    assert split.residual == pytest.approx(0.0004, abs=1e-15)
    assert split.shared == pytest.approx(0.003, abs=1e-15)
    assert split.sampling == pytest.approx(0.002, abs=1e-15)
    assert split.training == pytest.approx(0.0014, abs=1e-15)
    assert split.diff_sd == pytest.approx(math.sqrt(0.0008), rel=1e-12)
    assert split.diff_df == 1


def test_the_residual_is_the_paired_difference_variance_pooled_over_pairs():
    # arms a (1, 2), b (1, 4), c (0, 0): differences a-b (0, -2), a-c (1, 2), b-c (1, 4) have
    # variances 2, 0.5, 4.5, mean 7/3 = 2 MS_resid; the two-way residuals are ±1/6, ±5/6, ±2/3,
    # squares 2 (1 + 25 + 16) / 36 = 7/3 over (3 - 1)(2 - 1) = 2 -> 7/6
    split = power.variance_split(
        {"a": {"0": 1, "1": 2}, "b": {"0": 1, "1": 4}, "c": {"0": 0, "1": 0}}
    )
    assert split.residual == pytest.approx(7 / 6, rel=1e-12)
    assert split.diff_sd**2 == pytest.approx(7 / 3, rel=1e-12)
    assert math.isnan(split.sampling) and math.isnan(split.training)  # no sampling estimates given


@pytest.mark.parametrize(
    "values, message",
    [
        ({"a": {"0": 1.0, "1": 2.0}}, "two arms"),
        ({"a": {"0": 1.0, "1": 2.0}, "b": {"0": 1.0}}, "same seeds"),
        ({"a": {"0": 1.0}, "b": {"0": 1.0}}, "needs 2"),
    ],
)
def test_variance_split_refuses_what_it_cannot_split(values, message):
    with pytest.raises(ValueError, match=message):
        power.variance_split(values)


def test_power_at_no_difference_is_the_level():
    # delta = 0: the statistic is central t, each tail alpha / 2
    assert power.paired_power(0.0, 1.0, 5, 0.05) == pytest.approx(0.05, abs=1e-12)


def test_minimal_detectable_difference_has_the_asked_power_and_the_normal_limit():
    mdd = power.minimal_detectable_difference(1.0, 5)
    assert power.paired_power(mdd, 1.0, 5) == pytest.approx(0.8, abs=1e-9)
    # it scales with sd
    assert power.minimal_detectable_difference(0.02, 5) == pytest.approx(0.02 * mdd, rel=1e-9)
    # many seeds: the t distributions tend to the normal, (z_0.975 + z_0.8) / sqrt(n)
    # = (1.959964 + 0.841621) / 100 at n = 10 000
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert power.minimal_detectable_difference(1.0, 10_000) == pytest.approx(z / 100, rel=1e-3)
    # the textbook (t_0.975 + t_0.8) sd / sqrt(n) is close at 30 seeds, and falls short at 2
    textbook = lambda n: (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) / math.sqrt(n)  # noqa: E731
    assert power.minimal_detectable_difference(1.0, 30) == pytest.approx(textbook(30), rel=1e-3)
    assert power.minimal_detectable_difference(1.0, 2) > 1.1 * textbook(2)


def test_seeds_needed_is_the_first_seed_count_with_enough_power():
    sd, delta = 1.0, 1.0
    needed = power.seeds_needed(sd, delta)
    assert power.paired_power(delta, sd, needed) >= 0.8 > power.paired_power(delta, sd, needed - 1)
    assert power.minimal_detectable_difference(sd, needed) <= delta
    assert power.seeds_needed(0.0, 0.01) == 2  # no spread: two seeds see any difference
    assert power.seeds_needed(1.0, 1e-4) is None  # beyond MAX_SEEDS
    with pytest.raises(ValueError, match="delta must be > 0"):
        power.seeds_needed(1.0, 0.0)
