"""One call from a selection to every output: table (md, csv, tex), paired comparison, figures,
sample page, an index (report.md) and the same as one self-contained page (report.html, which
MLflow's artifact viewer shows with its figures), all logged as artifacts under `analysis/` on the
sweep's parent run.

A figure whose data no run has is skipped with a message (in the index and on the console), never
drawn empty; a figure that lacks some runs says which in the messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from quadrants.analysis import figures, load, paired, power_report, tables
from quadrants.analysis.provenance import provenance_warnings
from quadrants.analysis.report_html import render_report
from quadrants.analysis.samples_html import render_samples
from quadrants.eval.metrics import pass_at_k_curve

log = logging.getLogger("analysis")

TRAIN_SOLVE_RATE = "train/solve_rate"
TRAIN_ENTROPY = "train/entropy"


@dataclass(frozen=True)
class ReportOptions:
    """What to put in the report (see `python -m analysis --help`)."""

    rows: tuple[str, ...] | None = None
    k: int | Mapping[str, int] | None = None
    benchmarks: tuple[str, ...] | None = None
    compare: tuple[str, str] | None = None
    confidence: float = 0.95
    log_to_parent: bool = True
    samples_per_run: int = 6
    base_row: bool = False
    figures: bool = True
    per_seed: bool = False  # figures: each seed's thin line under its method's mean and band
    margin: float = paired.DEFAULT_MARGIN  # --compare: the TOST's equivalence margin


@dataclass(frozen=True)
class Report:
    """What was written and where it went."""

    out_dir: Path
    files: tuple[Path, ...]
    table: tables.ComparisonTable
    comparison: paired.PairedComparison | None
    parent_run_id: str | None
    logged: bool
    messages: tuple[str, ...]


def _run_frame(runset: load.RunSet, table: tables.ComparisonTable) -> pd.DataFrame:
    runs = runset.runs
    seeds = (
        runs["seed"].astype(str)
        if "seed" in runs
        else pd.Series(["0"] * len(runs), index=runs.index)
    )
    return pd.DataFrame(
        {"run_id": runs["run_id"], "row": tables.row_labels(runs, table.row_tags), "seed": seeds}
    )


def _missing(history: pd.DataFrame, key: str, frame: pd.DataFrame) -> list[str]:
    have = set(history.loc[history["key"] == key, "run_id"])
    return [f"{r.row} s{r.seed}" for r in frame.itertuples(index=False) if r.run_id not in have]


def pass_at_k_by_run(
    client: MlflowClient, runset: load.RunSet, points: pd.DataFrame
) -> tuple[dict[str, dict[str, dict[int, float]]], dict[str, str]]:
    """Pass@k curves of every run's final evaluation, per benchmark.

    From the per-problem (n, c) table of that evaluation when one is among the artifacts of the run
    (or of its standalone evaluation runs) at a step no older than the final logged points: k = 1,
    2, 4, ..., n (`quadrants.eval.metrics.pass_at_k_curve`); else from the logged pass_at_k points.

    Returns:
        ({run_id: {benchmark: {k: Pass@k}}}, {run_id: "(n, c) table" | "logged points"}).
    """
    curves: dict[str, dict[str, dict[int, float]]] = {}
    sources: dict[str, str] = {}
    benchmarks = set(points["benchmark"])
    for run_id in runset.run_ids:
        logged = points[(points["run_id"] == run_id) & (points["kind"] == "pass")]
        per_bench = {
            b: {int(k): float(v) for k, v in zip(part["k"], part["value"])}
            for b, part in logged.groupby("benchmark")
        }
        final_step = {b: int(part["step"].max()) for b, part in logged.groupby("benchmark")}
        found = load.newest_problem_tables(
            client, run_id, runset.eval_runs.get(run_id, []), benchmarks
        )
        used = False
        for bench, (at, table) in found.items():
            if at >= final_step.get(bench, -1):
                per_bench[bench] = pass_at_k_curve(list(table["n"]), list(table["c"]))
                used = True
        if per_bench:
            curves[run_id] = per_bench
            sources[run_id] = "(n, c) table" if used else "logged points"
    return curves, sources


BASE_LABEL = "base (step 0)"


def base_runs(
    client: MlflowClient, runset: load.RunSet, points: pd.DataFrame, row_tags: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """A "base" row: the starting policy's evaluation (step 0) that every run logs
    before its first update.

    Runs of one seed start from the same policy and evaluate it with the same sampling seed, so
    their step-0 values should agree; one pseudo-run per seed takes their mean, and a message names
    any seed whose runs disagree by more than 1e-9. Its problem count is theirs when they agree
    (else none: the table footnotes the base row and does not compare it).

    Returns:
        (pseudo runs, their eval points, their problem counts, messages); empty frames when no run
        logged a step-0 evaluation.
    """
    keys = sorted({f"eval/{p.benchmark}/{p.kind}_at_{p.k}" for p in points.itertuples()})
    keys += sorted({f"eval/{bench}/problems" for bench in points["benchmark"]})
    history = load.histories(client, runset.run_ids, keys)
    initial = load.eval_points(history[history["step"] == 0])
    initial_counts = load.problem_counts(history[history["step"] == 0])
    messages: list[str] = []
    if initial.empty:
        return (
            pd.DataFrame(columns=runset.runs.columns),
            initial,
            initial_counts,
            ["no run logged a step-0 evaluation: no base row"],
        )
    seeds = runset.runs.set_index("run_id")["seed"].astype(str) if "seed" in runset.runs else None
    initial["seed"] = initial["run_id"].map(seeds) if seeds is not None else "0"
    initial_counts["seed"] = initial_counts["run_id"].map(seeds) if seeds is not None else "0"
    counts = []
    for (seed, bench), sizes in initial_counts.groupby(["seed", "benchmark"])["problems"]:
        if sizes.nunique() > 1:
            messages.append(
                f"base row: seed {seed} runs evaluated {bench} at step 0 on different problem "
                f"counts {sorted(set(sizes))}: its count is unknown"
            )
            continue
        counts.append(
            {
                "run_id": f"base-seed-{seed}",
                "benchmark": bench,
                "step": 0,
                "problems": int(sizes.iloc[0]),
            }
        )
    rows, extra = [], []
    for seed, part in initial.groupby("seed"):
        pseudo = f"base-seed-{seed}"
        rows.append(
            {
                "run_id": pseudo,
                "run_name": f"{BASE_LABEL},seed={seed}",
                "status": "FINISHED",
                "seed": seed,
                **{tag: (BASE_LABEL if i == 0 else "-") for i, tag in enumerate(row_tags)},
            }
        )
        for (bench, kind, k), values in part.groupby(["benchmark", "kind", "k"])["value"]:
            if values.max() - values.min() > 1e-9:
                messages.append(
                    f"base row: seed {seed} runs disagree on step-0 {bench} {kind}@{k} "
                    f"({values.min():.4f}..{values.max():.4f}); their mean is shown"
                )
            extra.append(
                {
                    "run_id": pseudo,
                    "benchmark": bench,
                    "kind": kind,
                    "k": int(k),
                    "step": 0,
                    "value": float(values.mean()),
                }
            )
    return (
        pd.DataFrame(rows),
        pd.DataFrame(extra),
        pd.DataFrame(counts, columns=initial_counts.columns.drop("seed")),
        messages,
    )


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _figure(messages: list[str], name: str, draw: Any, *args: Any, **kwargs: Any) -> list[Path]:
    try:
        return draw(*args, **kwargs)
    except ValueError as error:
        messages.append(f"skipped {name}: {error}")
        return []


def _figures(
    client: MlflowClient,
    runset: load.RunSet,
    table: tables.ComparisonTable,
    points: pd.DataFrame,
    extra_points: pd.DataFrame,
    all_runs: pd.DataFrame,
    out_dir: Path,
    options: ReportOptions,
    messages: list[str],
) -> list[Path]:
    """Every figure and the sample page; appends a message for each one skipped."""
    files: list[Path] = []
    frame = _run_frame(runset, table)
    quadrant_keys = [
        f"train/quadrant/{q}/{stat}"
        for q in figures.QUADRANTS
        for stat in ("dlogp_abs", "cov", "cov_state", "entropy_change", "token_r")
    ] + [
        f"train/quadrant/{q}/{stat}{suffix}"
        for q in figures.QUADRANTS
        for stat, _ in figures.FLIP_STATS
        for suffix, _, _ in figures.FLIP_PARTS
    ]
    history = load.histories(
        client, runset.run_ids, [TRAIN_SOLVE_RATE, TRAIN_ENTROPY, *quadrant_keys]
    )
    fig_dir = out_dir / "figures"
    for key, stem, label in (
        (TRAIN_SOLVE_RATE, "train_solve_rate", "training solve rate"),
        (TRAIN_ENTROPY, "train_entropy", "token entropy (nats)"),
    ):
        files += _figure(
            messages,
            stem,
            figures.training_curve,
            history,
            key,
            frame,
            fig_dir,
            stem,
            label,
            per_seed=options.per_seed,
            confidence=options.confidence,
        )
        lacking = _missing(history, key, frame)
        if lacking and len(lacking) < len(frame):
            messages.append(f"{stem}: no {key} in run(s) {lacking}")
    files += _figure(
        messages, "dlogp_abs_by_quadrant", figures.dlogp_by_quadrant, history, frame, fig_dir
    )
    files += _figure(
        messages,
        "flips_by_quadrant",
        figures.flips_by_quadrant,
        history,
        frame,
        fig_dir,
        confidence=options.confidence,
    )
    drawn = _figure(
        messages,
        "entropy_change_by_quadrant",
        figures.entropy_change_by_quadrant,
        history,
        frame,
        fig_dir,
    )
    if drawn:  # the correlations of the figure's titles, per run and quadrant
        prediction = figures.entropy_prediction(history, frame).drop(columns="run_id")
        path = out_dir / "entropy_prediction.csv"
        prediction.to_csv(path, index=False)
        files += [*drawn, path]
    curves, sources = pass_at_k_by_run(client, runset, points)
    curve_frame = frame
    if (
        not extra_points.empty
    ):  # the base row's curve: every run's step-0 Pass@k points, averaged per seed
        base = extra_points[extra_points["kind"] == "pass"]
        for run_id, part in base.groupby("run_id"):
            curves[run_id] = {
                b: dict(zip(q["k"], q["value"])) for b, q in part.groupby("benchmark")
            }
            sources[run_id] = "step-0 points"
        seeds = all_runs.set_index("run_id")["seed"].astype(str)
        curve_frame = pd.concat(
            [
                frame,
                pd.DataFrame(
                    {"run_id": list(curves.keys() - set(frame["run_id"])), "row": BASE_LABEL}
                ),
            ],
            ignore_index=True,
        )
        curve_frame["seed"] = curve_frame["run_id"].map(seeds)
    files += _figure(
        messages,
        "pass_at_k",
        figures.pass_at_k_curves,
        curves,
        curve_frame,
        fig_dir,
        sources,
        per_seed=options.per_seed,
        confidence=options.confidence,
    )

    samples_by_run = {
        r.run_id: load.load_samples(client, r.run_id) for r in frame.itertuples(index=False)
    }
    by_row: dict[str, list[dict[str, Any]]] = {}
    for r in frame.itertuples(index=False):
        by_row.setdefault(r.row, []).extend(samples_by_run[r.run_id])
    files += _figure(
        messages, "token_advantage_hist", figures.advantage_histograms, by_row, fig_dir
    )
    files += _figure(messages, "entropy_pos_vs_neg", figures.entropy_by_polarity, by_row, fig_dir)
    if any(samples_by_run.values()):
        labelled = {
            f"{r.row} s{r.seed}": samples_by_run[r.run_id] for r in frame.itertuples(index=False)
        }
        files.append(
            _write(
                out_dir / "samples.html",
                render_samples(labelled, options.samples_per_run, f"Samples: {runset.label}"),
            )
        )
    else:
        messages.append(
            "skipped samples.html: no run has sample artifacts (tracking.log_samples_every)"
        )

    return files


def _names(runs: pd.DataFrame) -> dict[str, str]:
    """{run id: run name}."""
    return dict(zip(runs["run_id"], runs["run_name"]))


def build_report(
    selection: load.Selection, out_dir: Path, options: ReportOptions = ReportOptions()
) -> Report:
    """Select the runs, build every output in `out_dir`, log it on the parent
    run (if any and asked).

    Raises:
        load.SelectionError: nothing selected. ValueError: the table cannot be
            built (see `build_table`).
    """
    client = MlflowClient(selection.tracking_uri)
    runset = load.select_runs(client, selection)
    log.info("analysing %d runs (%s)", len(runset.runs), selection.describe())
    finals = load.final_metrics(client, runset.run_ids, runset.eval_runs)
    points = load.eval_points(finals)
    counts = load.problem_counts(finals)
    messages: list[str] = provenance_warnings(runset.provenance, _names(runset.runs))
    for message in messages:
        log.warning("%s", message)
    all_runs, all_points = runset.runs, points
    extra_points = pd.DataFrame(columns=points.columns)
    row_tags = options.rows or tables.default_row_tags(runset.runs)
    if options.base_row and not points.empty:
        extra_runs, extra_points, extra_counts, notes = base_runs(client, runset, points, row_tags)
        messages += notes
        if not extra_points.empty:
            all_runs = pd.concat([runset.runs, extra_runs], ignore_index=True)
            all_points = pd.concat([points, extra_points], ignore_index=True)
            if not extra_counts.empty:
                counts = pd.concat([counts, extra_counts], ignore_index=True)
    table = tables.build_table(
        all_runs,
        all_points,
        rows=row_tags,
        k=options.k,
        benchmarks=options.benchmarks,
        confidence=options.confidence,
        initial_runs=list(all_runs["run_id"][len(runset.runs) :]),
        problems=counts,
    )
    # every row at the same >= 2 seeds: mark the cells that the study cannot tell from the best,
    # and the paired differences below the minimal detectable one (two-sided 0.05, power 0.8)
    detectable = None
    try:
        pilot = power_report.Pilot.of(table, all_runs, all_points)
    except ValueError:  # a row with one seed, or no two seeds shared: no spread to size them by
        pilot = None
    if pilot is not None:
        detectable = pilot.detectable()
        table = tables.mark_below_detectable(table, detectable, len(pilot.seeds), 0.05, 0.8)
    # every refusal (an unknown --compare row, no common seed) before anything is written
    comparison = None
    if options.compare:
        comparison = paired.paired_comparison(
            all_runs,
            all_points,
            *options.compare,
            rows=table.row_tags,
            ks=table.ks,
            confidence=options.confidence,
            uncompared=table.uncompared,
            margin=options.margin,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [
        _write(out_dir / "table.md", tables.to_markdown(table)),
        _write(out_dir / "table.tex", tables.to_latex(table)),
    ]
    tables.to_frame(table).to_csv(out_dir / "table.csv", index=False)
    files.append(out_dir / "table.csv")

    if comparison is not None:
        files.append(_write(out_dir / "paired.md", paired.to_markdown(comparison, detectable)))

    if options.figures:
        files += _figures(
            client, runset, table, points, extra_points, all_runs, out_dir, options, messages
        )

    files.append(
        _write(
            out_dir / "report.md",
            _index(runset, table, comparison, detectable, files, out_dir, messages),
        )
    )
    blocks = [
        f"Selection: {runset.selection.describe()}; {len(runset.runs)} runs.",
        tables.to_markdown(table),
    ]
    if comparison is not None:
        blocks.append(paired.to_markdown(comparison, detectable))
    pngs = [path for path in files if path.suffix == ".png"]
    files.append(
        _write(
            out_dir / "report.html",
            render_report(f"Analysis: {runset.label}", blocks, pngs, messages),
        )
    )
    logged = False
    parent = runset.parent_run_id
    if options.log_to_parent:
        if parent is None:
            messages.append(
                "not logged to MLflow: the runs have no single parent run (pass --parent RUN_ID)"
            )
        else:
            client.log_artifacts(parent, str(out_dir), "analysis")
            # the table's means as the parent's metrics (its Overview lists them, no click needed)
            now = int(time.time() * 1000)
            client.log_batch(
                parent,
                metrics=[
                    Metric(key, value, now, 0) for key, value in tables.to_metrics(table).items()
                ],
            )
            logged = True
    return Report(out_dir, tuple(files), table, comparison, parent, logged, tuple(messages))


def _index(
    runset: load.RunSet,
    table: tables.ComparisonTable,
    comparison: paired.PairedComparison | None,
    detectable: Mapping[tuple[str, str], float] | None,
    files: Sequence[Path],
    out_dir: Path,
    messages: Sequence[str],
) -> str:
    lines = [
        f"# Analysis: {runset.label}",
        "",
        f"Selection: {runset.selection.describe()}; {len(runset.runs)} runs.",
        "",
        tables.to_markdown(table),
    ]
    if comparison is not None:
        lines += [paired.to_markdown(comparison, detectable)]
    for path in files:
        if path.suffix == ".png":
            lines.append(f"![{path.stem}]({path.relative_to(out_dir).as_posix()})")
    if messages:
        lines += ["", "Notes:"] + [f"- {m}" for m in messages]
    return "\n".join(lines) + "\n"
