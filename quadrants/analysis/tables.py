"""The comparison table in the paper's shape (docs/science.md, Table 1), built from a
runs frame and eval points.

Rows are methods or quadrants (the values of one or more run tags), columns are benchmarks, a cell
is "Avg@k / Pass@k" in percent, then the "avg" column (mean of the row's Avg@k over the math
benchmarks) and, when runs have out-of-domain benchmarks (GPQA, MMLU-Pro, GraphWiz), the "ood avg"
column (mean of their Avg@k). Every number is a mean over the row's runs (one per seed) with a
Student-t interval (`analysis.stats`).

Nothing is averaged over less than it claims: a cell whose runs do not all have the metric is blank
with a footnote naming the runs; a benchmark whose runs share no k is blank with a footnote listing
each run's k; when runs logged different k, the largest common k is used and a footnote says so.

Nor compared over less: a benchmark's column is compared at the most problems any of its runs
evaluated (`eval/<benchmark>/problems`; `eval.limit` evaluates only the first N). A run evaluated on
fewer, or that logged no count while others did, is still shown with a footnote ("evaluated on N of
M problems"), but neither its cells nor its row's avg / ood avg are compared: never bold, left out
of the paired comparison (`ComparisonTable.uncompared`); 5/5 solved is not better than 200/500.
When no run of a column logged a count (runs from before the evaluation runner or the held-out
count), the column is compared as before and a footnote says the counts are unknown. The caption
names each column's count, so a table whose runs were all limited alike says so.

Inputs are plain frames, so the table is tested on hand-made runs:
- runs: one row per run with `run_id`, `run_name`, `status` and tag columns
  (`analysis.load.select_runs`);
- points: run_id, benchmark, kind ("avg" | "pass"), k, step, value (`analysis.load.eval_points`);
- problems: run_id, benchmark, step, problems (`analysis.load.problem_counts`), or None for frames
  without counts (nothing is checked, nothing footnoted).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from quadrants.analysis.stats import SeedEstimate, seed_estimate
from quadrants.eval.metrics import OOD_BENCHMARKS, PAPER_BENCHMARKS, ood_avg, paper_avg

SWEPT = "swept"
"""Pseudo-tag: the run name (Hydra's override list) without its `seed=N` item."""
DESCRIBING_TAGS = ("objective", "quadrant", "model", "task", "reward")
"""Tags tried, in this order, when choosing the default row tags (those that vary)."""
_NOT_ROW_TAGS = {
    "run_id",
    "run_name",
    "status",
    "experiment_id",
    "start_time",
    "seed",
    "mlflow.parentRunId",
    "quadrants.sweep_id",
    "quadrants.study",
    "quadrants.role",
}


@dataclass(frozen=True)
class Cell:
    """One table cell: an estimate (None = blank), whether it is the best of
    its column, footnotes, whether it takes part in the column's comparison (False: a run of
    it was evaluated on fewer problems than the column's, or on an unknown number), and whether its
    difference from the column's best is below the minimal detectable difference
    (`mark_below_detectable`)."""

    estimate: SeedEstimate | None
    best: bool = False
    notes: tuple[int, ...] = ()
    compared: bool = True
    below_detectable: bool = False


@dataclass(frozen=True)
class ComparisonTable:
    """The table, ready to render.

    Attributes:
        row_tags: the tags whose values label the rows.
        rows: row labels, in order.
        benchmarks: column benchmarks, in order.
        ks: the k of each benchmark's column (None = no common k: a blank column).
        cells: {(row, benchmark, "avg" | "pass"): Cell}.
        avg: {row: Cell} for the avg column.
        avg_benchmarks: the benchmarks the avg column averages (the math ones; none: no avg column).
        seeds: {row: number of runs (seeds) in the row}.
        confidence: the intervals' coverage.
        footnotes: numbered from 1 in order.
        ood_avg: {row: Cell} for the "ood avg" column.
        ood_benchmarks: the out-of-domain benchmarks it averages (none: no ood avg column).
        problems: {benchmark: the problem count its column is compared at} (None: no run logged
            one, or counts were not given).
        uncompared: (run_id, benchmark) pairs left out of comparisons (evaluated on fewer
            problems than the column's, or an unknown number while other runs logged theirs); the
            paired comparison leaves them out too.
    """

    row_tags: tuple[str, ...]
    rows: tuple[str, ...]
    benchmarks: tuple[str, ...]
    ks: Mapping[str, int | None]
    cells: Mapping[tuple[str, str, str], Cell]
    avg: Mapping[str, Cell]
    avg_benchmarks: tuple[str, ...]
    seeds: Mapping[str, int]
    confidence: float
    footnotes: tuple[str, ...] = field(default=())
    ood_avg: Mapping[str, Cell] = field(default_factory=dict)
    ood_benchmarks: tuple[str, ...] = ()
    problems: Mapping[str, int | None] = field(default_factory=dict)
    uncompared: frozenset[tuple[str, str]] = frozenset()


class _Notes:
    """Footnotes numbered in order of first use; the same text gets the same number."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def add(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text) + 1


def swept_label(run_name: str) -> str:
    """`"objective=grpo,seed=1"` -> `"objective=grpo"`; a run name that is only
    a seed -> "default"."""
    stripped = re.sub(r"(^|,)seed=[^,]*", "", str(run_name)).strip(",")
    return stripped or "default"


def _tag_column(runs: pd.DataFrame, tag: str) -> pd.Series:
    if tag == SWEPT:
        return runs["run_name"].map(swept_label)
    return runs[tag]


def default_row_tags(runs: pd.DataFrame) -> tuple[str, ...]:
    """The describing tags that vary across the runs; `swept` if they leave two runs
    of a seed in one row."""
    varying = [t for t in DESCRIBING_TAGS if t in runs and runs[t].nunique(dropna=False) > 1]
    if not varying:
        extra = [
            t
            for t in runs.columns
            if t not in _NOT_ROW_TAGS
            and t not in DESCRIBING_TAGS
            and runs[t].nunique(dropna=False) > 1
        ]
        varying = extra[:1] or [t for t in ("objective", "quadrant") if t in runs][:1]
    if not varying:
        return (SWEPT,)
    if "seed" in runs and _duplicates(runs, tuple(varying)):
        return (SWEPT,)
    return tuple(varying)


def row_labels(runs: pd.DataFrame, row_tags: Sequence[str]) -> pd.Series:
    """One label per run: the row tags' values joined by ", "."""
    missing_columns = [t for t in row_tags if t != SWEPT and t not in runs]
    if missing_columns:
        available = sorted(c for c in runs.columns if c not in _NOT_ROW_TAGS) + [SWEPT]
        raise ValueError(f"row tag(s) {missing_columns} not on these runs; available: {available}")
    parts = [_tag_column(runs, t) for t in row_tags]
    # a standalone evaluation (of a base model, say) need not carry the training
    # tags: its run name labels it
    evaluation = (
        runs["quadrants.role"].eq("eval")
        if "quadrants.role" in runs
        else pd.Series(False, index=runs.index)
    )
    for tag, column in zip(row_tags, parts):
        lacking = runs.loc[column.isna() & ~evaluation, "run_name"].tolist()
        if lacking:
            raise ValueError(
                f"run(s) {lacking} have no tag {tag!r}; choose other --rows or filter them out"
            )
    labels = [", ".join(str(p.iloc[i]) for p in parts) for i in range(len(runs))]
    labels = [
        runs["run_name"].iloc[i]
        if evaluation.iloc[i] and any(pd.isna(p.iloc[i]) for p in parts)
        else label
        for i, label in enumerate(labels)
    ]
    return pd.Series(labels, index=runs.index)


def _duplicates(runs: pd.DataFrame, row_tags: tuple[str, ...]) -> list[tuple[str, str, list[str]]]:
    labels = row_labels(runs, row_tags)
    seeds = runs["seed"] if "seed" in runs else pd.Series(["?"] * len(runs), index=runs.index)
    frame = pd.DataFrame({"label": labels, "seed": seeds.astype(str), "name": runs["run_name"]})
    return [
        (label, seed, list(group["name"]))
        for (label, seed), group in frame.groupby(["label", "seed"])
        if len(group) > 1
    ]


def order_benchmarks(names: Sequence[str]) -> tuple[str, ...]:
    """The paper's six first, in its order, then the others alphabetically."""
    names = set(names)
    return tuple(
        [b for b in PAPER_BENCHMARKS if b in names] + sorted(names - set(PAPER_BENCHMARKS))
    )


def _choose_k(
    bench: str, points: pd.DataFrame, names: Mapping[str, str], k: int | None, notes: _Notes
) -> tuple[int | None, tuple[int, ...]]:
    """The k of one benchmark's column and the footnotes it needs."""
    per_run = {run: set(part["k"]) for run, part in points.groupby("run_id")}
    if k is not None:
        lacking = {names[r]: sorted(ks) for r, ks in per_run.items() if k not in ks}
        if not lacking:
            return k, ()
        listing = "; ".join(f"{name}: {ks}" for name, ks in sorted(lacking.items()))
        return k, (notes.add(f"{bench}: k={k} was asked for; run(s) without it ({listing})"),)
    common = set.intersection(*per_run.values())
    listing = "; ".join(
        f"{names[r]}: {sorted(ks)}" for r, ks in sorted(per_run.items(), key=lambda x: names[x[0]])
    )
    if not common:
        return None, (notes.add(f"{bench}: the runs share no k, nothing is compared ({listing})"),)
    chosen = max(common)
    if any(ks != per_run[next(iter(per_run))] for ks in per_run.values()):
        return chosen, (
            notes.add(
                f"{bench}: runs logged different k ({listing}); compared at the "
                f"largest common k={chosen}"
            ),
        )
    return chosen, ()


def _coverage(
    bench: str,
    at_k: pd.DataFrame,
    counts: Mapping[tuple[str, str, int], int],
    names: Mapping[str, str],
    notes: _Notes,
) -> tuple[int | None, dict[str, int]]:
    """How many problems one benchmark's column is compared at, and who is left out.

    A run's count is the `eval/<bench>/problems` logged at the step of its points (an evaluation
    at another step says nothing about these). The column's count is the largest: `eval.limit`
    only ever takes fewer problems, so the largest is the closest to the whole benchmark.

    Returns:
        (the column's count, or None when no run logged one; {run_id: footnote} of the runs left
        out of the comparison).
    """
    per_run: dict[str, int | None] = {}
    for run, part in at_k.groupby("run_id"):
        found = {counts.get((run, bench, int(step))) for step in part["step"]}
        per_run[run] = found.pop() if len(found) == 1 else None
    known = [n for n in per_run.values() if n is not None]
    if not known:
        return None, {}
    full = max(known)
    short: dict[int | None, list[str]] = {}
    for run, n in per_run.items():
        if n != full:
            short.setdefault(n, []).append(run)
    left_out: dict[str, int] = {}
    for n, runs in short.items():
        listed = sorted(names[r] for r in runs)
        what = (
            f"evaluated on {n} of {full} problems in run(s) {listed}"
            if n is not None
            else f"run(s) {listed} logged no problem count, the others {full}"
        )
        mark = notes.add(f"{bench}: {what}: not compared (no bold, avg or --compare)")
        left_out.update(dict.fromkeys(runs, mark))
    return full, left_out


def _best(cells: dict, keys: list) -> None:
    """Mark the highest mean among the compared `keys` of `cells` (ties all marked; nothing with
    < 2 values)."""
    valued = [key for key in keys if cells[key].estimate is not None and cells[key].compared]
    if len(valued) < 2:
        return
    top = max(cells[key].estimate.mean for key in valued)
    for key in valued:
        if math.isclose(cells[key].estimate.mean, top, rel_tol=0.0, abs_tol=1e-12):
            cells[key] = replace(cells[key], best=True)


def build_table(
    runs: pd.DataFrame,
    points: pd.DataFrame,
    *,
    rows: Sequence[str] | None = None,
    k: int | Mapping[str, int] | None = None,
    benchmarks: Sequence[str] | None = None,
    confidence: float = 0.95,
    initial_runs: Sequence[str] = (),
    problems: pd.DataFrame | None = None,
) -> ComparisonTable:
    """Build the comparison table.

    Args:
        runs: the selected runs (one per row × seed).
        points: their final eval points.
        rows: row tags (default `default_row_tags`); `swept` is the run name without its seed.
        k: one k for every benchmark, {benchmark: k}, or None for each benchmark's largest common k.
        benchmarks: the columns (default: every benchmark with points), in the paper's order.
        confidence: coverage of the t-intervals over seeds.
        initial_runs: run ids whose points are a step-0 evaluation on purpose (the base row): left
            out of the check that every run's final evaluation was at the same step.
        problems: their problem counts (`analysis.load.problem_counts`); None = not checked.

    Raises:
        ValueError: no runs, no eval metrics, an unknown benchmark or row tag, or two runs of one
            row with the same seed (the rows do not separate the runs: choose other --rows or
            filter).
    """
    if runs.empty:
        raise ValueError("no runs selected: nothing to tabulate")
    if points.empty:
        raise ValueError(
            f"none of the {len(runs)} selected runs logged an eval/<benchmark>/avg_at_<k> or "
            "pass_at_<k> metric; run an evaluation (eval.every / quadrants.evaluate) first"
        )
    row_tags = tuple(rows) if rows else default_row_tags(runs)
    labels = row_labels(runs, row_tags)
    dup = _duplicates(runs, row_tags) if "seed" in runs else []
    if dup:
        described = "; ".join(f"row {label!r} seed {seed}: {names}" for label, seed, names in dup)
        raise ValueError(
            f"rows {list(row_tags)} put several runs of one seed in a row ({described}); "
            f"pass --rows with the tags that tell them apart (e.g. --rows {SWEPT}) "
            "or narrow the selection"
        )
    names = dict(zip(runs["run_id"], runs["run_name"]))
    points = points[points["run_id"].isin(names)]
    available = order_benchmarks(points["benchmark"].unique())
    if benchmarks:
        unknown = [b for b in benchmarks if b not in available]
        if unknown:
            raise ValueError(
                f"benchmark(s) {unknown} not logged by these runs; logged: {list(available)}"
            )
        columns = tuple(benchmarks)
    else:
        columns = available
    ks_asked = k if isinstance(k, Mapping) else dict.fromkeys(columns, k)
    unknown_k = [b for b in ks_asked if b not in columns]
    if unknown_k:
        raise ValueError(
            f"k given for benchmark(s) {unknown_k} that are not columns; columns: {list(columns)}"
        )

    notes = _Notes()
    order = list(dict.fromkeys(sorted(labels)))
    seeds = {label: int((labels == label).sum()) for label in order}
    run_of_label = {label: list(runs.loc[labels == label, "run_id"]) for label in order}
    unfinished = runs.loc[runs["status"] != "FINISHED", ["run_name", "status"]]
    if not unfinished.empty:
        notes.add(
            "runs not FINISHED (their last logged values are used): "
            + ", ".join(f"{n} ({s})" for n, s in unfinished.itertuples(index=False))
        )

    counts = (
        {}
        if problems is None
        else {
            (r.run_id, r.benchmark, int(r.step)): int(r.problems)
            for r in problems.itertuples(index=False)
        }
    )
    ks: dict[str, int | None] = {}
    sizes: dict[str, int | None] = {}
    cells: dict[tuple[str, str, str], Cell] = {}
    values: dict[tuple[str, str], float] = {}  # (run_id, benchmark) -> Avg@k, for the avg column
    uncompared: set[tuple[str, str]] = set()
    for bench in columns:
        bench_points = points[points["benchmark"] == bench]
        chosen, column_notes = _choose_k(bench, bench_points, names, ks_asked.get(bench), notes)
        ks[bench] = chosen
        at_k = bench_points[bench_points["k"] == chosen]
        steps = sorted(set(at_k.loc[~at_k["run_id"].isin(initial_runs), "step"]))
        if len(steps) > 1:
            column_notes += (
                notes.add(f"{bench}: final evaluations were at different steps {steps}"),
            )
        left_out: dict[str, int] = {}
        sizes[bench] = None
        if problems is not None and chosen is not None:
            sizes[bench], left_out = _coverage(bench, at_k, counts, names, notes)
            uncompared.update((run, bench) for run in left_out)
        for label in order:
            short = tuple(left_out[r] for r in run_of_label[label] if r in left_out)
            for kind in ("avg", "pass"):
                found = at_k[(at_k["kind"] == kind) & at_k["run_id"].isin(run_of_label[label])]
                found = found.set_index("run_id")["value"]
                lacking = [names[r] for r in run_of_label[label] if r not in found.index]
                marks = column_notes + short
                if chosen is None:
                    estimate = None
                elif lacking:
                    estimate = None
                    marks += (
                        notes.add(
                            f"{bench} {kind.capitalize()}@{chosen} missing in run(s) "
                            f"{sorted(lacking)}: cell left blank"
                        ),
                    )
                else:
                    estimate = seed_estimate([found[r] for r in run_of_label[label]], confidence)
                    if kind == "avg":
                        values.update({(r, bench): float(found[r]) for r in run_of_label[label]})
                cells[(label, bench, kind)] = Cell(estimate, False, marks, not short)
        for kind in ("avg", "pass"):
            _best(cells, [(label, bench, kind) for label in order])
    uncounted = [
        b for b in columns if problems is not None and ks[b] is not None and sizes[b] is None
    ]
    if uncounted:
        notes.add(
            f"{', '.join(uncounted)}: no run logged its problem count (eval/<benchmark>/problems; "
            "older runs): compared as if every run covered the same problems"
        )

    paper = all(b in columns for b in PAPER_BENCHMARKS)
    avg_benchmarks = (
        PAPER_BENCHMARKS if paper else tuple(c for c in columns if c not in OOD_BENCHMARKS)
    )
    ood_benchmarks = tuple(c for c in columns if c in OOD_BENCHMARKS)
    avg_cells = _mean_cells(
        order,
        run_of_label,
        values,
        avg_benchmarks,
        paper_avg if paper else _plain_mean,
        "avg",
        notes,
        confidence,
        uncompared,
    )
    ood_cells = _mean_cells(
        order,
        run_of_label,
        values,
        ood_benchmarks,
        ood_avg,
        "ood avg",
        notes,
        confidence,
        uncompared,
    )
    return ComparisonTable(
        row_tags,
        tuple(order),
        columns,
        ks,
        cells,
        avg_cells,
        tuple(avg_benchmarks),
        seeds,
        confidence,
        tuple(notes.texts),
        ood_cells,
        ood_benchmarks,
        sizes,
        frozenset(uncompared),
    )


def mark_below_detectable(
    table: ComparisonTable,
    detectable: Mapping[tuple[str, str], float],
    seeds: int,
    alpha: float,
    power: float,
) -> ComparisonTable:
    """The table with every compared cell whose mean lies less than its column's minimal
    detectable difference below the column's best marked (`Cell.below_detectable`) and
    footnoted: at `seeds` seeds the study cannot tell it from the best.

    Args:
        detectable: {(benchmark, "avg" | "pass"): minimal detectable paired difference, on the
            metric's scale} (`quadrants.analysis.power`); columns without one are left as they are.
        seeds, alpha, power: what the differences were computed at (for the footnote).
    """
    notes = _Notes()
    notes.texts = list(table.footnotes)
    cells = dict(table.cells)
    for bench in table.benchmarks:
        for kind in ("avg", "pass"):
            limit = detectable.get((bench, kind))
            keys = [(row, bench, kind) for row in table.rows]
            best = [cells[key] for key in keys if cells[key].best]
            if limit is None or not best or math.isnan(limit):
                continue
            top = best[0].estimate.mean
            for key in keys:
                cell = cells[key]
                if cell.best or cell.estimate is None or not cell.compared:
                    continue
                if top - cell.estimate.mean < limit:
                    mark = notes.add(
                        f"{bench} {kind.capitalize()}@{table.ks[bench]}: less than the minimal "
                        f"detectable difference ({100 * limit:.1f} points at {seeds} seeds, "
                        f"two-sided alpha {alpha:g}, power {power:g}; python -m analysis power) "
                        "below the column's best: a true gap this size would often be missed "
                        "at these seeds (python -m analysis --compare tests the pair itself)"
                    )
                    cells[key] = replace(cell, notes=(*cell.notes, mark), below_detectable=True)
    return replace(table, cells=cells, footnotes=tuple(notes.texts))


def _plain_mean(values: Mapping[str, float]) -> float:
    return math.fsum(values.values()) / len(values)


def _mean_cells(
    order: Sequence[str],
    run_of_label: Mapping[str, list[str]],
    values: Mapping[tuple[str, str], float],
    benchmarks: Sequence[str],
    combine,
    column: str,
    notes: _Notes,
    confidence: float,
    uncompared: set[tuple[str, str]],
) -> dict[str, Cell]:
    """One averaging column ("avg", "ood avg"): per row, `combine` of each run's Avg@k over
    `benchmarks`, then the mean over seeds; blank (with a footnote) where a run lacks one of them;
    shown but not compared (footnoted, never bold) where a run's benchmark is `uncompared`; {}
    without benchmarks."""
    if not benchmarks:
        return {}
    cells: dict[str, Cell] = {}
    for label in order:
        per_run: list[float] | None = []
        for run in run_of_label[label]:
            got = {b: values[(run, b)] for b in benchmarks if (run, b) in values}
            if len(got) < len(benchmarks):
                per_run = None
                break
            per_run.append(combine(got))
        if per_run is None:
            mark = notes.add(
                f"{column} left blank where a row lacks an Avg@k of one of its benchmarks"
            )
            cells[label] = Cell(None, False, (mark,))
        elif any((run, b) in uncompared for run in run_of_label[label] for b in benchmarks):
            mark = notes.add(
                f"{column} not compared where a row's runs were evaluated on fewer problems (or "
                "an unknown number) in one of its benchmarks"
            )
            cells[label] = Cell(seed_estimate(per_run, confidence), False, (mark,), False)
        else:
            cells[label] = Cell(seed_estimate(per_run, confidence))
    _best(cells, list(order))
    return cells


# --- rendering ------------------------------------------------------------------------------------


def _number(estimate: SeedEstimate) -> str:
    if not estimate.has_ci:
        return f"{100 * estimate.mean:.1f}"
    return f"{100 * estimate.mean:.1f} ± {100 * estimate.half_width:.1f}"


def _marks(notes: Sequence[int], style: str) -> str:
    if not notes:
        return ""
    text = ",".join(str(n) for n in sorted(set(notes)))
    return f"\\textsuperscript{{{text}}}" if style == "latex" else f"[{text}]"


def _text(cell: Cell, style: str) -> str:
    if cell.estimate is None:
        return ("--" if style == "latex" else "—") + _marks(cell.notes, style)
    number = _number(cell.estimate)
    if style == "latex":
        number = number.replace("±", "$\\pm$")
    if cell.best:
        number = f"\\textbf{{{number}}}" if style == "latex" else f"**{number}**"
    return number + _marks(cell.notes, style)


def _pair(table: ComparisonTable, row: str, bench: str, style: str) -> str:
    avg, pas = table.cells[(row, bench, "avg")], table.cells[(row, bench, "pass")]
    if avg.estimate is None and pas.estimate is None and avg.notes == pas.notes:
        return _text(avg, style)
    return f"{_text(avg, style)} / {_text(pas, style)}"


def _seeds(table: ComparisonTable, row: str) -> str:
    n = table.seeds[row]
    return f"{n}" if n > 1 else "1 (no CI)"


def caption(table: ComparisonTable) -> str:
    """What the numbers are, in one paragraph (printed above the Markdown table and
    as the LaTeX caption)."""
    level = round(100 * table.confidence)
    what = (
        "the paper's avg: mean Avg@k of"
        if len(table.avg_benchmarks) == len(PAPER_BENCHMARKS)
        and set(table.avg_benchmarks) == set(PAPER_BENCHMARKS)
        else "mean Avg@k over"
    )
    text = (
        "Avg@k / Pass@k in %, final evaluation of each run; mean ± half-width of the "
        f"{level}% Student-t interval over seeds (a row with one seed has no interval); "
        "bold = best in its column"
    )
    if table.avg_benchmarks:
        text += f"; avg = {what} {', '.join(table.avg_benchmarks)}"
    if table.ood_benchmarks:
        text += (
            f"; ood avg = mean Avg@k over the out-of-domain {', '.join(table.ood_benchmarks)} "
            "(chance level: 25 % gpqa, 10 % mmlu_pro, 50 % on graphwiz's yes/no tasks)"
        )
    sizes = [
        f"{b} {table.problems[b]}" for b in table.benchmarks if table.problems.get(b) is not None
    ]
    if sizes:
        text += (
            f"; problems per benchmark: {', '.join(sizes)} (a cell evaluated on fewer is "
            "footnoted and not compared)"
        )
    return text + "."


def _header(table: ComparisonTable) -> list[str]:
    heads = [", ".join(table.row_tags)]
    for bench in table.benchmarks:
        k = table.ks[bench]
        heads.append(f"{bench} Avg/Pass@{k}" if k is not None else f"{bench} (no common k)")
    return heads + _average_heads(table) + ["seeds"]


def _average_heads(table: ComparisonTable) -> list[str]:
    return (["avg"] if table.avg_benchmarks else []) + (["ood avg"] if table.ood_benchmarks else [])


def _average_cells(table: ComparisonTable, row: str, style: str) -> list[str]:
    cells = [_text(table.avg[row], style)] if table.avg_benchmarks else []
    return cells + ([_text(table.ood_avg[row], style)] if table.ood_benchmarks else [])


def to_markdown(table: ComparisonTable) -> str:
    """The table as GitHub Markdown with the caption above and numbered footnotes below."""
    heads = _header(table)
    lines = [caption(table), "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for row in table.rows:
        cells = [row] + [_pair(table, row, b, "md") for b in table.benchmarks]
        cells += [*_average_cells(table, row, "md"), _seeds(table, row)]
        lines.append("| " + " | ".join(cells) + " |")
    if table.footnotes:
        lines.append("")
        lines += [f"[{i}] {text}  " for i, text in enumerate(table.footnotes, 1)]
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def to_latex(table: ComparisonTable) -> str:
    """A `table` environment (needs \\usepackage{booktabs}); footnotes as
    lines under the tabular."""
    heads = [latex_escape(h) for h in _header(table)]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{l" + "c" * (len(heads) - 1) + "}",
        r"\toprule",
        " & ".join(heads) + r" \\",
        r"\midrule",
    ]
    for row in table.rows:
        cells = [latex_escape(row)] + [_pair(table, row, b, "latex") for b in table.benchmarks]
        cells += [*_average_cells(table, row, "latex"), latex_escape(_seeds(table, row))]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    for i, text in enumerate(table.footnotes, 1):
        lines.append(rf"\\[2pt]{{\footnotesize\textsuperscript{{{i}}} {latex_escape(text)}}}")
    text = latex_escape(caption(table)).replace("±", r"$\pm$")
    lines += [rf"\caption{{{text}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_frame(table: ComparisonTable) -> pd.DataFrame:
    """The table in long form for CSV: one line per (row, benchmark, metric),
    blank mean = blank cell.

    Columns: row, benchmark, k, metric (avg | pass; the avg columns have benchmark "avg" and "ood
    avg"), mean, ci_half_width, ci_low, ci_high, n_seeds, best, compared (False: left out of the
    comparison, see the notes), problems (the count the column is compared at; blank: unknown, and
    for the avg columns), notes (the footnote texts, "; "-joined).
    """
    records = []

    def add(row: str, bench: str, k: int | None, metric: str, cell: Cell) -> None:
        est = cell.estimate
        records.append(
            {
                "row": row,
                "benchmark": bench,
                "k": k,
                "metric": metric,
                "mean": est.mean if est else math.nan,
                "ci_half_width": est.half_width if est else math.nan,
                "ci_low": est.low if est else math.nan,
                "ci_high": est.high if est else math.nan,
                "n_seeds": table.seeds[row],
                "best": cell.best,
                "compared": cell.compared,
                "below_detectable": cell.below_detectable,
                "problems": table.problems.get(bench),
                "notes": "; ".join(table.footnotes[n - 1] for n in sorted(set(cell.notes))),
            }
        )

    for row in table.rows:
        for bench in table.benchmarks:
            for kind in ("avg", "pass"):
                add(row, bench, table.ks[bench], kind, table.cells[(row, bench, kind)])
        if table.avg_benchmarks:
            add(row, "avg", None, "avg", table.avg[row])
        if table.ood_benchmarks:
            add(row, "ood avg", None, "avg", table.ood_avg[row])
    frame = pd.DataFrame(records)
    frame["k"] = frame["k"].astype("Int64")
    frame["problems"] = frame["problems"].astype("Int64")
    return frame


def metric_row(label: str) -> str:
    """A row label as a metric-name part: what MLflow refuses in a name (anything but letters,
    digits, '_', '.', '-', ':') becomes '_': "grpo, PHR" -> "grpo_PHR"."""
    return re.sub(r"[^\w.\-:]+", "_", label)


def to_metrics(table: ComparisonTable) -> dict[str, float]:
    """The table as metrics for the sweep's parent run, one section per row: the mean over seeds
    of each column, `<row>/avg_at_<k>` and `<row>/pass_at_<k>` (with several benchmarks
    `<row>/<benchmark>/avg_at_<k>`, and `<row>/avg`, `<row>/ood_avg` for the average columns), and
    `<row>/seeds`. Blank cells (no estimate, or a benchmark without a common k) are left out."""
    metrics: dict[str, float] = {}
    for row in table.rows:
        name = metric_row(row)
        for bench in table.benchmarks:
            k = table.ks[bench]
            if k is None:
                continue
            prefix = f"{name}/" if len(table.benchmarks) == 1 else f"{name}/{bench}/"
            for kind in ("avg", "pass"):
                estimate = table.cells[(row, bench, kind)].estimate
                if estimate is not None:
                    metrics[f"{prefix}{kind}_at_{k}"] = estimate.mean
        averages = (("avg", table.avg, table.avg_benchmarks),) + (
            ("ood_avg", table.ood_avg, table.ood_benchmarks),
        )
        for column, cells, averaged in averages:
            estimate = cells[row].estimate if averaged and row in cells else None
            if estimate is not None:
                metrics[f"{name}/{column}"] = estimate.mean
        metrics[f"{name}/seeds"] = float(table.seeds[row])
    return metrics
