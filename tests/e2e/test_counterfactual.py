"""`python -m quadrants.counterfactual` as a user runs it, on a checkpoint of a tiny sweep run: the
table printed with intervals over batches, its files written, and its records added to the run in
MLflow at the checkpoint's step without touching the run's own step metrics. It runs, with the
probe, an evaluation and an export of the same run, from a scratch working directory that is not
the one the sweep ran in (its config.yaml says `outputs: outputs`): every record lands in the run's
own store and folders, and nothing at all in the scratch directory (issue 61, "Nothing outside the
run's folders")."""

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
    scratch = tmp_path / "scratch"  # the commands run here; the sweep ran in tmp_path
    scratch.mkdir()

    # bad input first: refused before anything is loaded, naming the flag
    refused = commands.run("quadrants.counterfactual", str(run_dir), "--step", "7", cwd=scratch)
    assert refused.returncode != 0
    assert "--step 7:" in refused.stderr and "checkpoints are of steps 2" in refused.stderr

    arms = ["--arms", "PHR,NHR,random,all", "--match", "PHR", "--batches", "2"]
    done = commands.run("quadrants.counterfactual", str(run_dir), *arms, cwd=scratch)
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

    # the probe and an evaluation of the run, from the same scratch directory: their runs in the
    # training run's store and study, linked to it, their files under the run's outputs folder
    probe = ["probe.prompts=2", "probe.positions=2", "probe.continuations=2", "probe.resamples=20"]
    small = ["rollout.group_size=2", "rollout.max_new_tokens=8", "train.threads=1"]
    done = commands.run("quadrants.probe", str(run_dir), *probe, *small, cwd=scratch)
    assert done.returncode == 0, done.stderr[-3000:]
    bench = ["eval.benchmarks={arithmetic:1}", "eval.limit=2", "train.threads=1"]
    done = commands.run("quadrants.evaluate", str(run_dir), *bench, cwd=scratch)
    assert done.returncode == 0, done.stderr[-3000:]
    roles = {
        r.data.tags.get("quadrants.role"): r for r in runs_of(tmp_path) if r.info.run_id != run_id
    }
    assert set(roles) == {"probe", "eval"}, roles
    for role, linked in roles.items():
        assert linked.info.status == "FINISHED", role
        assert linked.data.tags["quadrants.source_run_id"] == run_id, role
    assert list((tmp_path / "outputs" / "quadrants" / "probe").glob("*/*/results/credit.csv"))
    assert list((tmp_path / "outputs" / "quadrants" / "eval").iterdir())
    # export writes only where it is told (OUT_DIR, here outside the scratch directory)
    exported = tmp_path / "exported"
    done = commands.run("quadrants.export", str(run_dir), str(exported), "--no-check", cwd=scratch)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (exported / "config.json").is_file()
    assert sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*")) == []
