"""Paired comparison of two methods (rows of the table): A − B, seed by
seed, benchmark by benchmark.

Runs are paired by their `seed` tag (same seed = same data order and initialisation), so the
seed-to-seed variation both methods share cancels. For every benchmark the difference of Avg@k and
of Pass@k is averaged over the common seeds with a Student-t interval over seeds; the overall line
is, per seed, the mean difference over the benchmarks (the difference of the avg column), then the
same interval over seeds. One common seed gives the difference without an interval, and says so.

Each line also carries the tests that answer the question asked of it (`analysis.hypothesis`): the
two-sided paired t-test p of "no difference" and its Holm adjustment over every line of the
comparison (one table, one family), the TOST p of "equivalent within ±margin" (default 5 points),
the exact sign-test p beside the seeds ahead, and the pair's own design figures: the standard
deviation of its own paired differences, the minimal detectable difference at its seeds from that
sd (two-sided alpha, power 0.8; `analysis.power`), and the seeds the margin would need. The
pooled minimal detectable difference of `python -m analysis power` (the spread pooled over every
arm) is a design quantity of the whole study; it is shown beside, labelled so, and never a verdict.

A benchmark the table did not compare for one of the paired runs (evaluated on fewer problems than
its column, `ComparisonTable.uncompared`) is left out, with a note: a difference between 5 problems
and 500 is not a difference between the methods.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from quadrants.analysis import hypothesis, power
from quadrants.analysis.stats import SeedEstimate, seed_estimate
from quadrants.analysis.tables import row_labels

DEFAULT_MARGIN = 0.05
"""The equivalence margin of the TOST, on the metric's scale (0.05 = 5 points of Avg@k)."""


@dataclass(frozen=True)
class PairedLine:
    """One line of the comparison: the mean difference A − B over seeds, the per-seed
    differences, and its tests (NaN with one seed).

    Attributes:
        sd: the sample sd of its own paired differences (ddof 1).
        detectable: its own minimal detectable difference at its seeds (from `sd`).
        needed: the seeds at which the paired t-test detects a true difference of the margin with
            the power asked (None: beyond `power.MAX_SEEDS`, or one seed).
        t_p, holm_p: the paired t-test's two-sided p, and Holm-adjusted over the comparison's lines.
        tost_p: the TOST p of equivalence within ±margin.
        sign_p: the exact two-sided sign-test p.
    """

    benchmark: str
    k: int | None
    metric: str
    estimate: SeedEstimate
    differences: tuple[float, ...]
    sd: float = math.nan
    detectable: float = math.nan
    needed: int | None = None
    t_p: float = math.nan
    holm_p: float = math.nan
    tost_p: float = math.nan
    sign_p: float = math.nan

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
    margin: float = DEFAULT_MARGIN
    alpha: float = 0.05
    power: float = 0.8


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
    margin: float = DEFAULT_MARGIN,
    alpha: float = 0.05,
    power_level: float = 0.8,
) -> PairedComparison:
    """A − B for the two row labels `a` and `b` (as in the table built with
    the same `rows` and `ks`), leaving out the benchmarks where a paired run is among the table's
    `uncompared` (run_id, benchmark) pairs, with every line's tests (`with_tests`).

    Raises:
        ValueError: an unknown label, no `seed` tag, no seed that both methods ran, or a margin
            that is not positive.
    """
    hypothesis.check_margin(margin)
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
    return PairedComparison(
        a,
        b,
        tuple(common),
        with_tests(lines, margin, alpha, power_level),
        confidence,
        tuple(notes),
        margin,
        alpha,
        power_level,
    )


def with_tests(
    lines: Sequence[PairedLine], margin: float, alpha: float = 0.05, power_level: float = 0.8
) -> tuple[PairedLine, ...]:
    """The lines with their tests filled in; the Holm adjustment runs over all of them (the
    comparisons of one table). Lines with one seed keep NaN (no spread, no test)."""
    hypothesis.check_margin(margin)
    filled = []
    for line in lines:
        diffs = line.differences
        if len(diffs) < 2:
            filled.append(line)
            continue
        sd = float(np.std(diffs, ddof=1))
        if np.ptp(diffs) <= 1e-12:  # equal differences (to float rounding): a spread of 0 over
            # few seeds is luck, and a t statistic of rounding noise is no test
            filled.append(replace(line, sd=0.0, sign_p=hypothesis.sign_test_p(diffs)))
            continue
        filled.append(
            replace(
                line,
                sd=sd,
                detectable=power.minimal_detectable_difference(sd, len(diffs), alpha, power_level),
                needed=power.seeds_needed(sd, margin, alpha, power_level),
                t_p=hypothesis.paired_t_p(diffs),
                tost_p=hypothesis.tost_p(diffs, margin),
                sign_p=hypothesis.sign_test_p(diffs),
            )
        )
    adjusted = hypothesis.holm([line.t_p for line in filled])
    return tuple(replace(line, holm_p=p) for line, p in zip(filled, adjusted, strict=True))


def reading(line: PairedLine, alpha: float, margin: float) -> str:
    """What the tests say, in words: a difference (Holm p < alpha), an equivalence within the
    margin (TOST p < alpha), both (a difference smaller than the margin), or neither."""
    if len(line.differences) < 2:
        return "one seed: no test"
    if math.isnan(line.t_p):
        return "no spread over the seeds: no test"
    differs = line.holm_p < alpha
    equivalent = line.tost_p < alpha
    bound = f"±{100 * margin:g}"
    if differs and equivalent:
        return f"differs, by less than {bound}"
    if differs:
        return "differs"
    if equivalent:
        return f"equivalent within {bound}"
    return f"not told apart, not shown within {bound}"


def _p(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:.2g}" if value >= 0.001 else "<0.001"


def to_markdown(
    comparison: PairedComparison, detectable: Mapping[tuple[str, str], float] | None = None
) -> str:
    """The comparison as Markdown: difference in points (%), its t-interval over seeds, the seeds
    A is ahead with the sign-test p, the paired t-test p with its Holm adjustment, the TOST p at
    the margin, the pair's own sd, minimal detectable difference and seeds for the margin, and a
    reading of the tests. With `detectable` ({(benchmark, "avg" | "pass"): the pooled minimal
    detectable paired difference}, `quadrants.analysis.power_report.Pilot.detectable`) a last
    column shows that design quantity, labelled as such."""
    level = round(100 * comparison.confidence)
    margin, alpha = comparison.margin, comparison.alpha
    bound = f"±{100 * margin:g}"
    head = (
        f"Paired comparison {comparison.a} − {comparison.b} over seed(s) "
        f"{', '.join(comparison.seeds)}: difference in points (%), mean over seeds with the "
        f"{level}% Student-t interval; 'A ahead' counts the seeds where {comparison.a} is higher "
        f"(exact two-sided sign-test p); t p: paired t-test of no difference, Holm p: adjusted "
        f"over the {len(comparison.lines)} lines of this table; TOST p: equivalence within "
        f"{bound} points (--margin); own sd, own MDD: the spread of this pair's differences and "
        f"the difference it detects with power {comparison.power:g} at two-sided alpha "
        f"{alpha:g} at these seeds; seeds for {bound}: the seeds that would detect a true "
        f"difference of the margin."
    )
    extra = detectable is not None
    heads = [
        "benchmark",
        "metric",
        f"{comparison.a} − {comparison.b}",
        f"{level}% CI",
        "A ahead (sign p)",
        "t p",
        "Holm p",
        f"TOST p ({bound})",
        "own sd",
        "own MDD",
        f"seeds for {bound}",
        "reading",
    ]
    if extra:
        heads.append("design MDD (pooled)")
    out = [head, "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for line in comparison.lines:
        est = line.estimate
        metric = (
            f"{line.metric.capitalize()}@{line.k}"
            if line.k is not None
            else line.metric.capitalize()
        )
        interval = f"[{100 * est.low:+.1f}, {100 * est.high:+.1f}]" if est.has_ci else "— (1 seed)"
        tested = not math.isnan(line.t_p)
        seeds = len(line.differences) >= 2
        cells = [
            line.benchmark,
            metric,
            f"{100 * est.mean:+.1f}",
            interval,
            f"{line.wins}/{len(line.differences)}" + (f" ({_p(line.sign_p)})" if seeds else ""),
            _p(line.t_p),
            _p(line.holm_p),
            _p(line.tost_p),
            "—" if not seeds else f"{100 * line.sd:.1f}",
            "—" if not tested else f"{100 * line.detectable:.1f}",
            "—"
            if not tested
            else (f">{power.MAX_SEEDS}" if line.needed is None else str(line.needed)),
            reading(line, alpha, margin),
        ]
        if extra:
            limit = detectable.get((line.benchmark, line.metric))
            cells.append("—" if limit is None else f"{100 * limit:.1f}")
        out.append("| " + " | ".join(cells) + " |")
    notes = list(comparison.notes)
    if extra:
        notes.append(
            "design MDD (pooled): the paired difference the study's design detects with power 0.8 "
            "at two-sided alpha 0.05 when the spread of the paired differences is pooled over "
            "every arm (python -m analysis power); a planning figure for the whole table, not a "
            "test of this pair: this pair's own sd and MDD are in their columns"
        )
    if notes:
        out.append("")
        out += [f"- {note}" for note in notes]
    return "\n".join(out) + "\n"
