"""Every number of a study's doc tables recomputed from its data (quadrants/analysis/study_csv.py).

Two ways in:
- a per-run CSV written by `python -m analysis export` from MLflow, and a doc whose tables are
  checked against it (`CASES`: (CSV, doc, heading of the arms table, heading of the paired table,
  the pairs)). The toy study's CSV is not committed yet (its runs are not on this machine: issue 60
  item 9 re-runs the study and adds its case here); the integration test below exercises the
  same machinery end to end on a small real sweep it runs itself;
- docs/results.md's toy-study tables, whose Avg@4 numbers are recomputed from the per-seed Avg@4
  column the doc prints (means, t half-widths, paired differences, their intervals, seeds ahead,
  own MDD, TOST p, Holm p over the table, sign p).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
import pytest

from quadrants.analysis import study_csv

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results.md"
ARMS_HEADING = "Final held-out evaluation, mean and 95 % t-interval half-width over the 5 seeds"
PAIRS_HEADING = "t-test p Holm-adjusted over the eight comparisons of this table"

CASES: list[tuple[Path, Path, str, str]] = []
"""(CSV, doc, arms-table heading, paired-table heading) pairs committed with their study."""


def doc_frame(doc: str) -> pd.DataFrame:
    """A study frame from a doc's arms table alone: one line per (arm, seed) with the per-seed
    Avg@4 the doc prints (points -> rate); the other columns unknown."""
    records = []
    for row in study_csv.markdown_table(doc, ARMS_HEADING):
        seeds = study_csv.numbers(row[3])
        if "/" not in row[3]:  # the base row prints no per-seed values
            continue
        for seed, value in enumerate(seeds):
            records.append({"arm": row[0], "seed": seed, "benchmark": "arithmetic",
                            "final_avg": value / 100})  # fmt: skip
    return pd.DataFrame(records)


def pairs_of(rows: list[list[str]]) -> list[tuple[str, str]]:
    return [tuple(row[0].split(" − ")) for row in rows]  # type: ignore[misc]


def test_results_md_avg4_recomputes_from_its_per_seed_column():
    doc = RESULTS.read_text()
    frame = doc_frame(doc)
    assert sorted(set(frame["arm"])) == sorted(
        [
            "all",
            "PHR",
            "NHR",
            "PLR",
            "NLR",
            "random:PHR:sign",
            "random:NHR:sign",
            "random:PHR",
            "random:NHR",
            "random:PHR:ht",
        ]
    )  # fmt: skip  (ten trained arms: the pooled figures are over ten, not eleven)
    avg = study_csv.values_of(frame, "final_avg")
    from quadrants.analysis.stats import seed_estimate

    printed_arms = [r for r in study_csv.markdown_table(doc, ARMS_HEADING) if r[0] in avg]
    fresh_arms = []
    for row in printed_arms:
        est = seed_estimate([avg[row[0]][s] for s in sorted(avg[row[0]])])
        fresh_arms.append([row[0], f"{100 * est.mean:.1f} ± {100 * est.half_width:.1f}"])
    # the doc's means and intervals come from the unrounded data, the per-seed column is rounded
    # to 0.1 point: each value is off by at most 0.05, so the mean by 0.05 and the sd by at most
    # 0.05 sqrt(n / (n - 1)) = 0.056, the half-width by 2.776 x 0.056 / sqrt 5 = 0.07: one printed
    # unit (0.1) of slack; a paired difference of two rounded values is off by 0.1, its interval
    # ends by 0.1 + 0.14: 0.2 of slack there
    assert study_csv.mismatches([r[:2] for r in printed_arms], fresh_arms, slack=0.1) == []

    printed = study_csv.markdown_table(doc, PAIRS_HEADING)
    found = study_csv.family(
        [study_csv.difference(avg, a, b, margin=0.05) for a, b in pairs_of(printed)]
    )
    fresh = []
    for d in found:
        e = d.estimate
        fresh.append(
            [
                f"{d.a} − {d.b}",
                f"{100 * e.mean:+.1f} [{100 * e.low:+.1f}, {100 * e.high:+.1f}]",
                f"{d.ahead}/{len(d.differences)}",
                f"{100 * d.detectable:.1f}",
                f"{d.tost_p:.3f}",
                f"{d.holm_p:.3f}",
                f"{d.sign_p:.4f}",
            ]
        )
    # the doc's columns that Avg@4 alone decides: difference [CI], the Avg part of "ahead", MDD,
    # TOST, Holm, sign (Pass@4's per-seed values are not in the doc)
    shown = [[r[0], r[1], r[3].split(",")[0], *r[4:8]] for r in printed]
    assert study_csv.mismatches([r[:2] for r in shown], [r[:2] for r in fresh], slack=0.2) == []
    # the tests themselves were computed from the per-seed column as printed: no slack
    rest = [[r[0], *r[2:]] for r in shown]
    assert study_csv.mismatches(rest, [[r[0], *r[2:]] for r in fresh]) == []
    # the pooled design figure of the text: 17.1 points over the ten arms, 18.6 over eight
    from quadrants.analysis import power

    ten = power.variance_split({a: avg[a] for a in avg})
    eight = power.variance_split({a: avg[a] for a in avg if a not in ("all", "random:PHR:ht")})
    assert round(100 * power.minimal_detectable_difference(ten.diff_sd, 5), 1) == 17.1
    assert round(100 * power.minimal_detectable_difference(eight.diff_sd, 5), 1) == 18.6
    assert "ten trained arms" in doc and "eight arms" in doc
    assert "eleven" not in doc and "nine arms" not in doc


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
    return study_csv.mismatches(
        study_csv.markdown_table(text, arms_heading), study_csv.arm_rows(frame)
    ) + study_csv.mismatches(printed, study_csv.difference_rows(frame, pairs_of(printed)))


@pytest.mark.parametrize(("csv", "doc", "arms_heading", "pairs_heading"), CASES)
def test_committed_study_tables_recompute(csv, doc, arms_heading, pairs_heading):
    """Empty until a study's CSV is committed (pytest reports the empty parameter set)."""
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
