"""A pilot sweep in MLflow -> the power of its comparisons: per metric, the variance split into a
training-seed and an evaluation-sampling part, the minimal detectable paired difference, the seeds
a named difference needs, and the comparison table with every cell that the study cannot tell from
its column's best marked (`python -m analysis power`; the statistics are `analysis.power`).

Metrics: every benchmark's held-out Avg@k and Pass@k at the table's k (the final evaluation,
`load.final_metrics`) and the final training entropy (`train/entropy` at the run's last step).

A run's evaluation-sampling variance comes from, in this order:
- its per-problem (n, c) table of that evaluation (`load.newest_problem_tables`, the evaluation
  runner's `counts.csv`): `power.sampling_variance`, for Avg@k and Pass@k;
- for Avg@k, its logged `eval/<benchmark>/avg_at_<k>_stderr` and `eval/<benchmark>/problems` at
  the same step (the in-training held-out check logs these, not the counts; every problem has k
  answers): `power.sampling_variance_from_stderr`;
- else none: the split says "not logged" (Pass@k without counts, the training entropy), while the
  minimal detectable difference, which needs only the spread over seeds, is still given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from mlflow.tracking import MlflowClient

from quadrants.analysis import load, power, tables

TRAIN_ENTROPY = "train/entropy"


@dataclass(frozen=True)
class MetricPower:
    """One metric's line.

    Attributes:
        name: "aime24 Avg@4", "train/entropy".
        column: (benchmark, "avg" | "pass") of the table's column, None for the entropy.
        scale, unit: how it is printed (100, "points" for rates; 1, "nats" for the entropy).
        split: its variance components.
        source: where the evaluation-sampling part came from.
        detectable: the minimal detectable paired difference at `PowerStudy.planned` seeds.
        needed: the seeds for `PowerStudy.delta` (None: beyond `power.MAX_SEEDS`, or no delta).
    """

    name: str
    column: tuple[str, str] | None
    scale: float
    unit: str
    split: power.VarianceSplit
    source: str
    detectable: float
    needed: int | None


@dataclass(frozen=True)
class PowerStudy:
    """The power analysis of a pilot, ready to print.

    Attributes:
        label: the sweep id or experiment.
        row_tags: the tags whose values are the arms.
        seeds: the seeds every arm ran (the split uses these runs only).
        planned: the number of seeds the minimal detectable differences are computed at.
        alpha, power, delta: the test's level, the power asked for, the named difference (or None).
        metrics: one line per metric.
        table: the comparison table, marked (`tables.mark_below_detectable`).
        notes: what was left out and why.
    """

    label: str
    row_tags: tuple[str, ...]
    arms: tuple[str, ...]
    seeds: tuple[str, ...]
    planned: int
    alpha: float
    power: float
    delta: float | None
    metrics: tuple[MetricPower, ...]
    table: tables.ComparisonTable
    notes: tuple[str, ...]


def _common_seeds(runs: pd.DataFrame, labels: pd.Series) -> tuple[tuple[str, ...], list[str]]:
    """The seeds every arm ran, after refusing a pilot that cannot give a spread over seeds."""
    seeds_of = {
        arm: sorted(set(runs.loc[labels == arm, "seed"].astype(str)), key=lambda s: (len(s), s))
        for arm in sorted(set(labels))
    }
    if len(seeds_of) < 2:
        raise ValueError(
            f"the pilot has one arm ({list(seeds_of)}): a power analysis compares arms; select a "
            "sweep with two or more (or choose --rows that tell its runs apart)"
        )
    single = {arm: seeds for arm, seeds in seeds_of.items() if len(seeds) < 2}
    if single:
        listed = "; ".join(f"{arm}: seed {seeds}" for arm, seeds in single.items())
        raise ValueError(
            f"a pilot needs at least 2 seeds per arm to see the spread over seeds; one seed in "
            f"{listed}. Run each arm with a second seed (e.g. python -m quadrants.sweep -m ... "
            "seed=0,1) or leave these arms out of the selection (--tag, --sweep-id)"
        )
    common = set.intersection(*(set(s) for s in seeds_of.values()))
    if len(common) < 2:
        raise ValueError(
            f"the arms share {len(common)} seed(s) ({sorted(common)}): a paired comparison pairs "
            f"runs of the same seed, and the spread needs 2; seeds per arm: {seeds_of}. Run every "
            "arm at the same seeds (seed=0,1)"
        )
    notes = [
        f"{arm}: seed(s) {sorted(set(seeds) - common)} not run by every arm, left out"
        for arm, seeds in seeds_of.items()
        if set(seeds) - common
    ]
    return tuple(sorted(common, key=lambda s: (len(s), s))), notes


@dataclass(frozen=True)
class Pilot:
    """The final values of a table's runs arranged for `power.variance_split`: every arm at the
    seeds all arms ran.

    Attributes:
        arms: the table's rows. seeds: the seeds every arm ran.
        run_of: {(arm, seed): run id}.
        values: {(benchmark, "avg" | "pass"): {arm: {seed: final value}}}, the table's columns at
            its k; a column some run lacks (or was evaluated on fewer problems for) is left out.
        notes: what was left out.
    """

    arms: tuple[str, ...]
    seeds: tuple[str, ...]
    run_of: Mapping[tuple[str, str], str]
    values: Mapping[tuple[str, str], Mapping[str, Mapping[str, float]]]
    notes: tuple[str, ...]

    @property
    def run_ids(self) -> list[str]:
        return [self.run_of[(arm, seed)] for arm in self.arms for seed in self.seeds]

    @classmethod
    def of(cls, table: tables.ComparisonTable, runs: pd.DataFrame, points: pd.DataFrame) -> Pilot:
        """Raises ValueError: runs without a seed tag, one arm, an arm with one seed, or fewer
        than 2 shared seeds."""
        if "seed" not in runs or runs["seed"].isna().any():
            raise ValueError(
                "runs without a 'seed' tag: a power analysis pairs runs by seed; select the runs "
                "of a quadrants sweep (they carry it)"
            )
        labels = tables.row_labels(runs, table.row_tags)
        seeds, notes = _common_seeds(runs, labels)
        run_of = {
            (label, str(seed)): run_id
            for label, seed, run_id in zip(labels, runs["seed"].astype(str), runs["run_id"])
        }
        arms = tuple(table.rows)
        found = points.set_index(["run_id", "benchmark", "kind", "k"])["value"]
        values: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
        for bench, k in table.ks.items():
            if k is None:  # no common k: the table leaves the column blank, and so does this
                continue
            for kind in ("avg", "pass"):
                column: dict[str, dict[str, float]] = {}
                lacking = []
                for arm in arms:
                    for seed in seeds:
                        run_id = run_of[(arm, seed)]
                        key = (run_id, bench, kind, k)
                        if key not in found.index or (run_id, bench) in table.uncompared:
                            lacking.append(f"{arm} s{seed}")
                        else:
                            column.setdefault(arm, {})[seed] = float(found.loc[key])
                if lacking:
                    notes.append(
                        f"{bench} {kind.capitalize()}@{k}: missing (or evaluated on fewer problems "
                        f"than its column) in {lacking}, left out"
                    )
                else:
                    values[(bench, kind)] = column
        return cls(arms, seeds, run_of, values, tuple(notes))

    def detectable(
        self, alpha: float = 0.05, power_level: float = 0.8
    ) -> dict[tuple[str, str], float]:
        """{column: the minimal detectable paired difference at this pilot's seeds}; a column whose
        paired differences do not vary has none."""
        out = {}
        for column, values in self.values.items():
            sd = power.variance_split(values).diff_sd
            if sd > 0.0:
                out[column] = power.minimal_detectable_difference(
                    sd, len(self.seeds), alpha, power_level
                )
        return out


def _sampling(
    client: MlflowClient,
    run_id: str,
    eval_runs: Sequence[str],
    columns: Mapping[str, int],
    points: pd.DataFrame,
    counts: pd.DataFrame,
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    """{(benchmark, kind): this run's evaluation-sampling variance} and where each came from."""
    variances: dict[tuple[str, str], float] = {}
    sources: dict[tuple[str, str], str] = {}
    own = points[points["run_id"] == run_id]
    tables_found = load.newest_problem_tables(client, run_id, eval_runs, columns)
    stderr_keys = {bench: f"eval/{bench}/avg_at_{k}_stderr" for bench, k in columns.items()}
    logged = load.histories(client, [run_id, *eval_runs], stderr_keys.values())
    for bench, k in columns.items():
        at_k = own[(own["benchmark"] == bench) & (own["k"] == k)]
        if at_k.empty:
            continue
        step = int(at_k["step"].max())
        found = tables_found.get(bench)
        if found is not None and found[0] >= step:
            ns, cs = list(found[1]["n"]), list(found[1]["c"])
            if min(ns) >= max(2, k):
                variances[(bench, "avg")] = power.sampling_variance(ns, cs, 1)
                variances[(bench, "pass")] = power.sampling_variance(ns, cs, k)
                sources[(bench, "avg")] = sources[(bench, "pass")] = "per-problem counts"
                continue
        value = at_k.loc[at_k["kind"] == "avg", "value"]
        stderr = logged.loc[
            (logged["key"] == stderr_keys[bench]) & (logged["step"] == step), "value"
        ]
        problems = counts[
            (counts["run_id"] == run_id) & (counts["benchmark"] == bench) & (counts["step"] == step)
        ]["problems"]
        if len(value) and len(stderr) and len(problems) and int(problems.iloc[0]) >= 2 and k >= 2:
            variances[(bench, "avg")] = power.sampling_variance_from_stderr(
                float(value.iloc[0]), float(stderr.iloc[-1]), int(problems.iloc[0]), k
            )
            sources[(bench, "avg")] = "logged standard error"
    return variances, sources


def power_study(
    selection: load.Selection,
    *,
    rows: Sequence[str] | None = None,
    k: int | Mapping[str, int] | None = None,
    benchmarks: Sequence[str] | None = None,
    alpha: float = 0.05,
    power_level: float = 0.8,
    delta: float | None = None,
    planned: int | None = None,
    confidence: float = 0.95,
) -> PowerStudy:
    """Read the pilot the selection names and compute its power analysis.

    Raises:
        load.SelectionError: no runs. ValueError: runs without a seed tag, one arm, an arm with one
            seed, fewer than 2 seeds shared by every arm, or no metric to analyse.
    """
    client = MlflowClient(selection.tracking_uri)
    runset = load.select_runs(client, selection)
    runs = runset.runs
    finals = load.final_metrics(client, runset.run_ids, runset.eval_runs)
    points, counts = load.eval_points(finals), load.problem_counts(finals)
    table = tables.build_table(
        runs,
        points,
        rows=rows,
        k=k,
        benchmarks=benchmarks,
        confidence=confidence,
        problems=counts,
    )
    pilot = Pilot.of(table, runs, points)
    seeds, arms, run_of, notes = pilot.seeds, pilot.arms, pilot.run_of, list(pilot.notes)
    n = planned if planned is not None else len(seeds)
    columns = {bench: kk for bench, kk in table.ks.items() if kk is not None}
    per_run: dict[str, tuple[dict, dict]] = {
        run_id: _sampling(client, run_id, runset.eval_runs.get(run_id, []), columns, points, counts)
        for run_id in pilot.run_ids
    }

    def line(name, column, scale, unit, values, sampling, source) -> MetricPower:
        split = power.variance_split(values, sampling)
        if split.diff_sd == 0.0:  # equal paired differences: no spread seen, nothing to plan on
            notes.append(
                f"{name}: every paired difference is the same at these seeds: the pilot saw no "
                "spread, so no detectable difference or seed count is given (run more seeds)"
            )
            return MetricPower(name, column, scale, unit, split, source, math.nan, None)
        return MetricPower(
            name,
            column,
            scale,
            unit,
            split,
            source,
            power.minimal_detectable_difference(split.diff_sd, n, alpha, power_level),
            None if delta is None else power.seeds_needed(split.diff_sd, delta, alpha, power_level),
        )

    metrics = []
    for (bench, kind), values in pilot.values.items():
        sampling: dict[tuple[str, str], float] = {}
        sources = set()
        for arm in arms:
            for seed in seeds:
                variances, where = per_run[run_of[(arm, seed)]]
                if (bench, kind) in variances:
                    sampling[(arm, seed)] = variances[(bench, kind)]
                    sources.add(where[(bench, kind)])
        complete = len(sampling) == len(arms) * len(seeds)
        source = " and ".join(sorted(sources)) if complete else "not logged"
        name = f"{bench} {kind.capitalize()}@{table.ks[bench]}"
        metrics.append(line(name, (bench, kind), 100.0, "points", values, sampling, source))

    history = load.histories(client, list(per_run), [TRAIN_ENTROPY])
    last = history.sort_values("step").groupby("run_id")["value"].last()
    if all(run_of[(arm, seed)] in last.index for arm in arms for seed in seeds):
        values = {arm: {seed: float(last[run_of[(arm, seed)]]) for seed in seeds} for arm in arms}
        metrics.append(line(f"final {TRAIN_ENTROPY}", None, 1.0, "nats", values, {}, "not logged"))
    elif not history.empty:
        notes.append(f"{TRAIN_ENTROPY}: not logged by every run at the shared seeds, left out")
    if not metrics:
        raise ValueError("no metric that every arm logged at the shared seeds: nothing to analyse")

    # the table shows means over the pilot's own seeds: its marks are at that many seeds
    marked = tables.mark_below_detectable(
        table, pilot.detectable(alpha, power_level), len(seeds), alpha, power_level
    )
    return PowerStudy(
        runset.label,
        table.row_tags,
        arms,
        seeds,
        n,
        alpha,
        power_level,
        delta,
        tuple(metrics),
        marked,
        tuple(notes),
    )


def _number(value: float, scale: float, unit: str = "") -> str:
    if math.isnan(value):
        return "—"
    return f"{value * scale:.3g} {unit}".rstrip()


def to_markdown(study: PowerStudy) -> str:
    """The power table: one line per metric, then the notes."""
    lines = [
        f"Power analysis of {study.label}: {len(study.arms)} arms ({', '.join(study.row_tags)}: "
        f"{', '.join(study.arms)}) at the {len(study.seeds)} seeds they share "
        f"({', '.join(study.seeds)}). Variances over seeds in squared units (points² for Avg/Pass, "
        "in %; nats² for the entropy): within an arm = evaluation sampling + training seed; "
        "'shared' is the part of the training seed that every arm shares, which a paired "
        "comparison cancels. The minimal detectable difference (MDD) is the true paired "
        f"difference a two-sided paired t-test over {study.planned} seeds (alpha "
        f"{study.alpha:g}) detects with power {study.power:g}.",
        "",
    ]
    heads = [
        "metric",
        "within arm",
        "eval sampling",
        "training seed",
        "shared",
        "sd paired diff",
        f"MDD at {study.planned} seeds",
    ]
    if study.delta is not None:
        heads.append(f"seeds for {study.delta:g}")
    lines += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for metric in study.metrics:
        split, square = metric.split, metric.scale**2
        share = (
            f" ({100 * split.sampling / split.within:.0f} %)"
            if not math.isnan(split.sampling) and split.within > 0
            else ""
        )
        cells = [
            metric.name,
            _number(split.within, square),
            _number(split.sampling, square) + share,
            _number(split.training, square),
            _number(split.shared, square),
            _number(split.diff_sd, metric.scale, metric.unit),
            _number(metric.detectable, metric.scale, metric.unit),
        ]
        if study.delta is not None:
            if math.isnan(metric.detectable):
                cells.append("—")
            else:
                cells.append(f">{power.MAX_SEEDS}" if metric.needed is None else str(metric.needed))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Evaluation sampling from: "
        + "; ".join(f"{m.name}: {m.source}" for m in study.metrics)
        + f". Degrees of freedom of the paired sd: {study.metrics[0].split.diff_df} "
        "(arms - 1) x (seeds - 1); a negative component is an unbiased estimate of a part too "
        "small to see at this many seeds."
    )
    if study.delta is not None:
        lines.append(
            f"Seeds for {study.delta:g}: the fewest seeds at which the paired t-test detects a "
            f"true difference of {study.delta:g} (on the metric's own scale: {100 * study.delta:g} "
            f"points of Avg/Pass, {study.delta:g} nats of entropy) with power {study.power:g}."
        )
    lines += [f"- {note}" for note in study.notes]
    return "\n".join(lines) + "\n"
