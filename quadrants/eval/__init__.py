"""Benchmark evaluation: Avg@k / unbiased Pass@k with error bars (`metrics`) and the grader's
agreement with benchmark golds (`agreement`). The benchmarks themselves are
`quadrants.tasks.benchmarks`.

Running one: `plan` (which benchmarks, problems and n; checked before any generation), `target`
(what `python -m quadrants.evaluate TARGET` evaluates), `generation` (sampling without logits),
`runner` (generate, grade, report; also called by training), `results` ((n, c) tables, metrics,
files).
"""

from quadrants.eval.metrics import (
    PAPER_BENCHMARKS,
    Estimate,
    avg_at_k,
    avg_at_k_estimate,
    bootstrap_interval,
    curve_ks,
    mean_pass_at_k,
    paper_avg,
    pass_at_k,
    pass_at_k_curve,
    pass_at_k_estimate,
    per_problem_pass_at_k,
    standard_error_estimate,
)

__all__ = [
    "PAPER_BENCHMARKS",
    "Estimate",
    "avg_at_k",
    "avg_at_k_estimate",
    "bootstrap_interval",
    "curve_ks",
    "mean_pass_at_k",
    "paper_avg",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_at_k_estimate",
    "per_problem_pass_at_k",
    "standard_error_estimate",
]
