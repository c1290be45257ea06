"""Avg@k and unbiased Pass@k over a benchmark's problems, with confidence intervals.

Problem ``i`` has ``n_i`` sampled answers, ``c_i`` of them correct
(docs/science.md, "Evaluation protocol"):

- Avg@k  = mean_i c_i / n_i, the expected accuracy of one sample (the paper's Avg@32 has n = 32).
- Pass@k = mean_i [1 - C(n_i - c_i, k) / C(n_i, k)], the unbiased estimator of Chen et al. (2021)
  of the chance that at least one of k samples is correct; valid for every k <= n_i, so one run with
  n samples gives the whole curve k = 1, 2, 4, ..., n. Pass@1 equals Avg@k.

The ratio of binomials is computed as a product, ``prod_{i=n-c+1}^{n} (1 - k/i)``, summed in log
space (`math.log1p`) and turned back with `math.expm1`, so there are no factorials and no
cancellation: it stays exact to ~1e-15 relative for n = 1024 and far beyond.

Uncertainty: the unit of replication is the problem. Each per-problem score is an unbiased estimate
of that problem's rate from its own n samples, and problems are independent, so the standard error
of the mean over problems, ``std(scores, ddof=1) / sqrt(P)``, accounts for both the sampling of
answers and the choice of problems; it is the honest error bar for a mean over problems and what we
report (`Estimate`, normal interval). It is conservative for comparing two runs on the same fixed
problems (the between-problem spread is shared). `bootstrap_interval` gives a percentile bootstrap
over problems with a seeded generator, useful when scores are skewed (Pass@k near 0 or 1).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "OOD_BENCHMARKS",
    "PAPER_BENCHMARKS",
    "Estimate",
    "avg_at_k",
    "avg_at_k_estimate",
    "bootstrap_interval",
    "chance_pass_at_k",
    "curve_ks",
    "mean_pass_at_k",
    "ood_avg",
    "paper_avg",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_at_k_estimate",
    "per_problem_pass_at_k",
    "standard_error_estimate",
]

PAPER_BENCHMARKS = ("aime24", "aime25", "amc", "math500", "minerva", "olympiadbench")
"""The six benchmarks whose Avg@k the paper's "avg" column averages (AMC: the 83-problem AI-MO
set, not AMC23)."""

OOD_BENCHMARKS = ("gpqa", "mmlu_pro", "graphwiz")
"""The out-of-domain benchmarks (`quadrants.tasks.ood`); the "ood avg" column
averages those a run has."""

_BOOTSTRAP_CHUNK = 1_000  # resamples drawn at once: bounds memory at chunk x problems indices


@dataclass(frozen=True)
class Estimate:
    """A metric over problems with its uncertainty.

    Attributes:
        value: the mean over problems.
        stderr: standard error of that mean over problems (NaN with a single problem).
        low, high: the normal interval ``value -/+ z * stderr``, clipped to [0, 1].
        confidence: the interval's nominal coverage, e.g. 0.95.
        num_problems: number of problems averaged.
    """

    value: float
    stderr: float
    low: float
    high: float
    confidence: float
    num_problems: int


def _check_problem(n: int, c: int) -> tuple[int, int]:
    n, c = operator.index(n), operator.index(c)
    if n < 1:
        raise ValueError(f"a problem needs at least one sample, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"correct count must be in [0, n]: got c={c}, n={n}")
    return n, c


def _check_counts(ns: Sequence[int], cs: Sequence[int]) -> list[tuple[int, int]]:
    if len(ns) != len(cs):
        raise ValueError(f"{len(ns)} sample counts but {len(cs)} correct counts")
    if len(ns) == 0:
        raise ValueError("no problems")
    return [_check_problem(n, c) for n, c in zip(ns, cs)]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k of one problem: ``1 - C(n - c, k) / C(n, k)``.

    Args:
        n: samples drawn for the problem (>= 1).
        c: how many were correct (0..n).
        k: attempts (1..n).

    Raises:
        ValueError: k > n (the estimator needs at least k samples), k < 1, or bad n, c.
    """
    n, c = _check_problem(n, c)
    k = operator.index(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples per problem, got n={n}; use k <= n")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i); summed as logs, no factorials.
    log_ratio = math.fsum(math.log1p(-k / i) for i in range(n - c + 1, n + 1))
    return -math.expm1(log_ratio)


def per_problem_pass_at_k(ns: Sequence[int], cs: Sequence[int], k: int) -> list[float]:
    """`pass_at_k` of every problem, in order."""
    return [pass_at_k(n, c, k) for n, c in _check_counts(ns, cs)]


def mean_pass_at_k(ns: Sequence[int], cs: Sequence[int], k: int) -> float:
    """Pass@k of a benchmark: the mean over problems of `pass_at_k`."""
    scores = per_problem_pass_at_k(ns, cs, k)
    return math.fsum(scores) / len(scores)


def avg_at_k(ns: Sequence[int], cs: Sequence[int]) -> float:
    """Avg@k of a benchmark: the mean over problems of ``c / n`` (k = n samples per problem)."""
    return math.fsum(c / n for n, c in _check_counts(ns, cs)) / len(ns)


def curve_ks(n: int) -> list[int]:
    """The k of a Pass@k curve with n samples: 1, 2, 4, ... up to n, plus n itself."""
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"need at least one sample, got n={n}")
    ks = [1 << power for power in range(n.bit_length()) if 1 << power <= n]
    return ks if ks[-1] == n else [*ks, n]


def pass_at_k_curve(ns: Sequence[int], cs: Sequence[int]) -> dict[int, float]:
    """``{k: Pass@k}`` for k in `curve_ks` of the smallest n (every problem needs k <= n_i)."""
    pairs = _check_counts(ns, cs)
    smallest = min(n for n, _ in pairs)
    return {k: mean_pass_at_k(ns, cs, k) for k in curve_ks(smallest)}


# --- uncertainty --------------------------------------------------------------------------------


def standard_error_estimate(scores: Sequence[float], confidence: float = 0.95) -> Estimate:
    """Mean of per-problem scores with its standard error over problems and a normal interval.

    Args:
        scores: one score per problem in [0, 1] (c/n, or a per-problem Pass@k).
        confidence: coverage of the interval, in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if len(scores) == 0:
        raise ValueError("no problems")
    count = len(scores)
    mean = math.fsum(scores) / count
    if count < 2:
        return Estimate(mean, math.nan, math.nan, math.nan, confidence, count)
    variance = math.fsum((score - mean) ** 2 for score in scores) / (count - 1)
    stderr = math.sqrt(variance / count)
    half_width = NormalDist().inv_cdf(0.5 + confidence / 2) * stderr
    low, high = max(0.0, mean - half_width), min(1.0, mean + half_width)
    return Estimate(mean, stderr, low, high, confidence, count)


def avg_at_k_estimate(ns: Sequence[int], cs: Sequence[int], confidence: float = 0.95) -> Estimate:
    """`avg_at_k` with its standard error over problems."""
    return standard_error_estimate([c / n for n, c in _check_counts(ns, cs)], confidence)


def pass_at_k_estimate(
    ns: Sequence[int], cs: Sequence[int], k: int, confidence: float = 0.95
) -> Estimate:
    """`mean_pass_at_k` with its standard error over problems."""
    return standard_error_estimate(per_problem_pass_at_k(ns, cs, k), confidence)


def bootstrap_interval(
    scores: Sequence[float],
    *,
    confidence: float = 0.95,
    num_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean, resampling problems with replacement.

    Args:
        scores: one score per problem.
        confidence: coverage of the interval, in (0, 1).
        num_resamples: bootstrap resamples.
        seed: seeds `numpy.random.default_rng`; the same inputs and seed give the same interval.

    Returns:
        (low, high) quantiles of the resampled means.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if num_resamples < 1:
        raise ValueError(f"num_resamples must be >= 1, got {num_resamples}")
    values = np.asarray(scores, dtype=np.float64)  # [P]
    if values.ndim != 1 or values.size == 0:
        raise ValueError("scores must be a non-empty sequence of numbers")
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, num_resamples, _BOOTSTRAP_CHUNK):
        size = min(_BOOTSTRAP_CHUNK, num_resamples - start)
        picks = rng.integers(0, values.size, size=(size, values.size))  # [chunk, P]
        means.append(values[picks].mean(axis=1))  # [chunk]
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(np.concatenate(means), [tail, 1.0 - tail])
    return float(low), float(high)


# --- the paper's table --------------------------------------------------------------------------


def paper_avg(avg_at_k_by_benchmark: Mapping[str, float]) -> float:
    """The paper's "avg" column: the mean of the six Avg@k of `PAPER_BENCHMARKS`.

    Other keys (e.g. gsm8k) are ignored; a missing benchmark is an error, not a smaller mean.
    """
    missing = [name for name in PAPER_BENCHMARKS if name not in avg_at_k_by_benchmark]
    if missing:
        raise ValueError(f"the avg column needs all of {list(PAPER_BENCHMARKS)}; missing {missing}")
    return math.fsum(avg_at_k_by_benchmark[name] for name in PAPER_BENCHMARKS) / len(
        PAPER_BENCHMARKS
    )


def ood_avg(avg_at_k_by_benchmark: Mapping[str, float]) -> float:
    """The "ood avg" column: the mean Avg@k of the `OOD_BENCHMARKS` present (other keys ignored).

    The paper reports MMLU-Pro (v1), GPQA and GraphWiz (v2) apart, so a run need not have all
    three; tables say which ones each row averages.
    """
    present = [name for name in OOD_BENCHMARKS if name in avg_at_k_by_benchmark]
    if not present:
        raise ValueError(f"the ood avg column needs at least one of {list(OOD_BENCHMARKS)}")
    return math.fsum(avg_at_k_by_benchmark[name] for name in present) / len(present)


# --- chance level -------------------------------------------------------------------------------


def chance_pass_at_k(chances: Sequence[float], k: int) -> float:
    """Pass@k of a guesser: the mean over problems of ``1 - (1 - p_i)^k``, where p_i is the chance
    that one uniform guess at problem i is right (1/4 on GPQA). Avg@k of a guesser is mean p_i.

    With many samples guessing alone passes: on a four-option question Pass@4 is 1 - 0.75^4 = 68 %.
    """
    k = operator.index(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(chances) == 0:
        raise ValueError("no problems")
    if any(not 0.0 <= p <= 1.0 for p in chances):
        raise ValueError("chances must lie in [0, 1]")
    return math.fsum(-math.expm1(k * math.log1p(-p)) if p < 1.0 else 1.0 for p in chances) / len(
        chances
    )
