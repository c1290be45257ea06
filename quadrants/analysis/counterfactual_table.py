"""The paired one-step counterfactuals as a table: each arm's effect with its interval over batches,
the differences between arms, and the additivity of the first-order effects.

Input: per rollout batch, per arm, per metric, one effect (after − before on the same held-out
responses and seeds; quadrants/run/one_step_arms.py). The batch is the unit of replication: every
arm of one batch shares its rollouts, starting weights, optimizer state and draws, so an arm's
effect and the difference of two arms are each one number per batch, and their mean over the B
batches has the Student-t interval of analysis/stats.py (B − 1 degrees of freedom). The interval
assumes the batches independent (each its own seed stream coordinate) and the per-batch values
roughly normal; it says how much the effect moves with the batch, not with the held-out set (which
is fixed).

Additivity: under `quadrant.denominator=all_response_tokens` the four quadrant losses sum to the
full loss, so their gradients sum to the plain objective's, and so do their first-order effects
−lr · g · ∇metric. Per batch the residual is Σ_q effect_q − effect_all; `relative` divides it by
|effect_all| + Σ_q |effect_q| (the size of the terms that were added), so a rounding residual reads
as ~1e-6 and a bookkeeping error (a quadrant missing, a normaliser that depends on the mask) as
order 0.1 to 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from quadrants.analysis.stats import SeedEstimate, seed_estimate

Effects = Mapping[int, Mapping[str, Mapping[str, float]]]  # batch -> arm -> metric -> effect
QUADRANT_ARMS = ("PHR", "PLR", "NHR", "NLR")
SUM_OF_QUADRANTS = "PHR+PLR+NHR+NLR"


@dataclass(frozen=True)
class Line:
    """One line of the table: `arm` (or `A − B` for a difference), a metric, the per-batch values
    and their mean with its t-interval over batches (`estimate`, None when a value is NaN: e.g.
    no held-out response was correct, so there is no log-likelihood to change)."""

    arm: str
    metric: str
    values: tuple[float, ...]
    estimate: SeedEstimate | None


def _line(arm: str, metric: str, values: Sequence[float], confidence: float) -> Line:
    values = tuple(float(v) for v in values)
    if any(math.isnan(v) for v in values):
        return Line(arm, metric, values, None)
    return Line(arm, metric, values, seed_estimate(values, confidence))


def batches_of(effects: Effects) -> list[int]:
    return sorted(effects)


def arm_lines(
    effects: Effects, arms: Sequence[str], metrics: Sequence[str], confidence: float = 0.95
) -> list[Line]:
    """Each arm's effect on each metric: its per-batch values and their mean with the interval."""
    batches = batches_of(effects)
    return [
        _line(arm, metric, [effects[b][arm][metric] for b in batches], confidence)
        for arm in arms
        for metric in metrics
    ]


def difference_lines(
    effects: Effects,
    arms: Sequence[str],
    baseline: str,
    metrics: Sequence[str],
    confidence: float = 0.95,
) -> list[Line]:
    """Each arm minus `baseline`, batch by batch (the paired difference), with its interval."""
    batches = batches_of(effects)
    return [
        _line(
            f"{arm} − {baseline}",
            metric,
            [effects[b][arm][metric] - effects[b][baseline][metric] for b in batches],
            confidence,
        )
        for arm in arms
        if arm != baseline
        for metric in metrics
    ]


@dataclass(frozen=True)
class Additivity:
    """Per batch, Σ_q effect_q, effect_all, the residual (their difference) and the relative
    residual |residual| / (|effect_all| + Σ_q |effect_q|) of one metric; `worst` is the largest
    relative residual over the batches."""

    metric: str
    sums: tuple[float, ...]
    alls: tuple[float, ...]
    residuals: tuple[float, ...]
    relative: tuple[float, ...]

    @property
    def worst(self) -> float:
        return max(self.relative)


def additivity(effects: Effects, metric: str) -> Additivity:
    """The additivity of `metric` over the four quadrant arms against `all`, batch by batch.

    Raises ValueError when an arm among the four quadrants and `all` was not run."""
    batches = batches_of(effects)
    missing = [a for a in (*QUADRANT_ARMS, "all") if any(a not in effects[b] for b in batches)]
    if missing:
        raise ValueError(f"additivity needs the arms PHR, PLR, NHR, NLR and all; missing {missing}")
    sums, alls, residuals, relative = [], [], [], []
    for b in batches:
        terms = [effects[b][q][metric] for q in QUADRANT_ARMS]
        total, full = math.fsum(terms), effects[b]["all"][metric]
        scale = abs(full) + math.fsum(abs(t) for t in terms)
        sums.append(total)
        alls.append(full)
        residuals.append(total - full)
        relative.append(abs(total - full) / scale if scale > 0 else 0.0)
    return Additivity(metric, tuple(sums), tuple(alls), tuple(residuals), tuple(relative))


def to_frame(lines: Sequence[Line]) -> pd.DataFrame:
    """The lines as a table: arm, metric, mean, half_width, low, high, n (batches), then one
    column per batch (`batch_<b>`)."""
    rows = []
    for line in lines:
        est = line.estimate
        row = {
            "arm": line.arm,
            "metric": line.metric,
            "mean": math.fsum(line.values) / len(line.values) if est is None else est.mean,
            "half_width": math.nan if est is None else est.half_width,
            "low": math.nan if est is None else est.low,
            "high": math.nan if est is None else est.high,
            "n": len(line.values),
        }
        row.update({f"batch_{b}": v for b, v in enumerate(line.values)})
        rows.append(row)
    return pd.DataFrame(rows)


def to_text(
    lines: Sequence[Line],
    metrics: Sequence[str],
    confidence: float,
    title: str,
) -> str:
    """A fixed-width table, one row per arm (or difference), one column per metric:
    `mean [low, high]` (the t-interval over batches), `nan` where a batch had no value."""
    level = round(100 * confidence)
    arms = list(dict.fromkeys(line.arm for line in lines))
    cell = {(line.arm, line.metric): line for line in lines}

    def show(line: Line | None) -> str:
        if line is None:
            return "—"
        est = line.estimate
        if est is None:
            return "nan"
        if not est.has_ci:
            return f"{est.mean:+.2e}"
        return f"{est.mean:+.2e} [{est.low:+.2e}, {est.high:+.2e}]"

    width = max(len(a) for a in arms)
    cells = [[show(cell.get((arm, m))) for m in metrics] for arm in arms]
    widths = [max(len(m), *(len(row[i]) for row in cells)) for i, m in enumerate(metrics)]
    head = f"{'arm':<{width}}  " + "  ".join(f"{m:<{w}}" for m, w in zip(metrics, widths))
    out = [f"{title} (mean over batches [{level}% t-interval])", head, "-" * len(head)]
    for arm, row in zip(arms, cells, strict=True):
        out.append(f"{arm:<{width}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths)))
    return "\n".join(out)


def additivity_text(checks: Sequence[Additivity]) -> str:
    """One line per metric: the largest relative residual over the batches and the means."""
    out = []
    for check in checks:
        n = len(check.sums)
        out.append(
            f"additivity of {check.metric}: {SUM_OF_QUADRANTS} {math.fsum(check.sums) / n:+.3e} "
            f"vs all {math.fsum(check.alls) / n:+.3e} (mean over {n} batches); largest relative "
            f"residual {check.worst:.1e}"
        )
    return "\n".join(out)
