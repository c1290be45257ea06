"""Paired comparison of two methods (rows of the table): A − B, seed by
seed, benchmark by benchmark.

Runs are paired by their `seed` tag (same seed = same data order and initialisation), so the
seed-to-seed variation both methods share cancels. For every benchmark the difference of Avg@k and
of Pass@k is averaged over the common seeds with a Student-t interval over seeds; the overall line
is, per seed, the mean difference over the benchmarks (the difference of the avg column), then the
same interval over seeds. One common seed gives the difference without an interval, and says so.

A benchmark the table did not compare for one of the paired runs (evaluated on fewer problems than
its column, `ComparisonTable.uncompared`) is left out, with a note: a difference between 5 problems
and 500 is not a difference between the methods.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from quadrants.analysis.stats import SeedEstimate, seed_estimate
from quadrants.analysis.tables import row_labels


@dataclass(frozen=True)
class PairedLine:
    """One line of the comparison: the mean difference A − B over seeds and the
    per-seed differences."""

    benchmark: str
    k: int | None
    metric: str
    estimate: SeedEstimate
    differences: tuple[float, ...]

    @property
    def wins(self) -> int:
        return sum(d > 0 for d in self.differences)


@dataclass(frozen=True)
class PairedComparison:
    a: str
    b: str
    seeds: tuple[str, ...]
    lines: tuple[PairedLine, ...]
    confidence: float
    notes: tuple[str, ...]


def paired_comparison(
    runs: pd.DataFrame,
    points: pd.DataFrame,
    a: str,
    b: str,
    *,
    rows: Sequence[str],
    ks: Mapping[str, int | None],
    confidence: float = 0.95,
    uncompared: Collection[tuple[str, str]] = (),
) -> PairedComparison:
    """A − B for the two row labels `a` and `b` (as in the table built with
    the same `rows` and `ks`), leaving out the benchmarks where a paired run is among the table's
    `uncompared` (run_id, benchmark) pairs.

    Raises:
        ValueError: an unknown label, no `seed` tag, or no seed that both methods ran.
    """
    if "seed" not in runs:
        raise ValueError("a paired comparison pairs runs by their 'seed' tag; these runs have none")
    labels = row_labels(runs, rows)
    for name in (a, b):
        if name not in set(labels):
            raise ValueError(f"no row {name!r} for --compare; rows are {sorted(set(labels))}")
    seeds_of = {
        name: dict(
            zip(runs.loc[labels == name, "seed"].astype(str), runs.loc[labels == name, "run_id"])
        )
        for name in (a, b)
    }
    common = sorted(set(seeds_of[a]) & set(seeds_of[b]), key=lambda s: (len(s), s))
    if not common:
        raise ValueError(
            f"{a!r} ran seeds {sorted(seeds_of[a])} and {b!r} seeds "
            f"{sorted(seeds_of[b])}: none in common"
        )
    notes = []
    unpaired = sorted(set(seeds_of[a]) ^ set(seeds_of[b]))
    if unpaired:
        notes.append(f"seed(s) {unpaired} ran for only one of the two methods and are left out")
    if len(common) == 1:
        notes.append("one common seed: differences are shown without an interval")

    def value(run_id: str, bench: str, kind: str, k: int) -> float | None:
        hit = points[
            (points["run_id"] == run_id)
            & (points["benchmark"] == bench)
            & (points["kind"] == kind)
            & (points["k"] == k)
        ]
        return float(hit["value"].iloc[0]) if len(hit) else None

    lines = []
    overall: dict[str, list[list[float]]] = {
        "avg": [[] for _ in common],
        "pass": [[] for _ in common],
    }
    for bench, k in ks.items():
        if k is None:
            notes.append(f"{bench}: no common k, left out")
            continue
        short = [
            seed
            for seed in common
            if (seeds_of[a][seed], bench) in uncompared or (seeds_of[b][seed], bench) in uncompared
        ]
        if short:
            notes.append(
                f"{bench}: evaluated on fewer problems than the table's column (or an unknown "
                f"number) for seed(s) {short}, left out"
            )
            continue
        for kind in ("avg", "pass"):
            diffs = []
            for index, seed in enumerate(common):
                va, vb = (
                    value(seeds_of[a][seed], bench, kind, k),
                    value(seeds_of[b][seed], bench, kind, k),
                )
                if va is None or vb is None:
                    break
                diffs.append(va - vb)
                overall[kind][index].append(va - vb)
            if len(diffs) < len(common):
                notes.append(
                    f"{bench} {kind.capitalize()}@{k}: missing for seed "
                    f"{common[len(diffs)]}, left out"
                )
                for index in range(len(diffs)):
                    overall[kind][index].pop()
                continue
            lines.append(PairedLine(bench, k, kind, seed_estimate(diffs, confidence), tuple(diffs)))
    for kind in ("avg", "pass"):
        per_seed = [math.fsum(d) / len(d) for d in overall[kind] if d]
        if len(per_seed) == len(common):
            lines.append(
                PairedLine(
                    "mean over benchmarks",
                    None,
                    kind,
                    seed_estimate(per_seed, confidence),
                    tuple(per_seed),
                )
            )
    return PairedComparison(a, b, tuple(common), tuple(lines), confidence, tuple(notes))


def _verdict(est: SeedEstimate, limit: float) -> str:
    """The minimal-detectable column's word: a difference at least the design's minimal
    detectable one is 'reached'; a smaller one whose own interval excludes 0 is still told apart
    (the pair's spread is smaller than the pooled one the design assumes), otherwise it is not."""
    if abs(est.mean) >= limit:
        return "reached"
    if est.has_ci and (est.low > 0 or est.high < 0):
        return "below, interval excludes 0"
    return "below: not told apart"


def to_markdown(
    comparison: PairedComparison, detectable: Mapping[tuple[str, str], float] | None = None
) -> str:
    """The comparison as Markdown: difference in points (%), its t-interval over
    seeds, wins per seed; with `detectable` ({(benchmark, "avg" | "pass"): the minimal detectable
    paired difference}, `quadrants.analysis.power_report.Pilot.detectable`) a last column says
    whether each difference reaches it."""
    level = round(100 * comparison.confidence)
    head = (
        f"Paired comparison {comparison.a} − {comparison.b} over seed(s) "
        f"{', '.join(comparison.seeds)}: difference in points (%), mean over seeds with the "
        f"{level}% Student-t interval; 'A better' counts the seeds where {comparison.a} is higher."
    )
    extra = detectable is not None
    out = [
        head,
        "",
        f"| benchmark | metric | {comparison.a} − {comparison.b} | {level}% CI | A better |"
        + (" minimal detectable |" if extra else ""),
        "|---|---|---|---|---|" + ("---|" if extra else ""),
    ]
    for line in comparison.lines:
        est = line.estimate
        metric = (
            f"{line.metric.capitalize()}@{line.k}"
            if line.k is not None
            else line.metric.capitalize()
        )
        interval = f"[{100 * est.low:+.1f}, {100 * est.high:+.1f}]" if est.has_ci else "— (1 seed)"
        row = (
            f"| {line.benchmark} | {metric} | {100 * est.mean:+.1f} | {interval} | "
            f"{line.wins}/{len(line.differences)} |"
        )
        if extra:
            limit = detectable.get((line.benchmark, line.metric))
            if limit is None:
                row += " — |"
            else:
                row += f" {100 * limit:.1f} ({_verdict(est, limit)}) |"
        out.append(row)
    notes = list(comparison.notes)
    if extra:
        notes.append(
            "minimal detectable: the paired difference this design (these seeds, the spread of "
            "the paired differences pooled over every arm) finds with power 0.8 at two-sided "
            "alpha 0.05 (python -m analysis power). 'below' says a true difference of that size "
            "would often be missed; whether this pair is told apart is its own interval's call: "
            "'below, interval excludes 0' is told apart, 'below: not told apart' is not."
        )
    if notes:
        out.append("")
        out += [f"- {note}" for note in notes]
    return "\n".join(out) + "\n"
