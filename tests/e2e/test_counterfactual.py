"""`python -m quadrants.counterfactual` as a user runs it, on a checkpoint of a tiny sweep run: the
table printed with intervals over batches, its files written, and its records added to the run in
MLflow at the checkpoint's step without touching the run's own step metrics."""

from __future__ import annotations

import csv

import pytest

from tests import commands
from tests.commands import TINY
from tests.sweep_store import client, runs_of, steps_of, sweep

pytestmark = pytest.mark.integration  # runs the sweep and the counterfactual commands


@pytest.mark.slow
def test_counterfactual_of_a_sweep_checkpoint(tmp_path):
    done = sweep(tmp_path, *TINY, "train.steps=2", "checkpoint.every=2")
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs" / "quadrants").glob("*/default")
    (run,) = runs_of(tmp_path)  # one run, no sweep parent
    run_id = run.info.run_id
    before = steps_of(tmp_path, run_id, "tracking/step_logged")

    # bad input first: refused before anything is loaded, naming the flag
    refused = commands.run("quadrants.counterfactual", str(run_dir), "--step", "7", cwd=tmp_path)
    assert refused.returncode != 0
    assert "--step 7:" in refused.stderr and "checkpoints are of steps 2" in refused.stderr

    arms = ["--arms", "PHR,NHR,random,all", "--match", "PHR", "--batches", "2"]
    done = commands.run("quadrants.counterfactual", str(run_dir), *arms, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "one-step effects on 2 held-out problems x 1" in out and "2 batches" in out
    assert "95% t-interval" in out and "paired Δ − Δ random" in out
    for arm in ("PHR", "NHR", "random", "all", "PHR − random"):
        assert any(line.startswith(arm + " ") for line in out.splitlines()), arm

    written = run_dir / "counterfactual" / "step_2"
    with open(written / "effects.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["arm"] for r in rows} == {"PHR", "NHR", "random", "all"}
    assert {r["n"] for r in rows} == {"2"} and "batch_1" in rows[0]
    assert (written / "counterfactual.png").stat().st_size > 0

    # in the run: counterfactual/ metrics at step 2 and the files, the training records as they were
    mlflow = client(tmp_path)
    history = mlflow.get_metric_history(run_id, "counterfactual/PHR/accuracy")
    assert [m.step for m in history] == [2]
    assert steps_of(
        tmp_path, run_id, "counterfactual/PHR − random/accuracy".replace(" − ", "_minus_")
    ) == [2]
    assert steps_of(tmp_path, run_id, "tracking/step_logged") == before
    assert steps_of(tmp_path, run_id, "train/step") == [1, 2]
    assert mlflow.get_run(run_id).info.status == "FINISHED"
    files = {a.path for a in mlflow.list_artifacts(run_id, "counterfactual/step_2")}
    assert "counterfactual/step_2/effects.csv" in files
    assert "counterfactual/step_2/counterfactual.png" in files
