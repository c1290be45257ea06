"""The autocorrelation-aware correlation test over steps (analysis/serial.py): by hand on small
series, and its false-positive rate simulated on independent AR(1) series."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quadrants.analysis.serial import (
    ar1_residuals,
    autocorrelations,
    effective_n,
    prewhitened_test,
)


def test_autocorrelations_by_hand():
    # x = [1, 2, 3, 4], mean 2.5, z = [-1.5, -0.5, 0.5, 1.5], Σ z² = 5
    # lag 1: (-1.5)(-0.5) + (-0.5)(0.5) + (0.5)(1.5) = 0.75 - 0.25 + 0.75 = 1.25 -> 0.25
    # lag 2: (-1.5)(0.5) + (-0.5)(1.5) = -1.5 -> -0.3
    assert autocorrelations(np.array([1.0, 2.0, 3.0, 4.0]), 2) == pytest.approx([0.25, -0.3])


def test_ar1_residuals_by_hand():
    # x_{t} = 1 + 2 x_{t-1} exactly for [1, 3, 7, 15]: the fit is exact, every residual 0
    assert ar1_residuals(np.array([1.0, 3.0, 7.0, 15.0])) == pytest.approx([0.0] * 3, abs=1e-9)
    # [0, 1, 0, 1, 0]: pairs (0,1) (1,0) (0,1) (1,0); least squares b = -1, a = 1, exact again
    assert ar1_residuals(np.array([0.0, 1.0, 0.0, 1.0, 0.0])) == pytest.approx([0.0] * 4, abs=1e-9)


def test_effective_n_by_hand():
    # N = 10, lags up to 2; x = y = [1..10]: z = i - 5.5, Σ z² = 82.5
    # lag 1: Σ_{i=1..9} (i-5.5)(i-4.5) = Σ (i² - 10i + 24.75) = 285 - 450 + 222.75 = 57.75 -> 0.7
    # lag 2: Σ_{i=1..8} (i-5.5)(i-3.5) = Σ (i² - 9i + 19.25) = 204 - 324 + 154 = 34 -> 0.41212
    # 1/N* = 1/10 + (2/10)(0.9 · 0.49 + 0.8 · 0.41212²) = 0.1 + 0.2 (0.441 + 0.13588) = 0.21538
    x = np.arange(1.0, 11.0)
    assert autocorrelations(x, 2) == pytest.approx([0.7, 34 / 82.5])
    assert effective_n(x, x) == pytest.approx(1 / 0.215375, rel=1e-4)  # 4.643


def test_prewhitened_test_undefined_on_short_or_constant_series():
    assert math.isnan(prewhitened_test(np.arange(4.0), np.arange(4.0)).p)
    assert math.isnan(prewhitened_test(np.ones(10), np.arange(10.0)).p)


def ar1(phi: float, n: int, pairs: int, rng: np.random.Generator) -> np.ndarray:
    """[pairs, n] stationary AR(1) series with coefficient phi (started from its stationary law)."""
    out = np.empty((pairs, n))
    out[:, 0] = rng.standard_normal(pairs) / math.sqrt(1 - phi * phi)
    for t in range(1, n):
        out[:, t] = phi * out[:, t - 1] + rng.standard_normal(pairs)
    return out


@pytest.mark.slow
def test_false_positive_rate_on_independent_ar1_series():
    # The worst case seen on the tiny runs: lag-1 autocorrelation 0.87 over 30 steps. With M = 2000
    # independent pairs the rejection count at level 0.05 is Binomial(2000, α); if the test keeps
    # its level (α = 0.05) the rate's sd is sqrt(0.05 · 0.95 / 2000) = 0.00487, so 3 sd = 0.0146:
    # the rate must lie in [0.05 - 0.0146, 0.05 + 0.0146] = [0.0354, 0.0646] (a correct test fails
    # this with probability 0.003). The plain test on the raw series is the counter-check: its rate
    # is about 0.37 there, far outside the band, so the simulation can tell a broken test apart.
    rng = np.random.default_rng(20261128)
    pairs, n, phi = 2000, 30, 0.87
    x, y = ar1(phi, n, pairs, rng), ar1(phi, n, pairs, rng)
    tests = [prewhitened_test(x[i], y[i]) for i in range(pairs)]
    rate = np.mean([t.p < 0.05 for t in tests])
    assert 0.0354 <= rate <= 0.0646
    # the plain test: |r| > 0.361 is p < 0.05 at 28 dof (t = 2.048)
    plain = np.mean([abs(t.r) > 0.361 for t in tests])
    assert plain > 0.25


@pytest.mark.slow
def test_power_against_a_contemporaneous_link():
    # y = x + an independent AR(1) of the same law (true correlation 0.71 at every step): the test
    # must find it most of the time at 30 steps (simulated: 99 %); 90 % leaves a wide margin.
    rng = np.random.default_rng(20261129)
    pairs, n, phi = 500, 30, 0.87
    x = ar1(phi, n, pairs, rng)
    y = x + ar1(phi, n, pairs, rng)
    assert np.mean([prewhitened_test(x[i], y[i]).p < 0.05 for i in range(pairs)]) > 0.9
