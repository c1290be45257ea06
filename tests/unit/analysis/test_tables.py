"""The comparison table from a real MLflow store of hand-made runs (tests/unit/analysis/conftest.py).

t = 12.7062... is the 95 % Student-t critical value with one degree of freedom (two seeds); with two
values x1, x2 the half-width is t * |x1 - x2| / 2.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from quadrants.analysis import tables
from quadrants.analysis.tables import build_table

T1 = math.tan(math.pi * 0.475)


@pytest.fixture(scope="module")
def frames(study_frames):
    runset, points = study_frames
    return runset.runs, points


@pytest.fixture(scope="module")
def table(frames):
    return build_table(*frames)


def _cell(table, row, bench, kind):
    return table.cells[(row, bench, kind)]


def test_rows_default_to_the_varying_tag_and_parent_is_not_a_row(table, frames):
    assert table.row_tags == ("quadrant",)
    assert table.rows == ("NHR", "PHR", "PLR")
    assert dict(table.seeds) == {"NHR": 2, "PHR": 2, "PLR": 1}
    assert table.benchmarks == ("aime24", "math500")
    assert dict(table.ks) == {"aime24": 4, "math500": 4}
    assert len(frames[0]) == 5


@pytest.mark.parametrize(
    "row, bench, kind, mean, half",
    [
        # PHR: seeds (0.50, 0.60), (0.80, 0.90), (0.70, 0.80), (0.90, 1.00): every spread 0.10 -> t * 0.05
        ("PHR", "aime24", "avg", 0.55, T1 * 0.05),
        ("PHR", "aime24", "pass", 0.85, T1 * 0.05),
        ("PHR", "math500", "avg", 0.75, T1 * 0.05),
        ("PHR", "math500", "pass", 0.95, T1 * 0.05),
        # NHR: (0.40, 0.40) -> 0.40 +- 0; (0.70, 0.90) -> 0.80 +- t*0.10; (0.75, 0.85) -> 0.80 +- t*0.05;
        # (0.95, 0.80) -> 0.875 +- t*0.075
        ("NHR", "aime24", "avg", 0.40, 0.0),
        ("NHR", "aime24", "pass", 0.80, T1 * 0.10),
        ("NHR", "math500", "avg", 0.80, T1 * 0.05),
        ("NHR", "math500", "pass", 0.875, T1 * 0.075),
    ],
)
def test_means_and_intervals_use_the_final_evaluation(table, row, bench, kind, mean, half):
    # the step-0 decoys (0.1) would pull every mean down: the final (step 60) values are used
    est = _cell(table, row, bench, kind).estimate
    assert est.mean == pytest.approx(mean, abs=1e-12)
    assert est.half_width == pytest.approx(half, abs=1e-12)
    assert est.n == 2


def test_the_table_as_parent_run_metrics(table):
    # the means of the cells above (PHR: aime24 0.55 / 0.85, math500 0.75 / 0.95, avg 0.65; PLR one
    # seed: 0.30 / 0.60, 0.90 / 0.95, avg 0.60), one section per row, two benchmarks: named
    metrics = tables.to_metrics(table)
    assert sorted(k for k in metrics if k.startswith("PHR/")) == [
        "PHR/aime24/avg_at_4",
        "PHR/aime24/pass_at_4",
        "PHR/avg",
        "PHR/math500/avg_at_4",
        "PHR/math500/pass_at_4",
        "PHR/seeds",
    ]
    expected = {
        "PHR/aime24/avg_at_4": 0.55,
        "PHR/aime24/pass_at_4": 0.85,
        "PHR/math500/avg_at_4": 0.75,
        "PHR/math500/pass_at_4": 0.95,
        "PHR/avg": 0.65,
        "PHR/seeds": 2.0,
        "PLR/aime24/avg_at_4": 0.30,
        "PLR/math500/pass_at_4": 0.95,
        "PLR/avg": 0.60,
        "PLR/seeds": 1.0,
    }
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-12), key
    assert len(metrics) == 3 * 6  # NHR, PHR, PLR
    # a label MLflow would refuse as a metric name
    assert tables.metric_row("grpo, PHR") == "grpo_PHR"
    assert tables.metric_row("objective=grpo") == "objective_grpo"


def test_single_seed_row_has_no_interval(table):
    for bench, kind, mean in (
        ("aime24", "avg", 0.30),
        ("aime24", "pass", 0.60),
        ("math500", "avg", 0.90),
        ("math500", "pass", 0.95),
    ):
        est = _cell(table, "PLR", bench, kind).estimate
        assert (
            est.mean == pytest.approx(mean, abs=1e-12) and est.n == 1 and math.isnan(est.half_width)
        )


def test_avg_column(table):
    # per seed, mean of the two Avg@4: PHR 0.60, 0.70 -> 0.65 +- t*0.05; NHR 0.575, 0.625 -> 0.60 +- t*0.025;
    # PLR (0.30 + 0.90) / 2 = 0.60, one seed
    assert table.avg_benchmarks == ("aime24", "math500")
    assert table.avg["PHR"].estimate.mean == pytest.approx(0.65, abs=1e-12)
    assert table.avg["PHR"].estimate.half_width == pytest.approx(T1 * 0.05, abs=1e-12)
    assert table.avg["NHR"].estimate.mean == pytest.approx(0.60, abs=1e-12)
    assert table.avg["NHR"].estimate.half_width == pytest.approx(T1 * 0.025, abs=1e-12)
    assert table.avg["PLR"].estimate.mean == pytest.approx(0.60, abs=1e-12)
    assert not table.avg["PLR"].estimate.has_ci


def test_best_marks(table):
    # aime24: Avg PHR 0.55 > 0.40 > 0.30, Pass PHR 0.85 > 0.80 > 0.60; math500: Avg PLR 0.90 > 0.80 > 0.75;
    # Pass PHR 0.95 = PLR 0.95 > NHR 0.875 (a tie marks both); avg PHR 0.65 > 0.60 = 0.60
    best = {key for key, cell in table.cells.items() if cell.best}
    assert best == {
        ("PHR", "aime24", "avg"),
        ("PHR", "aime24", "pass"),
        ("PLR", "math500", "avg"),
        ("PHR", "math500", "pass"),
        ("PLR", "math500", "pass"),
    }
    assert {row for row, cell in table.avg.items() if cell.best} == {"PHR"}
    assert table.footnotes == ()


def test_markdown(table):
    # percent, one decimal: t*0.05 = 63.5, t*0.10 = 127.1, t*0.075 = 95.3, t*0.025 = 31.8
    lines = tables.to_markdown(table).splitlines()
    assert "95% Student-t" in lines[0] and "mean Avg@k over aime24, math500" in lines[0]
    assert lines[2] == "| quadrant | aime24 Avg/Pass@4 | math500 Avg/Pass@4 | avg | seeds |"
    assert (
        lines[4]
        == "| NHR | 40.0 ± 0.0 / 80.0 ± 127.1 | 80.0 ± 63.5 / 87.5 ± 95.3 | 60.0 ± 31.8 | 2 |"
    )
    assert (
        lines[5]
        == "| PHR | **55.0 ± 63.5** / **85.0 ± 63.5** | 75.0 ± 63.5 / **95.0 ± 63.5** | **65.0 ± 63.5** | 2 |"
    )
    assert lines[6] == "| PLR | 30.0 / 60.0 | **90.0** / **95.0** | 60.0 | 1 (no CI) |"


def test_latex(table):
    text = tables.to_latex(table)
    assert r"quadrant & aime24 Avg/Pass@4 & math500 Avg/Pass@4 & avg & seeds \\" in text
    assert (
        r"PHR & \textbf{55.0 $\pm$ 63.5} / \textbf{85.0 $\pm$ 63.5} & 75.0 $\pm$ 63.5 / "
        r"\textbf{95.0 $\pm$ 63.5} & \textbf{65.0 $\pm$ 63.5} & 2 \\"
    ) in text
    assert r"PLR & 30.0 / 60.0 & \textbf{90.0} / \textbf{95.0} & 60.0 & 1 (no CI) \\" in text
    assert r"95\% Student-t" in text and r"mean $\pm$ half-width" in text


def test_csv_frame(table):
    frame = tables.to_frame(table).set_index(["row", "benchmark", "metric"])
    assert len(frame) == 3 * (2 * 2 + 1)
    phr = frame.loc[("PHR", "aime24", "avg")]
    assert phr["mean"] == pytest.approx(0.55, abs=1e-12)
    assert phr["ci_low"] == pytest.approx(0.55 - T1 * 0.05, abs=1e-12)
    assert phr["ci_high"] == pytest.approx(0.55 + T1 * 0.05, abs=1e-12)
    assert phr["k"] == 4 and phr["n_seeds"] == 2 and bool(phr["best"])
    assert frame.loc[("PHR", "avg", "avg"), "mean"] == pytest.approx(0.65, abs=1e-12)
    assert math.isnan(frame.loc[("PLR", "math500", "pass"), "ci_half_width"])
    assert frame["best"].sum() == 6  # five cells and PHR's avg


def test_paper_avg_column_uses_the_six_benchmarks_only():
    # one run: aime24 .1, aime25 .2, amc .3, math500 .4, minerva .5, olympiadbench .6, amc23 .8,
    # gsm8k .9 -> the paper's avg = 2.1 / 6 = 0.35 (amc23 and gsm8k are columns, not in the avg)
    runs = pd.DataFrame(
        [
            {
                "run_id": "r",
                "run_name": "objective=grpo",
                "status": "FINISHED",
                "objective": "grpo",
                "seed": "0",
            }
        ]
    )
    values = {
        "aime24": 0.1,
        "aime25": 0.2,
        "amc": 0.3,
        "math500": 0.4,
        "minerva": 0.5,
        "olympiadbench": 0.6,
        "amc23": 0.8,
        "gsm8k": 0.9,
    }
    points = pd.DataFrame(
        [
            {"run_id": "r", "benchmark": b, "kind": kind, "k": 4, "step": 1, "value": v}
            for b, v in values.items()
            for kind in ("avg", "pass")
        ]
    )
    table = build_table(runs, points)
    assert table.benchmarks == (
        "aime24",
        "aime25",
        "amc",
        "math500",
        "minerva",
        "olympiadbench",
        "amc23",
        "gsm8k",
    )
    assert table.avg_benchmarks == (
        "aime24",
        "aime25",
        "amc",
        "math500",
        "minerva",
        "olympiadbench",
    )
    assert table.avg["grpo"].estimate.mean == pytest.approx(0.35, abs=1e-12)
    assert "the paper's avg" in tables.caption(table)
    assert not any(cell.best for cell in table.cells.values())  # one row: nothing to beat


def test_ood_avg_column_when_runs_have_out_of_domain_benchmarks():
    # two runs (seeds) of grpo: math500 .4 / .6; gpqa .30 / .40, mmlu_pro .20 / .30, graphwiz .40 / .50
    # -> avg over the math columns only: (.4 + .6) / 2 = .5; ood avg per run (.3+.2+.4)/3 = .3, (.4+.3+.5)/3 = .4
    # -> mean .35, t-interval half-width T1 * |.3 - .4| / 2 = T1 * .05
    runs = pd.DataFrame(
        [
            {
                "run_id": f"r{s}",
                "run_name": f"objective=grpo,seed={s}",
                "status": "FINISHED",
                "objective": "grpo",
                "seed": str(s),
            }
            for s in (0, 1)
        ]
    )
    values = {
        ("r0", "math500"): 0.4,
        ("r1", "math500"): 0.6,
        ("r0", "gpqa"): 0.30,
        ("r1", "gpqa"): 0.40,
        ("r0", "mmlu_pro"): 0.20,
        ("r1", "mmlu_pro"): 0.30,
        ("r0", "graphwiz"): 0.40,
        ("r1", "graphwiz"): 0.50,
    }
    points = pd.DataFrame(
        [
            {"run_id": r, "benchmark": b, "kind": kind, "k": 1, "step": 1, "value": v}
            for (r, b), v in values.items()
            for kind in ("avg", "pass")
        ]
    )
    table = build_table(runs, points)
    assert table.benchmarks == ("math500", "gpqa", "graphwiz", "mmlu_pro")
    assert table.avg_benchmarks == ("math500",) and table.ood_benchmarks == (
        "gpqa",
        "graphwiz",
        "mmlu_pro",
    )
    assert table.avg["grpo"].estimate.mean == pytest.approx(0.5, abs=1e-12)
    ood = table.ood_avg["grpo"].estimate
    assert ood.mean == pytest.approx(0.35, abs=1e-12) and ood.half_width == pytest.approx(
        T1 * 0.05, abs=1e-12
    )
    markdown = tables.to_markdown(table)
    assert "| avg | ood avg | seeds |" in markdown and "25 % gpqa, 10 % mmlu_pro" in markdown
    assert "ood avg" in tables.to_latex(table)
    frame = tables.to_frame(table).set_index(["row", "benchmark"])
    assert frame.loc[("grpo", "ood avg"), "mean"] == pytest.approx(0.35, abs=1e-12)
    # only out-of-domain columns: no avg column at all, the ood avg alone
    only_ood = build_table(runs, points[points["benchmark"] != "math500"])
    assert only_ood.avg_benchmarks == () and "| ood avg | seeds |" in tables.to_markdown(only_ood)
    assert "| avg |" not in tables.to_markdown(only_ood)
    # math only: no ood avg column (the table as before)
    assert "ood avg" not in tables.to_markdown(
        build_table(runs, points[points["benchmark"] == "math500"])
    )


def test_the_reward_is_a_row_tag_when_it_varies():
    # PHR and NHR, each under the verifier's and the random reward, seed 0: the rows are
    # (quadrant, reward), four of them, none holding two runs of one seed
    runs = pd.DataFrame(
        {
            "quadrant": ["PHR", "PHR", "NHR", "NHR"],
            "reward": ["verifier", "random", "verifier", "random"],
            "objective": ["dapo"] * 4,
            "seed": ["0"] * 4,
            "run_name": ["a", "b", "c", "d"],
        }
    )
    assert tables.default_row_tags(runs) == ("quadrant", "reward")
