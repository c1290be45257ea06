"""The tests of a paired difference (quadrants/analysis/hypothesis.py): hand-computed values, and
their error rates by simulation with a known answer (TOST's size at the margin, Holm's family-wise
error under the global null)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from quadrants.analysis import hypothesis


def test_paired_t_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, t = 2 / (1/sqrt 3) = 2 sqrt 3; the t distribution with 2
    # degrees of freedom has F(t) = 1/2 + t / (2 sqrt(t^2 + 2)), so p = 1 - t / sqrt(t^2 + 2)
    # = 1 - sqrt(12/14) = 0.074180
    assert hypothesis.paired_t_p([1.0, 2.0, 3.0]) == pytest.approx(1 - math.sqrt(12 / 14), 1e-12)
    assert hypothesis.paired_t_p([0.0, 0.0]) == 1.0  # no difference at all
    assert hypothesis.paired_t_p([0.1, 0.1]) == 0.0  # the same non-zero difference every seed


def test_sign_test_by_hand():
    # every one of 5 seeds ahead: 2 x (1/2)^5 = 0.0625, not below 0.05
    assert hypothesis.sign_test_p([0.3, 0.1, 0.2, 0.5, 0.4]) == pytest.approx(0.0625, abs=1e-15)
    # 4 of 5: 2 x (C(5,4) + C(5,5)) / 32 = 12/32
    assert hypothesis.sign_test_p([0.3, -0.1, 0.2, 0.5, 0.4]) == pytest.approx(0.375, abs=1e-15)
    # a tie is dropped: 2 of 2 non-zero ahead -> 2 x 1/4 = 0.5
    assert hypothesis.sign_test_p([0.1, 0.0, 0.2]) == 0.5
    assert hypothesis.sign_test_p([0.0, 0.0]) == 1.0


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04, 0.2 (m = 4): 4 x 0.01 = 0.04; 3 x 0.03 = 0.09; 2 x 0.04 = 0.08,
    # raised to the running maximum 0.09; 1 x 0.2 = 0.2. Back in input order; NaN not counted.
    got = hypothesis.holm([0.01, 0.04, math.nan, 0.03, 0.2])
    assert got[:2] == pytest.approx([0.04, 0.09]) and math.isnan(got[2])
    assert got[3:] == pytest.approx([0.09, 0.2])
    assert hypothesis.holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1


def test_tost_on_the_toy_studys_phr_minus_all():
    """PHR − all Avg@4 per seed from docs/results.md (points): 86.3-85.5, 90.7-90.2, 84.3-83.0,
    81.8-83.3, 81.5-88.0 = 0.8, 0.5, 1.3, -1.5, -6.5: mean -1.08, sd 3.2137, se 1.4372. Against
    -5: t = 3.92/1.4372 = 2.7275, one-sided p (4 df) 0.0263; against +5: t = -4.2306, p 0.0067.
    TOST p = 0.026, the issue's figure; the 90 % interval -1.08 ± 2.1318 x 1.4372 = [-4.14, +1.98]
    lies inside ±5, the same decision."""
    diffs = [0.8, 0.5, 1.3, -1.5, -6.5]
    p = hypothesis.tost_p(diffs, 5.0)
    assert p == pytest.approx(stats.t.sf(3.92 / (np.std(diffs, ddof=1) / math.sqrt(5)), 4))
    assert round(p, 3) == 0.026
    assert hypothesis.tost_p(diffs, 4.0) > 0.05  # the interval reaches -4.14: not within ±4


def test_a_margin_that_is_not_positive_is_refused():
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"--margin .* pass e\.g\. --margin 0\.05"):
            hypothesis.check_margin(bad)


def _t_pvalues(draws: np.ndarray, popmean: float, alternative: str) -> np.ndarray:
    return stats.ttest_1samp(draws, popmean, axis=-1, alternative=alternative).pvalue


def test_tost_holds_its_size_at_the_margin():
    """True difference exactly at the margin (+1 sd, 5 seeds): TOST may declare equivalence at
    most 5 % of the time. 20,000 draws: the standard error of a 5 % rate is 0.15 %, so the bound is
    checked at 5 % + 3 se. The rate is also well above 0: TOST is not trivially conservative here
    (its size at the boundary is alpha times the chance that the far side also rejects, about
    0.05 x 0.96)."""
    rng = np.random.default_rng(60)
    margin, n, reps = 1.0, 5, 20_000
    draws = rng.normal(margin, 1.0, size=(reps, n))
    # vectorised TOST, checked against the function on the first 200 draws
    p = np.maximum(_t_pvalues(draws, -margin, "greater"), _t_pvalues(draws, margin, "less"))
    assert np.allclose(p[:200], [hypothesis.tost_p(row, margin) for row in draws[:200]])
    rate = float((p < 0.05).mean())
    assert 0.035 < rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    # and its power when the arms are truly equal: equivalence found far more often
    equal = rng.normal(0.0, 0.5, size=(reps, n))
    power = float(
        (np.maximum(_t_pvalues(equal, -margin, "greater"), _t_pvalues(equal, margin, "less"))
         < 0.05).mean()
    )  # fmt: skip
    assert power > 0.5


def test_holm_keeps_the_family_wise_error_rate():
    """Eight true-null comparisons, 5 seeds each, sharing a seed effect (correlated p's, as the
    lines of one table are): rejecting at p < 0.05 unadjusted makes some false claim in about a
    third of the tables; after Holm at most 5 % (+3 se of 5,000 tables = 0.9 %)."""
    rng = np.random.default_rng(61)
    reps, family, n = 5_000, 8, 5
    shared = rng.normal(size=(reps, 1, n))
    draws = 0.6 * shared + 0.8 * rng.normal(size=(reps, family, n))  # correlation 0.36
    p = stats.ttest_1samp(draws, 0.0, axis=-1).pvalue
    unadjusted = float((p < 0.05).any(axis=1).mean())
    adjusted = np.array([hypothesis.holm(row) for row in p])
    fwer = float((adjusted < 0.05).any(axis=1).mean())
    assert unadjusted > 0.2
    assert fwer <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
