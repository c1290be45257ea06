"""Every number of a study's doc tables recomputed from its data (quadrants/analysis/study_csv.py).

Two ways in:
- a per-run CSV written by `python -m analysis export` from MLflow, and a doc whose tables are
  checked against it (`CASES`: (CSV, doc, heading of the arms table, heading of the paired table)):
  docs/controls5_runs.csv and the toy study's dated record,
  benchmarks/results/2026-12_cpu-intel-avx512.md (every mean, interval, per-seed value,
  entropy range, the base row, paired difference, seeds ahead, own MDD, TOST p, Holm p over the
  table, sign p);
- the figures the text and the README quote beside those tables, recomputed from the same CSV;
  the integration test below exercises the export end to end on a small real sweep it runs.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
import pytest

from quadrants.analysis import study_csv

ROOT = Path(__file__).resolve().parents[3]
# the study's figures are a dated record; docs/results.md says how to read and rerun it
RESULTS = ROOT / "benchmarks" / "results" / "2026-12_cpu-intel-avx512.md"
ARMS_HEADING = "Final held-out evaluation, mean and 95 % t-interval half-width over the 5 seeds"
PAIRS_HEADING = "t-test p Holm-adjusted over the eleven comparisons of this table"
CONTROLS5 = ROOT / "docs" / "controls5_runs.csv"

CASES: list[tuple[Path, Path, str, str]] = [(CONTROLS5, RESULTS, ARMS_HEADING, PAIRS_HEADING)]
"""(CSV, doc, arms-table heading, paired-table heading) pairs committed with their study."""


def pairs_of(rows: list[list[str]]) -> list[tuple[str, str]]:
    return [tuple(row[0].split(" − ")) for row in rows]  # type: ignore[misc]


def test_results_md_text_figures_recompute_from_the_csv():
    """The figures the study record's text and the README quote beside the tables, recomputed from
    the committed CSV: the pooled design MDD over the thirteen trained arms (and with the base row,
    as `python -m analysis --base-row` prints it), the variance split, each pair's seeds for 5
    points, the base row, what the controls trained, and the README's table and sentences."""
    from quadrants.analysis import power
    from quadrants.analysis.stats import seed_estimate

    frame = study_csv.read_study(CONTROLS5)
    doc, readme = RESULTS.read_text(), (ROOT / "README.md").read_text()
    avg, pas = study_csv.values_of(frame, "final_avg"), study_csv.values_of(frame, "final_pass")
    assert len(avg) == 13 and all(len(seeds) == 5 for seeds in avg.values())
    mdd = [power.minimal_detectable_difference(power.variance_split(v).diff_sd, 5) for v in
           (avg, pas)]  # fmt: skip
    assert f"MDD of {100 * mdd[0]:.1f} Avg@4\npoints and {100 * mdd[1]:.1f} Pass@4" in doc
    base = frame.groupby("seed")[["step0_avg", "step0_pass"]].first()
    with_base = [
        power.minimal_detectable_difference(
            power.variance_split({**v, "base": base[col].to_dict()}).diff_sd, 5
        )
        for v, col in ((avg, "step0_avg"), (pas, "step0_pass"))
    ]
    assert f"prints {100 * with_base[0]:.1f} and\n{100 * with_base[1]:.1f}" in doc
    split = study_csv.pooled_split(frame, "final_avg", sorted(avg))
    share = split.sampling / split.within
    assert (
        f"varies by {1e4 * split.within:.1f} points² over seeds, of which the evaluation's "
        in " ".join(doc.split())
    )
    assert f"is {1e4 * split.sampling:.1f} ({100 * share:.0f} %)" in " ".join(doc.split())
    needed = {
        (a, b): study_csv.difference(avg, a, b).needed
        for a, b in [("PHR", "random:PHR:sign:entropy"), ("PHR", "all"),
                     ("PHR", "random:PHR:sign"), ("NHR", "random:NHR")]
    }  # fmt: skip
    assert list(needed.values()) == [5, 6, 9, 39]  # the text's "5 ..., 6 ..., 9 ..., 39 ..."
    a, p = seed_estimate(list(base["step0_avg"])), seed_estimate(list(base["step0_pass"]))
    row = f"| base (step 0) | {100 * a.mean:.1f} ± {100 * a.half_width:.1f} | "
    assert row + f"{100 * p.mean:.1f} ± {100 * p.half_width:.1f} |" in doc
    # what the controls trained: every per-mini-batch control matched its arm's count exactly, the
    # row control its rows and advantage mass; HT's relative noise at the two budgets
    controls = frame[frame["control/minibatch_count_gap_mean"].notna()]
    assert len(controls) == 30 and (controls["control/minibatch_count_gap_mean"] == 0).all()
    row_arm = frame[frame["arm"] == "random:PHR:row"]
    assert (row_arm["grad_rows_mean"] == row_arm["matched/grad_rows_mean"]).all()
    means = frame.groupby("arm").mean(numeric_only=True)
    assert f"({means.loc['random:PHR:row', 'grad_rows_mean']:.1f} rows, Σ|A| " in doc
    noise = means["control/ht_relative_noise_mean"]
    assert f"averaged {noise['random:PHR:ht']:.1f}\nat PHR's count" in doc
    assert f"{noise['random:PHR:ht:f0.5']:.1f} at half of them" in doc
    # the README's row: each arm's Avg@4 mean as results.md's table has it
    arms = {r[0]: r for r in study_csv.arm_rows(frame)}
    cells = readme.split("| all | PHR | NHR |")[1].splitlines()[2].split(" | ")
    order = ["all", "PHR", "NHR", "PLR", "NLR", "random:PHR:sign:entropy", "random:PHR:row",
             "random:PHR:sign", "random:PHR:ht", "random:PHR:ht:f0.5"]  # fmt: skip
    for cell, arm in zip([c.strip("| ") for c in cells], order, strict=False):
        assert arms[arm][1].startswith(cell.split(" ± ")[0]), (arm, cell)
    assert f"| {100 * a.mean:.1f} |" in readme  # the base


def test_a_changed_number_is_caught():
    """The checker can fail: one printed digit off, or a row the data lacks."""
    fresh = [["PHR − all", "-1.1 [-5.1, +2.9]", "5.4"]]
    assert study_csv.mismatches([["PHR − all", "−1.1 [−5.1, +2.9]", "5.4"]], fresh) == []
    assert study_csv.mismatches([["PHR − all", "−1.2 [−5.1, +2.9]", "5.4"]], fresh)
    assert study_csv.mismatches([["PHR − all", "−1.1 [−5.1, +2.9]", "5.5"]], fresh)
    assert study_csv.mismatches([["PHR − NHR", "+14.9", "6.0"]], fresh) == [
        "row 'PHR − NHR': not recomputed from the CSV"
    ]
    # a coarser printed figure is compared at its own precision: 0.03 for a recomputed 0.026
    assert study_csv.mismatches([["x", "0.03"]], [["x", "0.026"]]) == []


def check_case(csv: Path, doc: Path, arms_heading: str, pairs_heading: str) -> list[str]:
    """Every number of the doc's two study tables against the CSV: [] when all agree."""
    frame = study_csv.read_study(csv)
    text = doc.read_text()
    printed = study_csv.markdown_table(text, pairs_heading)
    fresh = study_csv.arm_rows(frame) + [study_csv.base_row(frame)]
    return study_csv.mismatches(
        study_csv.markdown_table(text, arms_heading), fresh
    ) + study_csv.mismatches(printed, study_csv.difference_rows(frame, pairs_of(printed)))


@pytest.mark.parametrize(("csv", "doc", "arms_heading", "pairs_heading"), CASES)
def test_committed_study_tables_recompute(csv, doc, arms_heading, pairs_heading):
    """Each committed study's two tables, number by number."""
    assert check_case(csv, doc, arms_heading, pairs_heading) == []


@pytest.mark.integration
@pytest.mark.slow
def test_export_then_recompute_on_a_real_sweep(tmp_path):
    """A real 2-arm x 2-seed sweep (the tiny random model, 2 steps, 4 held-out problems x 4), exported
    by `python -m analysis export`, each CSV value checked against MLflow, the two doc tables
    rendered from the CSV into a doc and recomputed from the CSV read back; a doc with one number
    changed fails."""
    from mlflow.tracking import MlflowClient

    from quadrants.launch.analysis_command import main
    from tests.commands import TINY
    from tests.sweep_store import sweep

    overrides = ["eval.every=2", "eval.problems=4", "eval.samples=4", "train.steps=2",
                 "sweep_id=csv", "hydra.launcher.n_jobs=2"]  # fmt: skip
    # four jobs, two at a time: ~2 min on a quiet 2-core machine, 10+ min at load average 15
    done = sweep(tmp_path, "-m", "quadrant=PHR,NHR", "seed=0,1", *TINY, *overrides, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    csv = tmp_path / "study.csv"
    assert main(["export", "--tracking-uri", uri, "--sweep-id", "csv", "--out", str(csv)]) == 0
    frame = study_csv.read_study(csv)
    assert len(frame) == 4 and sorted(set(frame["arm"])) == ["NHR", "PHR"]
    client = MlflowClient(uri)
    for row in frame.itertuples(index=False):
        run = next(
            r
            for r in client.search_runs(client.get_experiment_by_name("quadrants").experiment_id)
            if r.data.tags.get("quadrant") == row.arm and r.data.tags.get("seed") == str(row.seed)
        )
        final = client.get_metric_history(run.info.run_id, f"eval/{row.benchmark}/avg_at_{row.k}")
        assert row.final_avg == max(final, key=lambda m: m.step).value
        assert row.step0_avg == min(final, key=lambda m: m.step).value  # the step-0 evaluation
        entropy = client.get_metric_history(run.info.run_id, "train/entropy")
        assert row.final_entropy == max(entropy, key=lambda m: m.step).value
        assert not math.isnan(row.kept_tokens_mean)
    # the doc: both tables rendered from the CSV, then recomputed from the file
    pairs = [("PHR", "NHR")]
    arms = study_csv.arm_rows(frame)
    paired = study_csv.difference_rows(frame, pairs)
    doc = io.StringIO()
    doc.write(
        "Arms of the study:\n\n| arm | Avg | Pass | per seed | entropy |\n|---|---|---|---|---|\n"
    )
    doc.writelines("| " + " | ".join(r) + " |\n" for r in arms)
    doc.write("\nPairs of the study:\n\n| pair | Avg | Pass | ahead | MDD | TOST | Holm | sign |\n")
    doc.write("|---|---|---|---|---|---|---|---|\n")
    doc.writelines("| " + " | ".join(r) + " |\n" for r in paired)
    written = tmp_path / "study.md"
    written.write_text(doc.getvalue())
    assert check_case(csv, written, "Arms of", "Pairs of") == []
    # one number off by a printed unit is caught
    mean = arms[0][1].split(" ± ")[0]
    written.write_text(doc.getvalue().replace(f"| {mean} ±", f"| {float(mean) + 0.1:.1f} ±", 1))
    assert len(check_case(csv, written, "Arms of", "Pairs of")) == 1


def test_sampling_share_from_the_logged_stderr_when_no_counts_are_logged():
    """An in-training evaluation logs no per-problem counts, so the CSV's Avg@k sampling variance
    comes from its logged standard error (`power.sampling_variance_from_stderr`).

    One run: Avg@4 m = 0.5 over P = 4 problems of n = 4 answers with a logged se = 0.25:
    sum p_i (1 - p_i) = P m (1 - m) - (P - 1) P se² = 4 x 0.25 - 3 x 4 x 0.0625 = 1 - 0.75 = 0.25;
    the variance is 0.25 / (P² (n - 1)) = 0.25 / 48 = 1/192. Every run here has the same figures, so
    the split's mean sampling variance is 1/192 and its training part is the within variance minus
    that."""
    records = [
        {"arm": arm, "seed": seed, "run_name": f"{arm},{seed}", "benchmark": "b", "k": 4,
         "step0_avg": 0.4, "step0_pass": 0.7, "final_step": 60, "final_avg": value,
         "final_pass": 0.9, "final_avg_stderr": 0.25, "problems": 4, "samples": "",
         "correct_counts": "", "final_entropy": 0.1}
        for arm, seed, value in [("A", 0, 0.5), ("A", 1, 0.6), ("B", 0, 0.4), ("B", 1, 0.45)]
    ]  # fmt: skip
    buffer = io.StringIO()
    pd.DataFrame(records).to_csv(buffer, index=False)
    buffer.seek(0)
    frame = study_csv.read_study(buffer)
    split = study_csv.pooled_split(frame, "final_avg", ["A", "B"])
    # the estimate is made from each run's own Avg@4 (0.5, 0.6, 0.4, 0.45), not from 0.5 alone:
    # P m (1 - m) - 0.75 = 4 m (1 - m) - 0.75 -> 0.25, 0.21, 0.21, 0.24 (/ 48 each)
    expected = [(4 * m * (1 - m) - 0.75) / 48 for m in (0.5, 0.6, 0.4, 0.45)]
    assert split.sampling == pytest.approx(sum(expected) / 4, rel=1e-12)
    assert expected[0] == pytest.approx(1 / 192)
    # within: arm A's values 0.5, 0.6 (var 0.005), B's 0.4, 0.45 (var 0.00125), pooled 0.003125
    assert split.within == pytest.approx(0.003125)
    assert split.training == pytest.approx(0.003125 - split.sampling)
    # Pass@k has no such fallback: without per-problem counts its sampling part is unknown (NaN)
    assert math.isnan(study_csv.pooled_split(frame, "final_pass", ["A", "B"]).sampling)
