"""`python -m analysis power` on a 2-seed pilot written with the real MLflow client into a sqlite
store, and its refusals.

The pilot: sweep "sw1", arms PHR and NHR at seeds 0 and 1, final evaluation at step 60.

    run      arithmetic avg/pass@4 (stderr of avg, 100 problems)   math500 (n, c) per problem
    PHR s0   0.50 / 0.80  (0.03)                                  (4, 2), (4, 0)
    PHR s1   0.60 / 0.90  (0.03)                                  (4, 3), (4, 1)
    NHR s0   0.40 / 0.70  (0.03)                                  (4, 1), (4, 0)
    NHR s1   0.46 / 0.90  (0.03)                                  (4, 2), (4, 2)

arithmetic is the in-training held-out check (stderr and problem count, no counts table);
math500 the evaluation runner's (its counts.csv as an artifact, avg/pass@4 consistent with it).
The final train/entropy (step 3): PHR 0.9, 0.8; NHR 0.7, 0.75.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.entities import Metric

from quadrants.analysis import load, power
from quadrants.analysis.power_report import power_study
from quadrants.analysis.report import ReportOptions, build_report
from quadrants.launch.analysis_power import main

from .conftest import make_child, make_parent, new_store

ROOT = Path(__file__).resolve().parents[3]
ARITHMETIC = {("PHR", 0): (0.50, 0.80), ("PHR", 1): (0.60, 0.90)}
ARITHMETIC |= {("NHR", 0): (0.40, 0.70), ("NHR", 1): (0.46, 0.90)}
COUNTS = {("PHR", 0): (2, 0), ("PHR", 1): (3, 1), ("NHR", 0): (1, 0), ("NHR", 1): (2, 2)}
ENTROPY = {("PHR", 0): 0.9, ("PHR", 1): 0.8, ("NHR", 0): 0.7, ("NHR", 1): 0.75}


def _math500(cs: tuple[int, int]) -> tuple[float, float]:
    """(Avg@4, Pass@4) of two problems with 4 answers each: mean c/4, mean 1[c > 0]."""
    return sum(cs) / 8, sum(c > 0 for c in cs) / 2


@pytest.fixture
def pilot(template_db, tmp_path) -> str:
    uri, client = new_store(template_db, tmp_path)
    exp_id, parent = make_parent(client, tmp_path)
    for (arm, seed), (avg, pas) in ARITHMETIC.items():
        avg500, pass500 = _math500(COUNTS[(arm, seed)])
        metrics = {
            "eval/arithmetic/avg_at_4": avg,
            "eval/arithmetic/pass_at_4": pas,
            "eval/arithmetic/avg_at_4_stderr": 0.03,
            "eval/arithmetic/problems": 100,
            "eval/math500/avg_at_4": avg500,
            "eval/math500/pass_at_4": pass500,
            "eval/math500/problems": 2,
        }
        run_id = make_child(client, exp_id, parent, arm, seed, metrics)
        entropy = [Metric("train/entropy", 2.0 / step, 0, step) for step in (1, 2)]
        client.log_batch(
            run_id, metrics=[*entropy, Metric("train/entropy", ENTROPY[(arm, seed)], 0, 3)]
        )
        folder = tmp_path / "local" / run_id / "math500"
        folder.mkdir(parents=True)
        rows = "".join(f"{i},4,{c}\n" for i, c in enumerate(COUNTS[(arm, seed)]))
        (folder / "counts.csv").write_text("problem_id,n,c\n" + rows)
        client.log_artifacts(run_id, str(folder), "eval/step_0000060/math500")
    return uri


@pytest.mark.slow
def test_a_two_seed_pilot_prints_variance_components_and_detectable_differences(pilot, capsys):
    assert main(["--tracking-uri", pilot, "--sweep-id", "sw1", "--delta", "0.02"]) == 0
    out = capsys.readouterr().out
    study = power_study(load.Selection(pilot, None, "sw1"), delta=0.02)
    by_name = {m.name: m for m in study.metrics}
    assert list(by_name) == [  # the table's column order: the paper's benchmarks first
        "math500 Avg@4",
        "math500 Pass@4",
        "arithmetic Avg@4",
        "arithmetic Pass@4",
        "final train/entropy",
    ]
    assert study.arms == ("NHR", "PHR") and study.seeds == ("0", "1") and study.planned == 2

    # arithmetic Avg@4, by hand: within (2 * 0.05² + 2 * 0.03²) / 2 = 0.0034; paired differences
    # (0.10, 0.14), variance 0.0008; the sampling part of each run from its stderr 0.03 on 100
    # problems of 4 answers: (100 m (1 - m) - 99 * 100 * 0.03²) / (100² * 3), m = 0.5, 0.6, 0.4,
    # 0.46 -> (16.09 + 15.09 + 15.09 + 15.93) / 4 / 30 000 = 5.1833e-4 (5.18 points², 15 %)
    arithmetic = by_name["arithmetic Avg@4"]
    assert arithmetic.split.within == pytest.approx(0.0034, abs=1e-12)
    assert arithmetic.split.diff_sd == pytest.approx(math.sqrt(0.0008), rel=1e-9)
    assert arithmetic.split.sampling == pytest.approx(15.55 / 30_000, rel=1e-9)
    assert arithmetic.source == "logged standard error"
    # the detectable difference at 2 seeds: 11.5499 sd (power.minimal_detectable_difference(1, 2))
    assert arithmetic.detectable == pytest.approx(
        power.minimal_detectable_difference(1.0, 2) * math.sqrt(0.0008), rel=1e-9
    )
    assert arithmetic.needed == power.seeds_needed(math.sqrt(0.0008), 0.02)
    assert "| arithmetic Avg@4 | 34 | 5.18 (15 %) | 28.8 | 30 | 2.83 points | 32.7 points |" in out

    # math500 Avg@4 from the counts: per problem c (4 - c) / 48 over P² = 4, so the runs have
    # 4/192, 6/192, 3/192, 8/192, mean 21/768; Pass@4 from the counts too
    assert by_name["math500 Avg@4"].split.sampling == pytest.approx(21 / 768, rel=1e-12)
    assert by_name["math500 Pass@4"].source == "per-problem counts"
    # its Pass@4 is (0.5, 1) in both arms: equal differences, no spread, nothing to plan on
    assert math.isnan(by_name["math500 Pass@4"].detectable)
    assert "math500 Pass@4: every paired difference is the same" in out
    assert "| 0 points | — | — |" in out
    # no counts for the held-out Pass@4, nothing logged for the entropy's sampling: not split
    assert math.isnan(by_name["arithmetic Pass@4"].split.sampling)
    assert "| arithmetic Pass@4 | 125 | — | — | 100 | 7.07 points |" in out
    # entropy: within (0.005 + 0.00125) / 2 = 0.003125 nats², differences (0.2, 0.05): sd 0.106
    entropy = by_name["final train/entropy"]
    assert entropy.split.within == pytest.approx(0.003125, abs=1e-12)
    assert "| final train/entropy | 0.00313 | — | — | -0.0025 | 0.106 nats |" in out

    # the table: NHR's arithmetic Avg@4 (0.43) is 0.12 below PHR's 0.55, under the 0.327 detectable
    cell = study.table.cells[("NHR", "arithmetic", "avg")]
    assert (
        cell.below_detectable
        and not study.table.cells[("PHR", "arithmetic", "avg")].below_detectable
    )
    assert "less than the minimal detectable difference (32.7 points at 2 seeds" in out
    assert "seeds for 0.02" in out


@pytest.mark.parametrize("delta", ["0", "-0.5"])
def test_a_non_positive_delta_is_refused_before_the_store_is_opened(delta, tmp_path, capsys):
    store = tmp_path / "never" / "mlflow.db"
    assert main(["--tracking-uri", f"sqlite:///{store}", "--delta", delta]) == 2
    err = capsys.readouterr().err
    assert "--delta must be a positive difference" in err and "--delta 0.02" in err
    assert not store.parent.exists()


def test_one_seed_per_arm_is_refused(template_db, tmp_path, capsys):
    uri, client = new_store(template_db, tmp_path)
    exp_id, parent = make_parent(client, tmp_path)
    for arm in ("PHR", "NHR"):
        make_child(client, exp_id, parent, arm, 0, {"eval/arithmetic/avg_at_4": 0.5})
    assert main(["--tracking-uri", uri, "--sweep-id", "sw1"]) == 2
    err = capsys.readouterr().err
    assert "a pilot needs at least 2 seeds per arm" in err
    assert "NHR: seed ['0']; PHR: seed ['0']" in err and "seed=0,1" in err


def test_no_runs_found_names_the_flag(template_db, tmp_path, capsys):
    uri, client = new_store(template_db, tmp_path)
    make_parent(client, tmp_path)
    assert main(["--tracking-uri", uri, "--sweep-id", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no runs match" in err and "Select the pilot with --sweep-id" in err


@pytest.mark.subprocess
@pytest.mark.parametrize("module", ["analysis", "quadrants.analysis"])
def test_python_m_analysis_power_runs(pilot, tmp_path, module):
    # both aliases reach the power command (quadrants/launch/analysis.py main hands it over)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", module, "power", "--tracking-uri", pilot, "--seeds", "5"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| metric | within arm | eval sampling | training seed |" in done.stdout
    assert "MDD at 5 seeds" in done.stdout


@pytest.mark.slow
def test_the_analysis_report_marks_the_pilots_table_and_paired_comparison(pilot, tmp_path):
    # the same pilot through `python -m analysis --compare PHR NHR`: every row has seeds 0 and 1,
    # so the table and the paired comparison carry the marks. PHR - NHR on arithmetic Avg@4:
    # differences (0.10, 0.14), mean +12.0 points, under the 32.7 points detectable at 2 seeds
    options = ReportOptions(compare=("PHR", "NHR"), log_to_parent=False, figures=False)
    report = build_report(load.Selection(pilot, None, "sw1"), tmp_path / "out", options)
    assert report.table.cells[("NHR", "arithmetic", "avg")].below_detectable
    paired_md = (tmp_path / "out" / "paired.md").read_text()
    assert "| design MDD (pooled) |" in paired_md and "reached" not in paired_md
    # differences (0.10, 0.14): t = 0.12 / 0.02 = 6 on 1 degree of freedom, p = 1 - 2 atan(6)/pi
    # = 0.105; TOST at +-0.05: the one-sided p toward +0.05 is 1/2 + atan(3.5)/pi = 0.91
    assert "| arithmetic | Avg@4 | +12.0 |" in paired_md
    assert "| 2/2 (0.5) | 0.11 |" in paired_md and "| 0.91 | 2.8 |" in paired_md
    assert "| not told apart, not shown within ±5 | 32.7 |" in paired_md
    # math500 Pass@4 has equal differences (no spread): no test, no detectable difference
    assert "| math500 | Pass@4 | +0.0 | [+0.0, +0.0] | 0/2 (1) | — |" in paired_md
    csv = (tmp_path / "out" / "table.csv").read_text()
    assert "below_detectable" in csv.splitlines()[0]
