"""Power of a paired comparison over training seeds, and where a metric's variance comes from.

A pilot runs every arm (row of the table) at the same few seeds. For one metric (a held-out Avg@k
or Pass@k, the final training entropy) its value ``y[a, s]`` for arm ``a`` and seed ``s`` is
modelled as

    y[a, s] = mu[a] + b[s] + w[a, s] + e[a, s]

``b`` the part of a seed's luck that every arm shares (same data order, same initialisation), ``w``
the arm's own seed-to-seed variation, ``e`` the noise of evaluating one trained policy (sampling the
answers again would move it). Variances ``sigma_b², sigma_w², sigma_e²``, all independent.

`variance_split` estimates them by moments on the balanced design (every arm at the same seeds):

- within-arm variance over seeds, pooled over arms, ``MS_within`` (df ``A (S-1)``):
  ``sigma_b² + sigma_w² + sigma_e²``;
- the two-way (arm, seed) residual mean square ``MS_resid`` (df ``(A-1)(S-1)``):
  ``sigma_w² + sigma_e²``; ``2 MS_resid`` is exactly the variance of the paired differences
  ``y[a, s] - y[a', s]`` pooled over every pair of arms (`paired_difference_sd`);
- evaluation sampling: the mean over runs of each run's own estimate of ``Var(e)``
  (`sampling_variance`, from its per-problem counts or its logged standard error);
- training seed = ``MS_within - evaluation``; of which shared by the arms = ``MS_within -
  MS_resid`` (it cancels in a paired comparison). Moment estimates are unbiased and may come out
  negative (a part too small to see at this many seeds); they are returned as they are.

The power is that of the two-sided paired t-test over ``n`` seeds, with the paired differences'
standard deviation taken as known (the pilot's): the test statistic is noncentral t with ``n - 1``
degrees of freedom and noncentrality ``delta sqrt(n) / sd`` (`scipy.stats.nct`). The minimal
detectable difference at power 0.8 solves that power for ``delta`` exactly; the textbook
``(t_{1-alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n)`` approximates it from below (at 2 seeds it has
73 % power, at 5 seeds 79 %; `tests/unit/analysis/test_power_simulation.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from quadrants.eval.metrics import pass_at_k

MAX_SEEDS = 10_000
"""`seeds_needed` searches up to this many seeds; beyond, the difference is out of reach."""


def sampling_variance(ns: Sequence[int], cs: Sequence[int], k: int) -> float:
    """The variance of a benchmark's Pass@k (Avg@k is Pass@1) over re-sampling every problem's
    answers, the problems and the trained policy held fixed, from the per-problem counts.

    Problem ``i`` scores the unbiased Pass@k of its ``c_i`` correct out of ``n_i``
    (`quadrants.eval.metrics.pass_at_k`); its variance under ``c ~ Binomial(n_i, p_i)`` is
    computed exactly at ``p_i = c_i / n_i`` (a parametric bootstrap without draws), times
    ``n_i / (n_i - 1)``; the mean over P problems has the sum over problems divided by P². For
    k = 1 this is ``c (n - c) / (n² (n - 1))`` per problem, the unbiased estimate of
    ``p (1 - p) / n``; for k > 1 the plug-in is biased (low when p is near 0 or 1: a problem
    never solved contributes nothing).

    Raises:
        ValueError: no problems, a problem with fewer than two answers or fewer than k, or counts
            out of range.
    """
    if len(ns) != len(cs) or not ns:
        raise ValueError(f"need one (n, c) per problem and at least one, got {len(ns)}, {len(cs)}")
    total = 0.0
    pairs: dict[tuple[int, int], int] = {}
    for n, c in zip(ns, cs):
        n, c = int(n), int(c)
        if n < max(2, k) or not 0 <= c <= n:
            raise ValueError(f"a problem with (n, c) = ({n}, {c}): need 0 <= c <= n and n >= 2, k")
        pairs[(n, c)] = pairs.get((n, c), 0) + 1
    for (n, c), count in pairs.items():
        support = np.arange(n + 1)
        weights = stats.binom.pmf(support, n, c / n)
        scores = np.array([pass_at_k(n, int(j), k) for j in support])
        mean = float(weights @ scores)
        variance = max(0.0, float(weights @ (scores - mean) ** 2))
        total += count * variance * n / (n - 1)
    return total / len(ns) ** 2


def sampling_variance_from_stderr(value: float, stderr: float, problems: int, n: int) -> float:
    """The same variance for Avg@n (`sampling_variance` with k = 1) from the logged scalars alone:
    Avg@n ``m``, its standard error over problems ``se`` and the problem count ``P``, every problem
    with ``n`` answers.

    ``se² P`` is the sample variance (ddof 1) of the per-problem scores ``p_i = c_i / n``, so
    ``sum p_i (1 - p_i) = P m (1 - m) - (P - 1) P se²``, and the estimate is that sum over
    ``P² (n - 1)``: the per-problem counts are not needed.
    """
    if problems < 2 or n < 2:
        raise ValueError(f"need at least 2 problems and 2 answers each, got {problems}, {n}")
    spread = problems * value * (1.0 - value) - (problems - 1) * problems * stderr**2
    return max(0.0, spread) / (problems**2 * (n - 1))


@dataclass(frozen=True)
class VarianceSplit:
    """The variance components of one metric (see the module docstring).

    Attributes:
        arms, seeds: the balanced design the split used (A arms at the same S seeds).
        within: ``MS_within``, the variance over seeds inside an arm, pooled over the arms.
        residual: ``MS_resid``, the arm-by-seed residual (``within`` minus the shared seed part).
        sampling: the mean per-run evaluation-sampling variance (NaN when a run has no estimate).
        training: ``within - sampling``, the training seeds' part (NaN with ``sampling``).
        shared: ``within - residual``, the seeds' part every arm shares; a paired comparison
            cancels it.
        diff_sd: the standard deviation of a paired difference, ``sqrt(2 residual)``.
    """

    arms: tuple[str, ...]
    seeds: tuple[str, ...]
    within: float
    residual: float
    sampling: float
    training: float
    shared: float
    diff_sd: float

    @property
    def diff_df(self) -> int:
        """Degrees of freedom of ``residual`` (and of ``diff_sd``)."""
        return (len(self.arms) - 1) * (len(self.seeds) - 1)


def variance_split(
    values: Mapping[str, Mapping[str, float]],
    sampling: Mapping[tuple[str, str], float] | None = None,
) -> VarianceSplit:
    """The components of one metric from ``values[arm][seed]`` and each run's sampling variance
    ``sampling[(arm, seed)]`` (missing or None: the sampling part and the training part are NaN).

    Raises:
        ValueError: fewer than 2 arms, or different seeds in different arms, or fewer than 2
            seeds (a NaN value counts as missing: the caller chooses the common seeds).
    """
    arms = tuple(values)
    if len(arms) < 2:
        raise ValueError(f"a paired comparison needs two arms, got {list(arms)}")
    seeds = tuple(values[arms[0]])
    if any(set(values[a]) != set(seeds) for a in arms):
        listing = {a: sorted(values[a]) for a in arms}
        raise ValueError(f"every arm must have the same seeds: {listing}")
    if len(seeds) < 2:
        raise ValueError(f"the arms share {len(seeds)} seed(s); the spread over seeds needs 2")
    y = np.array([[float(values[a][s]) for s in seeds] for a in arms])
    if np.isnan(y).any():
        raise ValueError("a NaN value: choose seeds where every arm has the metric")
    n_arms, n_seeds = y.shape
    arm_means = y.mean(axis=1, keepdims=True)
    within = float(((y - arm_means) ** 2).sum() / (n_arms * (n_seeds - 1)))
    residuals = y - arm_means - y.mean(axis=0, keepdims=True) + y.mean()
    residual = float((residuals**2).sum() / ((n_arms - 1) * (n_seeds - 1)))
    per_run = [(sampling or {}).get((a, s)) for a in arms for s in seeds]
    if any(v is None or math.isnan(v) for v in per_run):
        mean_sampling = math.nan
    else:
        mean_sampling = math.fsum(per_run) / len(per_run)
    return VarianceSplit(
        arms,
        seeds,
        within,
        residual,
        mean_sampling,
        within - mean_sampling,
        within - residual,
        math.sqrt(2.0 * residual),
    )


def _check(alpha: float, power: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")


def paired_power(delta: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """The chance that a two-sided paired t-test at level `alpha` over `n` seeds rejects when the
    true mean difference is `delta` and the differences have standard deviation `sd`."""
    if n < 2:
        raise ValueError(f"a paired t-test needs 2 seeds, got {n}")
    if sd == 0.0:
        return 1.0 if delta != 0.0 else alpha
    dof = n - 1
    critical = stats.t.ppf(1.0 - alpha / 2.0, dof)
    shift = abs(delta) * math.sqrt(n) / sd
    # -T' is noncentral t with -shift: each tail as an upper tail (scipy's lower tail of nct turns
    # NaN for large noncentralities where its upper tail does not)
    return float(stats.nct.sf(critical, dof, shift) + stats.nct.sf(critical, dof, -shift))


def minimal_detectable_difference(
    sd: float, n: int, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The true paired difference that the two-sided paired t-test over `n` seeds detects with
    probability `power` (`paired_power` solved for delta)."""
    _check(alpha, power)
    if n < 2:
        raise ValueError(f"a paired t-test needs 2 seeds, got {n}")
    if power <= alpha:
        raise ValueError(f"power {power} must exceed alpha {alpha}")
    if sd == 0.0:
        return 0.0
    high = sd
    while paired_power(high, sd, n, alpha) < power:
        high *= 2.0
    return float(
        optimize.brentq(lambda d: paired_power(d, sd, n, alpha) - power, 0.0, high, xtol=1e-12 * sd)
    )


def seeds_needed(
    sd: float, delta: float, alpha: float = 0.05, power: float = 0.8, most: int = MAX_SEEDS
) -> int | None:
    """The fewest seeds (>= 2) at which the paired t-test detects `delta` with probability
    `power`; None when more than `most` would be needed."""
    _check(alpha, power)
    if delta <= 0.0:
        raise ValueError(f"delta must be > 0, got {delta}")

    def enough(n: int) -> bool:
        return paired_power(delta, sd, n, alpha) >= power

    if enough(2):
        return 2
    if not enough(most):
        return None
    low, high = 2, most  # enough(low) is False, enough(high) True: the power grows with n
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high
