"""Mean and Student-t interval over seeds, against closed forms."""

from __future__ import annotations

import math

import pytest

from quadrants.analysis.stats import seed_estimate, t_quantile

# closed forms of the t quantile: df=1 is Cauchy, tan(pi (p - 1/2)); df=2 is (2p-1)/sqrt(2p(1-p))
T1 = math.tan(math.pi * 0.475)  # 95 %, one degree of freedom: 12.7062...
T2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # 95 %, two degrees of freedom: 4.3027...


def test_t_quantile_matches_closed_forms():
    assert t_quantile(0.95, 1) == pytest.approx(T1, rel=1e-12)
    assert t_quantile(0.95, 2) == pytest.approx(T2, rel=1e-12)


def test_two_seeds():
    # values 0.5, 0.6: mean 0.55, sd = 0.1/sqrt(2), se = sd/sqrt(2) = 0.05, half-width = T1 * 0.05
    est = seed_estimate([0.5, 0.6])
    assert est.mean == pytest.approx(0.55, abs=1e-15)
    assert est.half_width == pytest.approx(T1 * 0.05, rel=1e-12)
    assert (est.low, est.high) == pytest.approx((0.55 - T1 * 0.05, 0.55 + T1 * 0.05), rel=1e-12)
    assert est.n == 2 and est.has_ci


def test_three_seeds():
    # values 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), half-width T2 / sqrt(3)
    est = seed_estimate([1.0, 2.0, 3.0])
    assert est.mean == 2.0
    assert est.half_width == pytest.approx(T2 / math.sqrt(3), rel=1e-12)


def test_one_seed_has_no_interval():
    est = seed_estimate([0.7])
    assert est.mean == 0.7 and est.n == 1 and not est.has_ci
    assert math.isnan(est.half_width) and math.isnan(est.low) and math.isnan(est.high)


@pytest.mark.parametrize("values, message", [([], "no values"), ([0.1, math.nan], "NaN")])
def test_bad_values(values, message):
    with pytest.raises(ValueError, match=message):
        seed_estimate(values)


def test_bad_confidence():
    with pytest.raises(ValueError, match="confidence"):
        seed_estimate([0.1, 0.2], confidence=1.0)
