"""The paper's figures with matplotlib (Agg backend), each written as PNG and SVG.

Every function takes plain data (frames of metric histories, dicts of curves, sample records) and an
output directory, and returns the paths it wrote. Runs are labelled "<row> s<seed>"; a row keeps one
colour across figures, seeds differ by line style.
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

QUADRANTS = ("PHR", "PLR", "NHR", "NLR")
QUADRANT_COLORS = {"PHR": "#1b7837", "PLR": "#7fbf7b", "NHR": "#b2182b", "NLR": "#ef8a62"}
_STYLES = ("-", "--", ":", "-.")
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
    return {**{row: QUADRANT_COLORS[row] for row in set(rows) if row in QUADRANT_COLORS},
            **{row: cmap(i % 10) for i, row in enumerate(others)}}


def _grid(count: int, width: float = 4.0, height: float = 3.0, cols: int = 4) -> tuple[Any, list[Any]]:
    cols = max(1, min(cols, count))
    lines = math.ceil(count / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(width * cols, height * lines), squeeze=False,
                             layout="constrained")
    flat = list(axes.ravel())
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def training_curve(
    history: pd.DataFrame, key: str, runs: pd.DataFrame, out: Path, stem: str, ylabel: str,
    log_y: bool = False,
) -> list[Path]:
    """One line per run of metric `key` over training steps.

    Args:
        history: run_id, key, step, value (`analysis.load.histories`).
        runs: run_id, row (the table's row label), seed.
    """
    part = history[history["key"] == key]
    if part.empty:
        raise ValueError(f"no run logged {key!r}: cannot draw {stem}")
    colors = _palette(runs["row"])
    seeds = sorted(runs["seed"].astype(str).unique())
    fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
    for run in runs.itertuples(index=False):
        points = part[part["run_id"] == run.run_id]
        if points.empty:
            continue
        ax.plot(points["step"], points["value"], color=colors[run.row],
                linestyle=_STYLES[seeds.index(str(run.seed)) % len(_STYLES)], label=f"{run.row} s{run.seed}")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(key)
    return _save(fig, out, stem)


def pass_at_k_curves(curves: Mapping[str, Mapping[str, Mapping[int, float]]], runs: pd.DataFrame, out: Path,
                     sources: Mapping[str, str] | None = None) -> list[Path]:
    """Pass@k against k (log-2 axis), one panel per benchmark, one line per run.

    Args:
        curves: {run_id: {benchmark: {k: Pass@k}}}.
        runs: run_id, row, seed.
        sources: {run_id: "(n, c) table" | "logged points"}, shown in the legend.
    """
    benchmarks = sorted({b for per in curves.values() for b in per})
    if not benchmarks:
        raise ValueError("no Pass@k points in any run: cannot draw pass_at_k")
    colors = _palette(runs["row"])
    seeds = sorted(runs["seed"].astype(str).unique())
    fig, axes = _grid(len(benchmarks), 4.5, 3.4, cols=3)
    for ax, bench in zip(axes, benchmarks):
        ks_all: set[int] = set()
        for run in runs.itertuples(index=False):
            curve = curves.get(run.run_id, {}).get(bench)
            if not curve:
                continue
            ks = sorted(curve)
            ks_all.update(ks)
            label = f"{run.row} s{run.seed}" + (f" ({sources[run.run_id]})" if sources else "")
            ax.plot(ks, [100 * curve[k] for k in ks], marker="o", markersize=3, color=colors[run.row],
                    linestyle=_STYLES[seeds.index(str(run.seed)) % len(_STYLES)], label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ks_all), [str(k) for k in sorted(ks_all)])
        ax.set_xlabel("k")
        ax.set_ylabel("Pass@k (%)")
        ax.set_title(bench)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
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
            points = history[(history["run_id"] == run.run_id) & (history["key"] == key) & (history["value"] > 0)]
            if not points.empty:
                ax.plot(points["step"], points["value"], color=QUADRANT_COLORS[q], label=q, linewidth=1.2)
        ax.set_yscale("log")
        ax.set_title(f"{run.row} s{run.seed}", fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylabel("|Δ log-prob|")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, out, "dlogp_abs_by_quadrant")


def token_arrays(records: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(advantage, entropy) per response token of sample records (each token carries its response's advantage)."""
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


def advantage_histograms(samples: Mapping[str, Sequence[Mapping[str, Any]]], out: Path) -> list[Path]:
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


def entropy_by_polarity(samples: Mapping[str, Sequence[Mapping[str, Any]]], out: Path) -> list[Path]:
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
        for mask, name, color in ((adv > 0, "positive", "#1b7837"), (adv < 0, "negative", "#b2182b")):
            if mask.any():
                ax.hist(ent[mask], bins=bins, density=True, histtype="step", linewidth=1.4, color=color,
                        label=f"{name} ({int(mask.sum())})")
        ax.set_yscale("log")
        ax.set_title(f"{row} (zero adv: {int((adv == 0).sum())})", fontsize=10)
        ax.set_xlabel("token entropy (nats)")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    return _save(fig, out, "entropy_pos_vs_neg")
