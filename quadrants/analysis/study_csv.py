"""A study's per-run table as a small CSV, and every published figure recomputed from it.

`python -m analysis export --sweep-id S --out study.csv` writes one line per (run, benchmark) of a
sweep from MLflow (`study_frame`): the arm (the table's row label), the seed, the step-0 and final
Avg@k and Pass@k with their steps, the final Avg@k's standard error, the problem count, the final
evaluation's per-problem correct counts (when the evaluation runner logged its `counts.csv`), the
final training entropy, the mean over steps of each quadrant's `shared_frac`, and the mean over
steps of every logged figure of what the run trains (`TRAINED`: kept and gradient-carrying
tokens, rows, advantage mass; a control's also of the arm it matches, its per-mini-batch count gap
and HT noise). Committed next to a doc, it is the data every number of the doc's study tables is
recomputed from (`recompute`; tests/unit/analysis/test_study_csv.py checks a doc's tables against
it, table by table).

The recomputation uses the same statistics as `python -m analysis` (`analysis.stats`,
`analysis.hypothesis`, `analysis.power`), on the CSV alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient

from quadrants.analysis import hypothesis, load, power, tables
from quadrants.analysis.stats import SeedEstimate, seed_estimate

QUADRANTS = ("PHR", "PLR", "NHR", "NLR")
ENTROPY = "train/entropy"
# what a run trains, per step (train/telemetry.py `gradient_figures`, train/telemetry.py
# `control_telemetry`): its kept and gradient-carrying tokens (per sign), rows and advantage mass;
# under a random control the same of the arm it matches (`matched/`), the largest per-mini-batch
# count gap and the HT estimator's relative noise (`control/`)
TRAINED = re.compile(
    r"train/((matched/)?(kept_tokens|grad_tokens|grad_rows|grad_adv_mass)[a-z_]*|control/[a-z_]+)$"
)
COLUMNS = (
    "arm",
    "seed",
    "run_name",
    "benchmark",
    "k",
    "step0_avg",
    "step0_pass",
    "final_step",
    "final_avg",
    "final_pass",
    "final_avg_stderr",
    "problems",
    "samples",
    "correct_counts",
    "final_entropy",
)


def _mean_over_steps(history: pd.DataFrame, run_id: str, key: str) -> float:
    values = history.loc[(history["run_id"] == run_id) & (history["key"] == key), "value"]
    return float(values.mean()) if len(values) else math.nan


def study_frame(
    client: MlflowClient, selection: load.Selection, rows: Sequence[str] | None = None
) -> pd.DataFrame:
    """The per-run table of the runs `selection` names (see the module docstring): `COLUMNS`,
    then `shared_frac_<Q>` and `<token key>_mean` columns. Rows sorted by arm, seed, benchmark.

    Raises:
        load.SelectionError: nothing selected. ValueError: no evaluation, no seed tags.
    """
    runset = load.select_runs(client, selection)
    runs = runset.runs
    if "seed" not in runs:
        raise ValueError("the runs carry no 'seed' tag: select the runs of a quadrants sweep")
    finals = load.final_metrics(client, runset.run_ids, runset.eval_runs)
    points, counts = load.eval_points(finals), load.problem_counts(finals)
    table = tables.build_table(runs, points, rows=rows, problems=counts)
    labels = tables.row_labels(runs, table.row_tags)
    eval_keys = [
        f"eval/{bench}/{kind}_at_{k}"
        for bench, k in table.ks.items()
        if k is not None
        for kind in ("avg", "pass")
    ]
    stderr_keys = [f"eval/{bench}/avg_at_{k}_stderr" for bench, k in table.ks.items() if k]
    early = load.histories(client, runset.run_ids, [*eval_keys, *stderr_keys])
    shared = [f"train/quadrant/{q}/shared_frac" for q in QUADRANTS]
    token_keys = [
        key for key in load.metric_keys(client, runset.run_ids, "train/") if TRAINED.match(key)
    ]
    history = load.histories(client, runset.run_ids, [ENTROPY, *shared, *token_keys])
    records = []
    for run_id, label, seed, name in zip(runs["run_id"], labels, runs["seed"], runs["run_name"]):
        entropy = history[(history["run_id"] == run_id) & (history["key"] == ENTROPY)]
        found = load.newest_problem_tables(
            client, run_id, runset.eval_runs.get(run_id, []), table.ks
        )
        for bench, k in table.ks.items():
            if k is None:
                continue
            mine = points[
                (points["run_id"] == run_id) & (points["benchmark"] == bench) & (points["k"] == k)
            ]
            if mine.empty:
                continue
            final = {row.kind: row for row in mine.itertuples(index=False)}
            step = int(max(row.step for row in final.values()))
            start = {}
            for kind in ("avg", "pass"):
                part = early[
                    (early["run_id"] == run_id) & (early["key"] == f"eval/{bench}/{kind}_at_{k}")
                ]
                first = part[part["step"] == 0]
                start[kind] = float(first["value"].iloc[-1]) if len(first) else math.nan
            stderr = early[
                (early["run_id"] == run_id)
                & (early["key"] == f"eval/{bench}/avg_at_{k}_stderr")
                & (early["step"] == step)
            ]["value"]
            problems = counts[
                (counts["run_id"] == run_id)
                & (counts["benchmark"] == bench)
                & (counts["step"] == step)
            ]["problems"]
            problem_table = found.get(bench)
            exact = problem_table is not None and problem_table[0] >= step
            record = {
                "arm": label,
                "seed": int(seed),
                "run_name": name,
                "benchmark": bench,
                "k": int(k),
                "step0_avg": start["avg"],
                "step0_pass": start["pass"],
                "final_step": step,
                "final_avg": float(final["avg"].value) if "avg" in final else math.nan,
                "final_pass": float(final["pass"].value) if "pass" in final else math.nan,
                "final_avg_stderr": float(stderr.iloc[-1]) if len(stderr) else math.nan,
                "problems": int(problems.iloc[0]) if len(problems) else None,
                "samples": ";".join(map(str, problem_table[1]["n"])) if exact else "",
                "correct_counts": ";".join(map(str, problem_table[1]["c"])) if exact else "",
                "final_entropy": float(entropy.sort_values("step")["value"].iloc[-1])
                if len(entropy)
                else math.nan,
            }
            for q, key in zip(QUADRANTS, shared, strict=True):
                record[f"shared_frac_{q}"] = _mean_over_steps(history, run_id, key)
            for key in token_keys:
                record[f"{key.removeprefix('train/')}_mean"] = _mean_over_steps(
                    history, run_id, key
                )
            records.append(record)
    frame = pd.DataFrame(records)
    frame["problems"] = frame["problems"].astype("Int64")
    return frame.sort_values(["arm", "seed", "benchmark"]).reset_index(drop=True)


# --- recomputation from the CSV ------------------------------------------------------------------


def read_study(path) -> pd.DataFrame:  # noqa: ANN001 - a path or a file
    """A CSV written by `study_frame` (seed as int, counts as strings)."""
    frame = pd.read_csv(path, dtype={"samples": str, "correct_counts": str, "arm": str})
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a study CSV, columns {missing} are missing")
    return frame.fillna({"samples": "", "correct_counts": ""})


def values_of(
    frame: pd.DataFrame, column: str, benchmark: str | None = None
) -> dict[str, dict[int, float]]:
    """{arm: {seed: value}} of one column (of one benchmark; None: the only one)."""
    if benchmark is None:
        names = sorted(set(frame["benchmark"]))
        if len(names) != 1:
            raise ValueError(f"the study has benchmarks {names}: name one")
        benchmark = names[0]
    part = frame[frame["benchmark"] == benchmark]
    out: dict[str, dict[int, float]] = {}
    for row in part.itertuples(index=False):
        out.setdefault(row.arm, {})[int(row.seed)] = float(getattr(row, column))
    return out


@dataclass(frozen=True)
class Difference:
    """A − B over the common seeds, on the metric's scale, with every test of `analysis.paired`."""

    a: str
    b: str
    differences: tuple[float, ...]
    estimate: SeedEstimate
    sd: float
    detectable: float
    needed: int | None
    t_p: float
    tost_p: float
    sign_p: float
    holm_p: float = math.nan

    @property
    def ahead(self) -> int:
        return sum(d > 0 for d in self.differences)


def difference(
    values: Mapping[str, Mapping[int, float]],
    a: str,
    b: str,
    *,
    margin: float = 0.05,
    confidence: float = 0.95,
    alpha: float = 0.05,
    power_level: float = 0.8,
) -> Difference:
    """A − B seed by seed over the seeds both ran."""
    seeds = sorted(set(values[a]) & set(values[b]))
    diffs = tuple(values[a][s] - values[b][s] for s in seeds)
    if len(diffs) < 2:
        raise ValueError(f"{a} and {b} share {len(diffs)} seed(s); a paired test needs 2")
    sd = float(np.std(diffs, ddof=1))
    return Difference(
        a,
        b,
        diffs,
        seed_estimate(diffs, confidence),
        sd,
        power.minimal_detectable_difference(sd, len(diffs), alpha, power_level),
        power.seeds_needed(sd, margin, alpha, power_level),
        hypothesis.paired_t_p(diffs),
        hypothesis.tost_p(diffs, margin),
        hypothesis.sign_test_p(diffs),
    )


def family(found: Sequence[Difference]) -> list[Difference]:
    """The comparisons of one table with their Holm-adjusted p-values."""
    from dataclasses import replace

    adjusted = hypothesis.holm([d.t_p for d in found])
    return [replace(d, holm_p=p) for d, p in zip(found, adjusted, strict=True)]


def pooled_split(
    frame: pd.DataFrame, column: str, arms: Sequence[str], benchmark: str | None = None
) -> power.VarianceSplit:
    """The variance split of one column over `arms` at the seeds they all ran, with each run's
    evaluation-sampling variance from its per-problem counts (Avg@k: k = 1; Pass@k: the CSV's k)
    where the CSV has them, else for Avg@k from its logged standard error
    (`power.sampling_variance_from_stderr`, as `python -m analysis power` does)."""
    values = values_of(frame, column, benchmark)
    seeds = sorted(set.intersection(*(set(values[a]) for a in arms)))
    chosen = {a: {s: values[a][s] for s in seeds} for a in arms}
    sampling: dict[tuple[str, int], float] = {}
    part = frame if benchmark is None else frame[frame["benchmark"] == benchmark]
    for row in part.itertuples(index=False):
        if row.arm not in chosen or int(row.seed) not in seeds:
            continue
        if row.correct_counts:
            ns = [int(v) for v in str(row.samples).split(";")]
            cs = [int(v) for v in str(row.correct_counts).split(";")]
            k = 1 if column.endswith("avg") else int(row.k)
            sampling[(row.arm, int(row.seed))] = power.sampling_variance(ns, cs, k)
        elif column == "final_avg" and not math.isnan(row.final_avg_stderr) and row.problems:
            # no per-problem counts (an in-training evaluation logs none): Avg@k's from its
            # logged standard error over the problems, every problem with k answers
            sampling[(row.arm, int(row.seed))] = power.sampling_variance_from_stderr(
                float(row.final_avg), float(row.final_avg_stderr), int(row.problems), int(row.k)
            )
    return power.variance_split(chosen, sampling)


# --- the doc's tables -----------------------------------------------------------------------------

_NUMBER = r"[+\-−]?\d+(?:\.\d+)?"


def numbers(text: str) -> list[float]:
    """Every number in a table cell, "−" read as a minus: "−1.1 [+2.9]" -> [-1.1, 2.9]."""
    return [float(n.replace("−", "-")) for n in re.findall(_NUMBER, text)]


def markdown_table(doc: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line containing `heading` (header and
    separator rows dropped)."""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if heading in line)
    except StopIteration:
        raise ValueError(f"no line with {heading!r} in the doc") from None
    rows, seen = [], False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            seen = True
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif seen:
            break
    if len(rows) < 2:
        raise ValueError(f"no Markdown table after {heading!r}")
    return rows[2:]


def arm_rows(frame: pd.DataFrame, confidence: float = 0.95) -> list[list[str]]:
    """The arms table as the docs print it: arm | Avg@k mean ± half-width | Pass@k | Avg@k per
    seed | final entropy range (points, %; entropy in nats), one benchmark."""
    avg, pas = values_of(frame, "final_avg"), values_of(frame, "final_pass")
    entropy = values_of(frame, "final_entropy")
    out = []
    for arm in sorted(avg):
        seeds = sorted(avg[arm])
        a = seed_estimate([avg[arm][s] for s in seeds], confidence)
        p = seed_estimate([pas[arm][s] for s in seeds], confidence)
        ent = [entropy[arm][s] for s in seeds]
        out.append(
            [
                arm,
                f"{100 * a.mean:.1f} ± {100 * a.half_width:.1f}",
                f"{100 * p.mean:.1f} ± {100 * p.half_width:.1f}",
                " / ".join(f"{100 * avg[arm][s]:.1f}" for s in seeds),
                f"{min(ent):.3f}–{max(ent):.3f}",
            ]
        )
    return out


def base_row(frame: pd.DataFrame, confidence: float = 0.95) -> list[str]:
    """The arms table's row of the starting policy: every seed's step-0 evaluation (the same in
    each arm of a seed: one value per seed), as the docs print it."""
    if (frame.groupby("seed")[["step0_avg", "step0_pass"]].nunique() > 1).any().any():
        raise ValueError("the arms of a seed differ at step 0: not one starting evaluation")
    first = frame.groupby("seed")[["step0_avg", "step0_pass"]].first()
    a = seed_estimate(list(first["step0_avg"]), confidence)
    p = seed_estimate(list(first["step0_pass"]), confidence)
    return [
        "base (step 0)",
        f"{100 * a.mean:.1f} ± {100 * a.half_width:.1f}",
        f"{100 * p.mean:.1f} ± {100 * p.half_width:.1f}",
        "(each seed's step-0 evaluation)",
        "",
    ]


def difference_rows(
    frame: pd.DataFrame, pairs: Sequence[tuple[str, str]], margin: float = 0.05
) -> list[list[str]]:
    """The paired table as the docs print it, one row per pair: comparison | Avg@k difference
    [CI] | Pass@k difference [CI] | ahead (Avg, Pass) | own MDD (Avg) | TOST p (Avg) | Holm p (Avg,
    over the table's pairs) | sign p (Avg)."""
    avg, pas = values_of(frame, "final_avg"), values_of(frame, "final_pass")
    on_avg = family([difference(avg, a, b, margin=margin) for a, b in pairs])
    on_pass = [difference(pas, a, b, margin=margin) for a, b in pairs]
    out = []
    for d, p in zip(on_avg, on_pass, strict=True):
        e, f = d.estimate, p.estimate
        out.append(
            [
                f"{d.a} − {d.b}",
                f"{100 * e.mean:+.1f} [{100 * e.low:+.1f}, {100 * e.high:+.1f}]",
                f"{100 * f.mean:+.1f} [{100 * f.low:+.1f}, {100 * f.high:+.1f}]",
                f"{d.ahead}/{len(d.differences)}, {p.ahead}/{len(p.differences)}",
                f"{100 * d.detectable:.1f}",
                f"{d.tost_p:.3f}",
                f"{d.holm_p:.3f}",
                f"{d.sign_p:.4f}",
            ]
        )
    return out


def mismatches(
    printed: Sequence[Sequence[str]], recomputed: Sequence[Sequence[str]], slack: float = 0.0
) -> list[str]:
    """Where a doc's table (its cells) and the recomputed one differ, number by number at the
    printed precision (a printed 86.0 matches 85.97), plus `slack` (for figures recomputed from
    rounded inputs); [] when every number agrees."""
    wrong = []
    by_label = {row[0]: row for row in recomputed}
    for row in printed:
        label = row[0]
        if label not in by_label:
            wrong.append(f"row {label!r}: not recomputed from the CSV")
            continue
        for column, (cell, fresh) in enumerate(zip(row[1:], by_label[label][1:]), start=1):
            got, want = numbers(cell), numbers(fresh)
            if len(got) != len(want):
                wrong.append(f"{label!r} column {column}: printed {cell!r}, recomputed {fresh!r}")
                continue
            for g, w, text in zip(got, want, re.findall(_NUMBER, cell), strict=True):
                decimals = len(text.split(".")[1]) if "." in text else 0
                if abs(g - w) > 0.5 * 10**-decimals + slack + 1e-9:
                    wrong.append(
                        f"{label!r} column {column}: printed {cell!r}, recomputed {fresh!r}"
                    )
                    break
    return wrong
