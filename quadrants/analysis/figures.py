"""The paper's figures with matplotlib (Agg backend), each written as PNG and SVG.

Every function takes plain data (frames of metric histories, dicts of curves, sample records) and an
output directory, and returns the paths it wrote. The curves over steps and over k draw each row
(method) as its mean over seeds with a shaded 95 % Student-t band, one colour per row kept across
figures, the legend outside the axes; single seeds are an option (`per_seed`). Per-run panels are
labelled "<row> s<seed>".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from quadrants.analysis.serial import prewhitened_test

QUADRANTS = ("PHR", "PLR", "NHR", "NLR")
QUADRANT_COLORS = {"PHR": "#1b7837", "PLR": "#7fbf7b", "NHR": "#b2182b", "NLR": "#ef8a62"}
_DPI = 100


def _save(fig: Any, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=_DPI, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def _palette(rows: Sequence[str]) -> dict[str, Any]:
    """Quadrant rows keep the quadrant colours; other rows take tab10 colours in label order."""
    cmap = plt.get_cmap("tab10")
    others = [row for row in sorted(set(rows)) if row not in QUADRANT_COLORS]
    return {
        **{row: QUADRANT_COLORS[row] for row in set(rows) if row in QUADRANT_COLORS},
        **{row: cmap(i % 10) for i, row in enumerate(others)},
    }


def _grid(
    count: int, width: float = 4.0, height: float = 3.0, cols: int = 4
) -> tuple[Any, list[Any]]:
    cols = max(1, min(cols, count))
    lines = math.ceil(count / cols)
    fig, axes = plt.subplots(
        lines, cols, figsize=(width * cols, height * lines), squeeze=False, layout="constrained"
    )
    flat = list(axes.ravel())
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def _row_order(rows: Sequence[str]) -> list[str]:
    """Quadrant rows in the paper's order (PHR, PLR, NHR, NLR), then the others sorted."""
    present = set(rows)
    return [q for q in QUADRANTS if q in present] + sorted(present - set(QUADRANTS))


def mean_band(points: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean over runs (seeds) at each x, with the Student-t interval of `analysis.stats`.

    Args:
        points: columns x, value; one row per (run, x).

    Returns:
        x (sorted), mean, low, high, n; low/high are NaN where fewer than 2 runs have the x.
    """
    from quadrants.analysis.stats import t_quantile

    grouped = points.groupby("x")["value"]
    band = pd.DataFrame({"mean": grouped.mean(), "sd": grouped.std(ddof=1), "n": grouped.count()})
    quantile = band["n"].map(lambda n: t_quantile(confidence, int(n) - 1) if n >= 2 else math.nan)
    half = quantile * band["sd"] / np.sqrt(band["n"])
    band["low"], band["high"] = band["mean"] - half, band["mean"] + half
    return band.reset_index()[["x", "mean", "low", "high", "n"]]


def _mean_line(
    ax: Any,
    points: pd.DataFrame,
    confidence: float,
    *,
    color: Any,
    label: str,
    linewidth: float,
    alpha: float,
    linestyle: str = "-",
    marker: str | None = None,
) -> None:
    """The mean over runs of `points` (x, value) as a line, with its t-band shaded where
    some x has 2 or more runs."""
    band = mean_band(points, confidence)
    ax.plot(
        band["x"],
        band["mean"],
        color=color,
        linestyle=linestyle,
        linewidth=linewidth,
        marker=marker,
        markersize=3,
        label=label,
    )
    if band["low"].notna().any():
        ax.fill_between(band["x"], band["low"], band["high"], color=color, alpha=alpha, linewidth=0)


def _draw_rows(
    ax: Any,
    per_run: Mapping[str, pd.DataFrame],
    runs: pd.DataFrame,
    colors: Mapping[str, Any],
    per_seed: bool,
    confidence: float,
    label_suffix: Mapping[str, str] | None = None,
    marker: str | None = None,
) -> None:
    """One mean line and shaded band per row over its runs; `per_seed` adds each run's thin line.

    Args:
        per_run: {run_id: frame with columns x, value}.
        runs: run_id, row, seed.
    """
    for row in _row_order(list(runs["row"])):
        members = runs[runs["row"] == row]
        frames = [
            per_run[r].assign(run_id=r)
            for r in members["run_id"]
            if r in per_run and not per_run[r].empty
        ]
        if not frames:
            continue
        seeds = len(frames)
        label = f"{row} (mean of {seeds} seeds)" if seeds > 1 else f"{row} (1 seed)"
        label += (label_suffix or {}).get(row, "")
        _mean_line(
            ax,
            pd.concat(frames, ignore_index=True),
            confidence,
            color=colors[row],
            label=label,
            linewidth=1.8,
            alpha=0.18,
            marker=marker,
        )
        if per_seed:
            for frame in frames:
                ax.plot(frame["x"], frame["value"], color=colors[row], linewidth=0.7, alpha=0.45)


def _legend_outside(ax: Any, confidence: float, per_seed: bool) -> None:
    """The legend right of the axes (never over the curves), saying what the
    band and thin lines are."""
    handles, labels = ax.get_legend_handles_labels()
    title = f"shaded: {confidence:.0%} t-interval over seeds" + (
        "\nthin lines: single seeds" if per_seed else ""
    )
    ax.legend(
        handles,
        labels,
        fontsize=8,
        title=title,
        title_fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        frameon=False,
    )


def training_curve(
    history: pd.DataFrame,
    key: str,
    runs: pd.DataFrame,
    out: Path,
    stem: str,
    ylabel: str,
    log_y: bool = False,
    per_seed: bool = False,
    confidence: float = 0.95,
) -> list[Path]:
    """Metric `key` over training steps: per row (method) the mean over its seeds, with a shaded
    `confidence` band (Student t, rows with two or more seeds) and one colour per row.

    Args:
        history: run_id, key, step, value (`analysis.load.histories`).
        runs: run_id, row (the table's row label), seed.
        per_seed: also draw each run as a thin line of its row's colour.
    """
    part = history[history["key"] == key]
    if part.empty:
        raise ValueError(f"no run logged {key!r}: cannot draw {stem}")
    per_run = {
        run_id: points.rename(columns={"step": "x"})[["x", "value"]]
        for run_id, points in part.groupby("run_id")
    }
    fig, ax = plt.subplots(figsize=(6.4, 3.8), layout="constrained")
    _draw_rows(ax, per_run, runs, _palette(runs["row"]), per_seed, confidence)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    _legend_outside(ax, confidence, per_seed)
    ax.set_title(key)
    return _save(fig, out, stem)


def pass_at_k_curves(
    curves: Mapping[str, Mapping[str, Mapping[int, float]]],
    runs: pd.DataFrame,
    out: Path,
    sources: Mapping[str, str] | None = None,
    per_seed: bool = False,
    confidence: float = 0.95,
) -> list[Path]:
    """Pass@k against k (log-2 axis), one panel per benchmark; per row the mean over its seeds with
    a shaded `confidence` band, one colour per row (`per_seed`: each run as a thin line too).

    Args:
        curves: {run_id: {benchmark: {k: Pass@k}}}.
        runs: run_id, row, seed.
        sources: {run_id: "(n, c) table" | "logged points"}, shown in the legend per row.
    """
    benchmarks = sorted({b for per in curves.values() for b in per})
    if not benchmarks:
        raise ValueError("no Pass@k points in any run: cannot draw pass_at_k")
    colors = _palette(runs["row"])
    suffix = {}
    if sources:
        for row, members in runs.groupby("row"):
            kinds = sorted({sources[r] for r in members["run_id"] if r in sources})
            suffix[row] = f"\n  from {', '.join(kinds)}" if kinds else ""
    fig, axes = _grid(len(benchmarks), 4.5, 3.4, cols=3)
    for ax, bench in zip(axes, benchmarks):
        per_run = {
            run_id: pd.DataFrame(
                {
                    "x": sorted(per[bench]),
                    "value": [100 * per[bench][k] for k in sorted(per[bench])],
                }
            )
            for run_id, per in curves.items()
            if per.get(bench)
        }
        ks_all = sorted({k for per in curves.values() for k in per.get(bench, {})})
        _draw_rows(ax, per_run, runs, colors, per_seed, confidence, suffix, marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks_all, [str(k) for k in ks_all])
        ax.set_xlabel("k")
        ax.set_ylabel("Pass@k (%)")
        ax.set_title(bench)
        ax.grid(alpha=0.3)
    _legend_outside(axes[-1], confidence, per_seed)
    return _save(fig, out, "pass_at_k")


def dlogp_by_quadrant(history: pd.DataFrame, runs: pd.DataFrame, out: Path) -> list[Path]:
    """Per run, mean |Δ log-prob| of each quadrant's tokens over steps, log y-axis.

    Zero values (an empty quadrant reports 0) cannot be drawn on a log axis and are left out.
    """
    keys = {q: f"train/quadrant/{q}/dlogp_abs" for q in QUADRANTS}
    present = runs[runs["run_id"].isin(history.loc[history["key"].isin(keys.values()), "run_id"])]
    if present.empty:
        raise ValueError("no run logged train/quadrant/<Q>/dlogp_abs: cannot draw dlogp_abs")
    fig, axes = _grid(len(present), 3.6, 2.8)
    for ax, run in zip(axes, present.itertuples(index=False)):
        for q, key in keys.items():
            points = history[
                (history["run_id"] == run.run_id) & (history["key"] == key) & (history["value"] > 0)
            ]
            if not points.empty:
                ax.plot(
                    points["step"],
                    points["value"],
                    color=QUADRANT_COLORS[q],
                    label=q,
                    linewidth=1.2,
                )
        ax.set_yscale("log")
        ax.set_title(f"{run.row} s{run.seed}", fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylabel("|Δ log-prob|")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, out, "dlogp_abs_by_quadrant")


FLIP_STATS = (
    ("flip_frac", "flip fraction"),
    ("dlogp_signed", "mean signed Δ log-prob"),
)
FLIP_PARTS = (("_shared", "shared", "-"), ("_unique", "unique", "--"))


def flips_by_quadrant(
    history: pd.DataFrame, runs: pd.DataFrame, out: Path, confidence: float = 0.95
) -> list[Path]:
    """The flip and cancellation diagnostics over steps: a grid of 2 rows (the flip fraction, the
    mean signed Δ log-prob) by the 4 quadrants; in each panel, per arm (row of `runs`), the mean
    over its seeds of the quadrant's shared tokens (solid) and unique tokens (dashed), with the
    t-band where an arm has 2 or more seeds. Keys train/quadrant/<Q>/{flip_frac,dlogp_signed}_
    {shared,unique} (train/telemetry.py); a quadrant an arm never trained logs 0 flips.

    Args:
        history: run_id, key, step, value.
        runs: run_id, row, seed.
    """
    wanted = {
        f"train/quadrant/{q}/{stat}{suffix}"
        for q in QUADRANTS
        for stat, _ in FLIP_STATS
        for suffix, _, _ in FLIP_PARTS
    }
    logged = history[history["key"].isin(wanted)]
    if logged.empty:
        raise ValueError(
            "no run logged train/quadrant/<Q>/flip_frac_shared (train.measure_dlogp): "
            "cannot draw flips_by_quadrant"
        )
    colors = _palette(list(runs["row"]))
    fig, axes = plt.subplots(
        len(FLIP_STATS),
        len(QUADRANTS),
        figsize=(3.6 * len(QUADRANTS), 2.8 * len(FLIP_STATS)),
        squeeze=False,
        layout="constrained",
    )
    for i, (stat, label) in enumerate(FLIP_STATS):
        for j, q in enumerate(QUADRANTS):
            ax = axes[i][j]
            for row in _row_order(list(runs["row"])):
                members = set(runs.loc[runs["row"] == row, "run_id"])
                for suffix, part, style in FLIP_PARTS:
                    key = f"train/quadrant/{q}/{stat}{suffix}"
                    points = logged[(logged["key"] == key) & logged["run_id"].isin(members)]
                    if points.empty:
                        continue
                    _mean_line(
                        ax,
                        points.rename(columns={"step": "x"})[["x", "value"]],
                        confidence,
                        color=colors[row],
                        label=f"{row} {part}",
                        linewidth=1.4,
                        alpha=0.15,
                        linestyle=style,
                    )
            if stat == "dlogp_signed":
                ax.axhline(0.0, color="0.5", linewidth=0.6)
            ax.set_title(f"{q} · {label}", fontsize=10)
            ax.set_xlabel("training step")
            ax.grid(alpha=0.3)
    labelled: dict[str, Any] = {}  # every panel's lines, once each, in the legend of the first row
    for ax in axes.ravel():
        for handle, name in zip(*ax.get_legend_handles_labels()):
            labelled.setdefault(name, handle)
    axes[0][-1].legend(
        list(labelled.values()),
        list(labelled.keys()),
        fontsize=7,
        title=f"solid: shared, dashed: unique\nshaded: {confidence:.0%} t-interval over seeds",
        title_fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        frameon=False,
    )
    return _save(fig, out, "flips_by_quadrant")


def entropy_prediction(history: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run and quadrant, how well Cui et al.'s covariance term predicts the measured entropy
    change, over steps and within them.

    Over steps: Pearson and Spearman correlation of −cov (`train/quadrant/<Q>/cov`, the predicted
    direction: a positive covariance lowers the entropy) with `entropy_change`, and the
    autocorrelation-aware test of analysis/serial.py (`r_white`, `p_white`: the correlation of
    the two series prewhitened by their own AR(1), and its p-value; `n_eff`, Pyper–Peterman's
    effective sample size, for reading); the same for the per-state estimate −cov_state
    (`*_state` columns, NaN where it was not logged).

    Within steps: `token_r` (the per-step correlation over the quadrant's tokens of
    −(log π + H) w with ΔH, telemetry `train/quadrant/<Q>/token_r`): its mean over steps
    `token_r_mean`, the fraction of steps where it is positive `token_r_pos`, and `token_steps`.

    Args:
        history: run_id, key, step, value (analysis.load.histories).
        runs: run_id, row, seed.

    Returns:
        one row per run and quadrant with the columns above (NaN with fewer than 3 points or a
        constant series; the prewhitened test needs 5).
    """
    rows = []
    for run in runs.itertuples(index=False):
        mine = history[history["run_id"] == run.run_id]
        for q in QUADRANTS:
            row = {"run_id": run.run_id, "row": run.row, "seed": run.seed, "quadrant": q}
            for predictor, suffix in (("cov", ""), ("cov_state", "_state")):
                pair = _paired_points(mine, q, predictor)
                if not suffix:
                    row["steps"] = len(pair)
                row[f"pearson{suffix}"], row[f"spearman{suffix}"] = _correlations(pair)
                test = prewhitened_test(pair["predicted"].to_numpy(), pair["measured"].to_numpy())
                row[f"r_white{suffix}"], row[f"p_white{suffix}"] = test.r_white, test.p
                row[f"n_eff{suffix}"] = test.n_eff
            token_r = mine.loc[mine["key"] == f"train/quadrant/{q}/token_r", "value"].dropna()
            row["token_steps"] = len(token_r)
            row["token_r_mean"] = float(token_r.mean()) if len(token_r) else math.nan
            row["token_r_pos"] = float((token_r > 0).mean()) if len(token_r) else math.nan
            rows.append(row)
    over_steps = ["pearson", "spearman", "r_white", "p_white", "n_eff"]
    columns = ["run_id", "row", "seed", "quadrant", "steps", *over_steps]
    state = [f"{c}_state" for c in over_steps]
    return pd.DataFrame(
        rows, columns=[*columns, *state, "token_steps", "token_r_mean", "token_r_pos"]
    )


def _correlations(pair: pd.DataFrame) -> tuple[float, float]:
    """(Pearson, Spearman) of predicted with measured; NaN with < 3 points or a constant one."""
    if len(pair) < 3 or not (pair["predicted"].std() > 0 and pair["measured"].std() > 0):
        return math.nan, math.nan
    return (
        float(pair["predicted"].corr(pair["measured"])),
        float(pair["predicted"].corr(pair["measured"], method="spearman")),
    )


def _paired_points(history: pd.DataFrame, q: str, predictor: str = "cov") -> pd.DataFrame:
    """step, predicted (−`predictor`: cov or cov_state), measured (entropy_change) of one run's
    quadrant, the steps with both."""
    series = {
        name: history[history["key"] == f"train/quadrant/{q}/{stat}"].set_index("step")["value"]
        for name, stat in (("predicted", predictor), ("measured", "entropy_change"))
    }
    pair = pd.concat(series, axis=1, join="inner").dropna()
    pair["predicted"] = -pair["predicted"]
    return pair.reset_index()


def entropy_change_by_quadrant(history: pd.DataFrame, runs: pd.DataFrame, out: Path) -> list[Path]:
    """Per run, one panel per quadrant over steps: the measured entropy change of the quadrant's
    tokens (its part of the batch's mean entropy change, nats, left axis, quadrant colour) against
    Cui et al.'s prediction −cov (right axis, black dashed: the scale is not predicted), titled with
    their Pearson correlation over steps and that of the per-state estimate −cov_state."""
    measured = {f"train/quadrant/{q}/entropy_change" for q in QUADRANTS}
    present = runs[runs["run_id"].isin(history.loc[history["key"].isin(measured), "run_id"])]
    if present.empty:
        raise ValueError(
            "no run logged train/quadrant/<Q>/entropy_change (train.measure_dlogp): "
            "cannot draw entropy_change_by_quadrant"
        )
    scores = entropy_prediction(history, present).set_index(["run_id", "quadrant"])
    fig, axes = _grid(4 * len(present), 3.4, 2.6)
    for i, run in enumerate(present.itertuples(index=False)):
        mine = history[history["run_id"] == run.run_id]
        for ax, q in zip(axes[4 * i : 4 * i + 4], QUADRANTS):
            pair = _paired_points(mine, q)
            ax.axhline(0.0, color="0.6", linewidth=0.6)
            ax.plot(pair["step"], pair["measured"], color=QUADRANT_COLORS[q], linewidth=1.4)
            ax.set_ylabel("measured ΔH (nats)", fontsize=8)
            twin = ax.twinx()
            twin.plot(pair["step"], pair["predicted"], color="black", linestyle="--", linewidth=1)
            twin.set_ylabel("−cov (predicted)", fontsize=8)
            r, p, r_state, p_state = scores.loc[
                (run.run_id, q), ["pearson", "p_white", "pearson_state", "p_white_state"]
            ]
            label = run.row if len(run.row) <= 24 else run.row[:23] + "…"
            ax.set_title(
                f"{label} s{run.seed} · {q}\nr = {r:.2f} (p {p:.2f}); cov_state r = "
                f"{r_state:.2f} (p {p_state:.2f})",
                fontsize=8,
            )
            ax.set_xlabel("training step")
            ax.grid(alpha=0.3)
    return _save(fig, out, "entropy_change_by_quadrant")


def token_arrays(records: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(advantage, entropy) per response token of sample records (each token carries
    its response's advantage)."""
    advantages, entropies = [], []
    for record in records:
        tokens = record.get("tokens", [])
        advantages += [float(record["advantage"])] * len(tokens)
        entropies += [float(t["entropy"]) for t in tokens]
    return np.asarray(advantages, dtype=np.float64), np.asarray(entropies, dtype=np.float64)


def _rows_with_samples(samples: Mapping[str, Sequence[Mapping[str, Any]]], what: str) -> list[str]:
    """The rows (sorted) that have sample artifacts; raises if none has any."""
    rows = [r for r in sorted(samples) if samples[r]]
    if not rows:
        raise ValueError(f"no sample artifacts in any run: cannot draw {what}")
    return rows


def advantage_histograms(
    samples: Mapping[str, Sequence[Mapping[str, Any]]], out: Path
) -> list[Path]:
    """Histogram of token advantages per method (row), over the tokens of its sample artifacts.

    The samples carry the sequence advantage (GRPO/DAPO's), so a token's advantage here is its
    response's; objective-specific token reshaping (HAPO, EntroAdv) is not in the artifact.
    """
    rows = _rows_with_samples(samples, "advantage histograms")
    fig, axes = _grid(len(rows), 3.6, 2.8)
    for ax, row in zip(axes, rows):
        adv, _ = token_arrays(samples[row])
        ax.hist(adv, bins=31, color="#4c72b0")
        ax.set_yscale("log")
        ax.set_title(f"{row} ({adv.size} tokens)", fontsize=10)
        ax.set_xlabel("token advantage")
        ax.set_ylabel("tokens")
    return _save(fig, out, "token_advantage_hist")


def entropy_by_polarity(
    samples: Mapping[str, Sequence[Mapping[str, Any]]], out: Path
) -> list[Path]:
    """Token entropy distributions of positive (advantage > 0) vs negative (< 0) tokens, per method.

    Tokens with advantage exactly 0 (groups whose rewards are all equal) carry no gradient and are
    left out; their count is in the panel title.
    """
    rows = _rows_with_samples(samples, "entropy distributions")
    fig, axes = _grid(len(rows), 3.6, 2.8)
    for ax, row in zip(axes, rows):
        adv, ent = token_arrays(samples[row])
        top = max(float(ent.max()) if ent.size else 1.0, 1e-6)
        bins = np.linspace(0.0, top, 31)
        for mask, name, color in (
            (adv > 0, "positive", "#1b7837"),
            (adv < 0, "negative", "#b2182b"),
        ):
            if mask.any():
                ax.hist(
                    ent[mask],
                    bins=bins,
                    density=True,
                    histtype="step",
                    linewidth=1.4,
                    color=color,
                    label=f"{name} ({int(mask.sum())})",
                )
        ax.set_yscale("log")
        ax.set_title(f"{row} (zero adv: {int((adv == 0).sum())})", fontsize=10)
        ax.set_xlabel("token entropy (nats)")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    return _save(fig, out, "entropy_pos_vs_neg")


def counterfactual_effects(
    table: pd.DataFrame, metrics: Sequence[str], out: Path, *, title: str, confidence: float
) -> list[Path]:
    """One panel per metric: each arm's one-step effect, its mean over batches with the
    t-interval as an error bar and every batch's value as a dot (the rows of
    analysis/counterfactual_table.py `to_frame`, arms only). Written as counterfactual.png/.svg."""
    fig, axes = _grid(len(metrics), width=3.6, height=3.0, cols=min(len(metrics), 5))
    arms = list(dict.fromkeys(table["arm"]))
    colors = _palette(arms)
    batch_columns = [c for c in table.columns if str(c).startswith("batch_")]
    for ax, metric in zip(axes, metrics, strict=True):
        rows = table[table["metric"] == metric].set_index("arm")
        for x, arm in enumerate(arms):
            if arm not in rows.index:
                continue
            row = rows.loc[arm]
            values = [float(row[c]) for c in batch_columns if not pd.isna(row[c])]
            ax.scatter([x] * len(values), values, s=10, alpha=0.5, color=colors[arm])
            err = None if pd.isna(row["half_width"]) else float(row["half_width"])
            ax.errorbar([x], [float(row["mean"])], yerr=err, fmt="o", color=colors[arm], capsize=4)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(arms)), arms, rotation=45)
        ax.set_title(f"Δ {metric}", fontsize=10)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    fig.suptitle(f"{title}: mean over batches, {round(100 * confidence)}% t-interval", fontsize=10)
    return _save(fig, out, "counterfactual")
