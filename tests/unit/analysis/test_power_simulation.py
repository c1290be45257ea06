"""Simulated studies with known variances: `power.variance_split` recovers them, the per-problem
sampling variance matches re-evaluating one policy, and the minimal detectable difference has the
power it claims. Every tolerance is derived in a comment from the number of simulated studies."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from quadrants.analysis import power

STUDIES = 4000
ARMS, SEEDS = 3, 5
SHARED, OWN, SAMPLING = 0.004, 0.002, 0.001  # sigma_b², sigma_w², sigma_e² of the model
SAMPLING_DOF = 50  # each run's own sampling estimate is sigma_e² chi²_50 / 50 (unbiased, noisy)


def _studies(rng: np.random.Generator) -> list[power.VarianceSplit]:
    """y[a, s] = mu[a] + b[s] + w[a, s] + e[a, s] for every simulated study, split."""
    splits = []
    mu = np.array([0.5, 0.45, 0.4])
    for _ in range(STUDIES):
        y = (
            mu[:, None]
            + rng.normal(0, math.sqrt(SHARED), SEEDS)[None, :]
            + rng.normal(0, math.sqrt(OWN), (ARMS, SEEDS))
            + rng.normal(0, math.sqrt(SAMPLING), (ARMS, SEEDS))
        )
        own = SAMPLING * rng.chisquare(SAMPLING_DOF, (ARMS, SEEDS)) / SAMPLING_DOF
        arms, seeds = [f"a{i}" for i in range(ARMS)], [str(s) for s in range(SEEDS)]
        splits.append(
            power.variance_split(
                {a: {s: y[i, j] for j, s in enumerate(seeds)} for i, a in enumerate(arms)},
                {(a, s): own[i, j] for i, a in enumerate(arms) for j, s in enumerate(seeds)},
            )
        )
    return splits


@pytest.mark.slow
def test_variance_components_are_recovered():
    splits = _studies(np.random.default_rng(7))
    mean = {
        name: float(np.mean([getattr(s, name) for s in splits]))
        for name in ("within", "residual", "sampling", "training", "shared")
    }
    total = SHARED + OWN + SAMPLING
    # Standard errors of the means over STUDIES = 4000 studies, from each estimator's sampling law:
    # - residual: the two-way residual removes the arm and seed effects exactly, so
    #   MS_resid (A-1)(S-1) / (sigma_w² + sigma_e²) is chi² with 8 df: Var = 2 (0.003)² / 8, and the
    #   mean's se = 0.003 sqrt(2 / (8 * 4000)) = 2.37e-5;
    # - within: the mean over A arms of their variances over S seeds, each 2 total² / (S-1) in
    #   variance and positively correlated through the shared b[s], so at most that:
    #   se <= 0.007 sqrt(2 / (4 * 4000)) = 7.83e-5;
    # - sampling: the mean of A S = 15 estimates sigma_e² chi²_50 / 50: se = 0.001
    #   sqrt(2 / (50 * 15 * 4000)) = 8.2e-7;
    # - training = within - sampling, shared = within - residual: se at most the sum of theirs.
    # Four standard errors each (a false alarm about once in 15 000 per check; the draw is seeded).
    se_residual = (OWN + SAMPLING) * math.sqrt(2 / ((ARMS - 1) * (SEEDS - 1) * STUDIES))
    se_within = total * math.sqrt(2 / ((SEEDS - 1) * STUDIES))
    se_sampling = SAMPLING * math.sqrt(2 / (SAMPLING_DOF * ARMS * SEEDS * STUDIES))
    assert mean["residual"] == pytest.approx(OWN + SAMPLING, abs=4 * se_residual)
    assert mean["within"] == pytest.approx(total, abs=4 * se_within)
    assert mean["sampling"] == pytest.approx(SAMPLING, abs=4 * se_sampling)
    assert mean["training"] == pytest.approx(SHARED + OWN, abs=4 * (se_within + se_sampling))
    assert mean["shared"] == pytest.approx(SHARED, abs=4 * (se_within + se_residual))
    # the tolerances are tight enough to see a wrong denominator: ddof 0 instead of 1 would give
    # within * 4/5, off by 0.0014 = 18 se
    assert 4 * se_within < total / 5


@pytest.mark.slow
def test_sampling_variance_matches_re_evaluating_one_policy():
    # one fixed policy on P = 20 problems with rates p_i, n = 8 answers each, evaluated M = 4000
    # times: Avg@8 has the true variance V = sum p (1 - p) / (n P²)
    rng = np.random.default_rng(3)
    p = np.linspace(0.05, 0.95, 20)
    n, draws = 8, 4000
    true = float((p * (1 - p)).sum() / (n * len(p) ** 2))
    counts = rng.binomial(n, p, size=(draws, len(p)))
    estimates = np.array([power.sampling_variance([n] * len(p), list(c), 1) for c in counts])
    # the estimator is unbiased: its mean over M draws is within 4 se = 4 sd(estimates)/sqrt(M)
    assert estimates.mean() == pytest.approx(true, abs=4 * estimates.std(ddof=1) / math.sqrt(draws))
    # and the spread of the 4000 Avg@8 values is V: their sample variance has se ~ V sqrt(2/(M-1))
    # (Avg@8 is a mean of 20 binomials, close to normal)
    spread = float((counts / n).mean(axis=1).var(ddof=1))
    assert spread == pytest.approx(true, abs=4 * true * math.sqrt(2 / (draws - 1)))


def _rejection_rate(delta: float, sd: float, n: int, studies: int, seed: int) -> float:
    """The share of simulated pilots (two arms, n seeds, the model above) whose paired t-test
    rejects at two-sided 0.05 when arm 0 is better by `delta`."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, math.sqrt(SHARED), (studies, 1, n))
    noise = rng.normal(0, sd / math.sqrt(2), (studies, 2, n))  # var(difference) = sd²
    y = shared + noise + np.array([delta, 0.0])[None, :, None]
    result = stats.ttest_1samp(y[:, 0, :] - y[:, 1, :], 0.0, axis=1)
    return float((result.pvalue < 0.05).mean())


def test_the_minimal_detectable_difference_has_80_percent_power():
    # 20 000 simulated studies per check: the rejection rate's binomial se at 0.8 is
    # sqrt(0.8 * 0.2 / 20 000) = 0.0028; 3.5 se = 0.0099
    studies = 20_000
    tolerance = 3.5 * math.sqrt(0.8 * 0.2 / studies)
    sd = math.sqrt(2 * (OWN + SAMPLING))  # the paired differences' sd under the model
    for n in (3, 5):
        mdd = power.minimal_detectable_difference(sd, n)
        assert _rejection_rate(mdd, sd, n, studies, seed=n) == pytest.approx(0.8, abs=tolerance)
    # the simulation tells the exact answer from the textbook (t + t) sd / sqrt(n), whose true power
    # at 3 seeds is 0.766: 12 se short
    textbook = (stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2)) * sd / math.sqrt(3)
    assert _rejection_rate(textbook, sd, 3, studies, seed=30) < 0.8 - tolerance
