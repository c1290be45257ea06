"""The curves over seeds: mean and t-band by hand, one line per method, the legend outside the axes."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from quadrants.analysis import figures
from quadrants.analysis.report_html import markdown_block, render_report


class Drawn:
    """The figure a drawing function saved (figures._save patched to keep it)."""

    fig = None


@pytest.fixture
def drawn(monkeypatch):
    """Keep the figure the function under test saves, and close it after the test."""
    kept = Drawn()
    save = figures._save

    def keep(fig, out, stem):
        kept.fig = fig
        return save(fig, out, stem)

    monkeypatch.setattr(figures, "_save", keep)
    yield kept
    if kept.fig is not None:
        plt.close(kept.fig)


def test_mean_band_by_hand():
    # x=0: values 1, 3 -> mean 2, sd sqrt(2), t(0.975, 1) = 12.7062 -> half 12.7062 * sqrt(2)/sqrt(2) = 12.7062
    # x=1: values 2, 4, 6 -> mean 4, sd 2, t(0.975, 2) = 4.3027 -> half 4.3027 * 2 / sqrt(3) = 4.9683
    # x=2: one value 5 -> mean 5, no interval
    points = pd.DataFrame({"x": [0, 0, 1, 1, 1, 2], "value": [1.0, 3.0, 2.0, 4.0, 6.0, 5.0]})
    band = figures.mean_band(points, 0.95)
    assert list(band["x"]) == [0, 1, 2] and list(band["n"]) == [2, 3, 1]
    assert list(band["mean"]) == pytest.approx([2.0, 4.0, 5.0], abs=1e-12)
    assert band["high"][0] - 2.0 == pytest.approx(12.706205, abs=1e-5)
    assert band["high"][1] - 4.0 == pytest.approx(4.302653 * 2 / math.sqrt(3), abs=1e-5)
    assert 4.0 - band["low"][1] == pytest.approx(band["high"][1] - 4.0, abs=1e-12)
    assert math.isnan(band["low"][2]) and math.isnan(band["high"][2])


def _study(seeds: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """4 quadrant rows x `seeds` seeds, 3 steps each; run r of seed s logs value 10*q + s at every step."""
    runs, history = [], []
    for q, row in enumerate(figures.QUADRANTS):
        for seed in range(seeds):
            run_id = f"{row}-{seed}"
            runs.append({"run_id": run_id, "row": row, "seed": str(seed)})
            history += [
                {"run_id": run_id, "key": "train/entropy", "step": step, "value": 10.0 * q + seed}
                for step in range(3)
            ]
    return pd.DataFrame(history), pd.DataFrame(runs)


@pytest.mark.slow
@pytest.mark.parametrize("per_seed", [False, True])
def test_training_curve_one_line_per_method_legend_outside(tmp_path, drawn, per_seed):
    history, runs = _study(seeds=3)
    paths = figures.training_curve(
        history, "train/entropy", runs, tmp_path, "train_entropy", "nats", per_seed=per_seed
    )
    assert [p.name for p in paths] == ["train_entropy.png", "train_entropy.svg"]
    ax = drawn.fig.axes[0]
    # 4 mean lines (+ 12 thin seed lines with per_seed), 4 bands, one colour per method
    assert len(ax.lines) == 4 + (12 if per_seed else 0)
    assert len(ax.collections) == 4
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        f"{q} (mean of 3 seeds)" for q in figures.QUADRANTS
    ]
    # PHR's mean is (0 + 1 + 2) / 3 = 1 at every step; NLR's is 30 + 1 = 31
    assert list(ax.lines[0].get_ydata()) == pytest.approx([1.0, 1.0, 1.0], abs=1e-12)
    assert list(ax.lines[3 if not per_seed else 12].get_ydata()) == pytest.approx(
        [31.0] * 3, abs=1e-12
    )
    # the legend box starts right of the axes box
    drawn.fig.canvas.draw()
    assert legend.get_window_extent().x0 > ax.get_window_extent().x1


def test_pass_at_k_mean_over_seeds(tmp_path, drawn):
    # PHR seeds 0/1 at k=1: 0.5, 0.7 -> mean 60 %; k=2: 0.8, 0.8 -> 80 % with a zero-width band
    curves = {
        "a": {"toy": {1: 0.5, 2: 0.8}},
        "b": {"toy": {1: 0.7, 2: 0.8}},
        "c": {"toy": {1: 0.2, 2: 0.4}},
    }
    runs = pd.DataFrame(
        {"run_id": ["a", "b", "c"], "row": ["PHR", "PHR", "NLR"], "seed": ["0", "1", "0"]}
    )
    figures.pass_at_k_curves(
        curves, runs, tmp_path, {"a": "logged points", "b": "logged points", "c": "(n, c) table"}
    )
    ax = drawn.fig.axes[0]
    assert len(ax.lines) == 2
    assert list(ax.lines[0].get_ydata()) == pytest.approx([60.0, 80.0], abs=1e-9)
    assert list(ax.lines[1].get_ydata()) == pytest.approx([20.0, 40.0], abs=1e-9)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "PHR (mean of 2 seeds)\n  from logged points",
        "NLR (1 seed)\n  from (n, c) table",
    ]
    assert len(ax.collections) == 1  # NLR has one seed: no band


def test_report_html_embeds_figures_and_tables(tmp_path):
    png = tmp_path / "fig.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nxyz")
    page = render_report(
        "Analysis: s1",
        ["caption <x>", "| row | a |\n|---|---|\n| PHR | **1.0** |"],
        [png],
        ["note"],
    )
    assert "<p>caption &lt;x&gt;</p>" in page
    assert (
        "<table><tr><th>row</th><th>a</th></tr>\n<tr><td>PHR</td><td><b>1.0</b></td></tr>\n</table>"
        in page
    )
    assert "src='data:image/png;base64,iVBORw0KGgp4eXo='" in page  # base64 of the 11 bytes above
    assert "<li>note</li>" in page and "<script" not in page
    assert markdown_block("") == ""


def _entropy_history() -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run, 4 steps. PHR: cov [1, 2, 3, 4], entropy_change [-0.1, -0.3, -0.2, -0.4];
    NHR: cov [0, 0, 0, 0] (constant -> no correlation); PLR and NLR: entropy_change only at steps
    1-2 (2 points with both metrics -> too few); PHR also cov_state [4, 1, 2, 3]."""
    rows = []

    def log(q, stat, values, steps=(1, 2, 3, 4)):
        rows.extend(
            {"run_id": "a", "key": f"train/quadrant/{q}/{stat}", "step": s, "value": v}
            for s, v in zip(steps, values)
        )

    log("PHR", "cov", [1.0, 2.0, 3.0, 4.0])
    log("PHR", "entropy_change", [-0.1, -0.3, -0.2, -0.4])
    log("PHR", "cov_state", [4.0, 1.0, 2.0, 3.0])
    log("NHR", "cov", [0.0] * 4)
    log("NHR", "entropy_change", [0.1, 0.2, 0.1, 0.3])
    for q in ("PLR", "NLR"):
        log(q, "cov", [1.0, 2.0, 3.0, 4.0])
        log(q, "entropy_change", [0.1, 0.2], steps=(1, 2))
    return pd.DataFrame(rows), pd.DataFrame({"run_id": ["a"], "row": ["all"], "seed": ["0"]})


def test_entropy_prediction_correlations_by_hand():
    # PHR: predicted -cov = [-1, -2, -3, -4] (mean -2.5, deviations 1.5, 0.5, -0.5, -1.5),
    # measured [-0.1, -0.3, -0.2, -0.4] (mean -0.25, deviations 0.15, -0.05, 0.05, -0.15):
    # Σ dx dy = 0.225 - 0.025 - 0.025 + 0.225 = 0.4; Σ dx² = 5; Σ dy² = 0.05
    # Pearson = 0.4 / sqrt(5 * 0.05) = 0.4 / 0.5 = 0.8
    # Spearman: ranks x [4, 3, 2, 1], y [4, 2, 3, 1] -> Σ d² = 0 + 1 + 1 + 0 = 2,
    # 1 - 6 * 2 / (4 * 15) = 0.8
    history, runs = _entropy_history()
    table = figures.entropy_prediction(history, runs).set_index("quadrant")
    assert table.loc["PHR", "steps"] == 4
    assert table.loc["PHR", "pearson"] == pytest.approx(0.8, abs=1e-12)
    assert table.loc["PHR", "spearman"] == pytest.approx(0.8, abs=1e-12)
    assert math.isnan(table.loc["NHR", "pearson"])  # constant prediction
    assert table.loc["PLR", "steps"] == 2 and math.isnan(table.loc["PLR", "spearman"])
    # PHR's -cov_state = [-4, -1, -2, -3]: deviations -1.5, 1.5, 0.5, -0.5 against 0.15, -0.05,
    # 0.05, -0.15: Σ dx dy = -0.225 - 0.075 + 0.025 + 0.075 = -0.2, / sqrt(5 * 0.05) = -0.4;
    # ranks x [1, 4, 3, 2], y [4, 2, 3, 1]: Σ d² = 9 + 4 + 0 + 1 = 14, 1 - 6 * 14 / 60 = -0.4
    assert table.loc["PHR", "pearson_state"] == pytest.approx(-0.4, abs=1e-12)
    assert table.loc["PHR", "spearman_state"] == pytest.approx(-0.4, abs=1e-12)
    assert table.drop(index="PHR")["pearson_state"].isna().all()  # no cov_state logged


@pytest.mark.slow
def test_entropy_change_figure_four_panels_per_run(tmp_path, drawn):
    history, runs = _entropy_history()
    paths = figures.entropy_change_by_quadrant(history, runs, tmp_path)
    assert [p.name for p in paths] == [
        "entropy_change_by_quadrant.png",
        "entropy_change_by_quadrant.svg",
    ]
    titles = [ax.get_title() for ax in drawn.fig.axes if ax.get_title()]
    assert titles == [
        # 4 steps: too few for the prewhitened test (5), so its p-values are NaN
        "all s0 · PHR\nr = 0.80 (p nan); cov_state r = -0.40 (p nan)",
        "all s0 · PLR\nr = nan (p nan); cov_state r = nan (p nan)",
        "all s0 · NHR\nr = nan (p nan); cov_state r = nan (p nan)",
        "all s0 · NLR\nr = nan (p nan); cov_state r = nan (p nan)",
    ]
    phr = drawn.fig.axes[0]
    assert list(phr.lines[1].get_ydata()) == pytest.approx([-0.1, -0.3, -0.2, -0.4])
    with pytest.raises(ValueError, match="no run logged train/quadrant/<Q>/entropy_change"):
        figures.entropy_change_by_quadrant(
            history[history["key"].str.endswith("/cov")], runs, tmp_path
        )


@pytest.mark.slow
def test_flips_figure_two_rows_by_four_quadrants_shared_solid_unique_dashed(tmp_path, drawn):
    # two arms: PHR with seeds 0 and 1, NHR with seed 0; 3 steps. PHR's PHR-quadrant flip_frac_shared
    # is 0.2 + 0.1 * seed at every step -> mean over the two seeds 0.25; its flip_frac_unique 0.1 *
    # step -> 0.0, 0.1, 0.2. NHR logs only dlogp_signed_shared = -0.01 in quadrant NHR.
    history = []
    for arm, seed in (("PHR", 0), ("PHR", 1), ("NHR", 0)):
        run_id = f"{arm}-{seed}"
        for step in range(3):
            if arm == "PHR":
                history += [
                    (run_id, "train/quadrant/PHR/flip_frac_shared", step, 0.2 + 0.1 * seed),
                    (run_id, "train/quadrant/PHR/flip_frac_unique", step, 0.1 * step),
                ]
            else:
                history.append((run_id, "train/quadrant/NHR/dlogp_signed_shared", step, -0.01))
    history = pd.DataFrame(history, columns=["run_id", "key", "step", "value"])
    runs = pd.DataFrame(
        {
            "run_id": ["PHR-0", "PHR-1", "NHR-0"],
            "row": ["PHR", "PHR", "NHR"],
            "seed": ["0", "1", "0"],
        }
    )
    paths = figures.flips_by_quadrant(history, runs, tmp_path)
    assert [p.name for p in paths] == ["flips_by_quadrant.png", "flips_by_quadrant.svg"]
    axes = drawn.fig.axes
    assert [ax.get_title() for ax in axes] == [
        f"{q} · {label}"
        for label in ("flip fraction", "mean signed Δ log-prob")
        for q in figures.QUADRANTS
    ]
    phr_flips = axes[0]  # row flip fraction, column PHR: the PHR arm's shared and unique lines
    shared, unique = phr_flips.lines
    assert shared.get_linestyle() == "-" and unique.get_linestyle() == "--"
    assert list(shared.get_ydata()) == pytest.approx([0.25, 0.25, 0.25], abs=1e-12)
    assert list(unique.get_ydata()) == pytest.approx([0.0, 0.1, 0.2], abs=1e-12)
    assert len(phr_flips.collections) == 2  # two seeds: a band for each line (zero width)
    nhr_moves = axes[4 + 2]  # row signed Δ, column NHR: one line and the zero line
    assert list(nhr_moves.lines[0].get_ydata()) == pytest.approx([-0.01] * 3)
    assert len(nhr_moves.collections) == 0  # one seed: no band
    # one legend, right of the first row, naming every line of every panel once
    labels = [t.get_text() for t in axes[3].get_legend().get_texts()]
    assert labels == ["PHR shared", "PHR unique", "NHR shared"]
    with pytest.raises(ValueError, match="no run logged train/quadrant/<Q>/flip_frac_shared"):
        figures.flips_by_quadrant(history.iloc[:0], runs, tmp_path)
