"""Tests of a paired difference over seeds: does A differ from B, are they equivalent within a
margin, and how many of the comparisons of one table survive the multiplicity of asking them all.

Every function takes the per-seed differences ``d_1 .. d_n`` of one comparison (A − B, one value
per common seed, on the metric's own scale: 0.05 = 5 points of Avg@k) and leans on scipy for the
distributions:

- `paired_t_p`: the two-sided paired t-test of "no difference" (``scipy.stats.ttest_1samp``);
- `tost_p`: the two one-sided tests (TOST, Schuirmann 1987) of "the true difference lies outside
  ±margin": ``max(p_low, p_high)`` with ``p_low`` the one-sided t-test of ``mu <= -margin`` and
  ``p_high`` of ``mu >= +margin`` (``ttest_1samp`` with ``alternative``). A p below alpha shows
  equivalence within the margin: the same as the (1 − 2 alpha) t-interval lying inside it. At a
  true difference equal to the margin its rejection rate is at most alpha
  (tests/unit/analysis/test_hypothesis.py simulates it);
- `sign_test_p`: the exact two-sided sign test of "A ahead in a seed as often as behind" over the
  seeds with a non-zero difference (``scipy.stats.binomtest`` at 1/2): "ahead in every one of 5
  seeds" has p = 2 / 2^5 = 0.0625, not below 0.05;
- `holm`: Holm's step-down adjustment of the p-values of one table's comparisons (Holm 1979): the
  family-wise error rate (any true null rejected) stays at most alpha whatever their dependence.
  scipy has no Holm (``scipy.stats.false_discovery_control`` is Benjamini–Hochberg, another error
  rate), so it is written here, five lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def _values(differences: Sequence[float]) -> np.ndarray:
    values = np.asarray([float(d) for d in differences], dtype=float)
    if values.size < 2:
        raise ValueError(f"a paired test needs at least 2 seeds, got {values.size}")
    if np.isnan(values).any():
        raise ValueError(f"NaN among the differences {list(values)}")
    return values


def check_margin(margin: float, key: str = "--margin") -> float:
    """`margin` if it is a positive finite number, else ValueError naming `key` and the fix."""
    if not (math.isfinite(margin) and margin > 0.0):
        raise ValueError(
            f"{key} {margin}: the equivalence margin must be a positive difference on the "
            f"metric's scale; pass e.g. {key} 0.05 for ±5 points of Avg@k"
        )
    return float(margin)


def paired_t_p(differences: Sequence[float]) -> float:
    """Two-sided p of the paired t-test of mean difference 0. Differences that do not vary: 1 when
    they are all 0, else 0 (the t statistic is infinite)."""
    values = _values(differences)
    if np.ptp(values) == 0.0:
        return 1.0 if values[0] == 0.0 else 0.0
    return float(stats.ttest_1samp(values, 0.0).pvalue)


def tost_p(differences: Sequence[float], margin: float) -> float:
    """The TOST p-value of equivalence within ±`margin` (the larger of the two one-sided p's).
    Differences that do not vary: 0 when their value lies strictly inside the margin, else 1."""
    check_margin(margin, "margin")
    values = _values(differences)
    if np.ptp(values) == 0.0:
        return 0.0 if abs(values[0]) < margin else 1.0
    low = stats.ttest_1samp(values, -margin, alternative="greater").pvalue
    high = stats.ttest_1samp(values, margin, alternative="less").pvalue
    return float(max(low, high))


def sign_test_p(differences: Sequence[float]) -> float:
    """Exact two-sided sign-test p over the non-zero differences (1 when every one is 0)."""
    values = _values(differences)
    nonzero = values[values != 0.0]
    if nonzero.size == 0:
        return 1.0
    return float(stats.binomtest(int((nonzero > 0).sum()), int(nonzero.size), 0.5).pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input's order; NaN stays NaN and is not counted in the
    family. Sorted ascending p_(1) <= ... <= p_(m): adjusted p_(i) = max over j <= i of
    min(1, (m − j + 1) p_(j))."""
    values = [float(p) for p in pvalues]
    present = sorted((p, i) for i, p in enumerate(values) if not math.isnan(p))
    m = len(present)
    out = [math.nan] * len(values)
    running = 0.0
    for rank, (p, index) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        out[index] = running
    return out
