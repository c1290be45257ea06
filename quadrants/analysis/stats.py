"""Mean and confidence interval over seeds (the unit of replication of a training run).

The interval is Student's t: ``mean ± t_{(1+confidence)/2, n-1} · s / sqrt(n)`` with ``s`` the
sample standard deviation (ddof = 1) over the n seeds. With one seed there is no spread to estimate,
so there is no interval (NaN), and renderers say so rather than print a zero-width one. The
per-problem standard errors of `quadrants.eval.metrics` measure a different thing (the sampling of
problems and answers inside one run); across seeds we use the runs themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import t as student_t


@dataclass(frozen=True)
class SeedEstimate:
    """A mean over seeds with its t-interval.

    Attributes:
        mean: the mean of the values.
        half_width: t-interval half-width (NaN with one value).
        low, high: ``mean ∓ half_width`` (NaN with one value; not clipped).
        n: how many values (seeds).
        confidence: the interval's nominal coverage.
    """

    mean: float
    half_width: float
    low: float
    high: float
    n: int
    confidence: float

    @property
    def has_ci(self) -> bool:
        return self.n >= 2


def t_quantile(confidence: float, dof: int) -> float:
    """The two-sided Student-t critical value, e.g. 12.706 for 95 % and 1 degree of freedom."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(student_t.ppf(0.5 + confidence / 2, dof))


def seed_estimate(values: Sequence[float], confidence: float = 0.95) -> SeedEstimate:
    """Mean of `values` (one per seed) with its Student-t interval; NaN interval for one value.

    Raises:
        ValueError: no values, a NaN value, or confidence outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values to average")
    if any(math.isnan(v) for v in values):
        raise ValueError(f"NaN among the values {values}")
    n = len(values)
    mean = math.fsum(values) / n
    if n == 1:
        return SeedEstimate(mean, math.nan, math.nan, math.nan, 1, confidence)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return SeedEstimate(mean, half, mean - half, mean + half, n, confidence)
