"""The sweep layer end to end, as a user runs it: `python -m quadrants.sweep ...` in a fresh directory,
real Hydra multiruns (joblib launcher), a real MLflow SQLite store, real SIGKILL.

The tiny *random* model keeps these fast; learning is not what they test (its rewards are all 0)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from quadrants.tracking.headline import DECIMALS
from tests import commands
from tests.commands import TINY
from tests.sweep_store import client, runs_of, steps_of, sweep

pytestmark = pytest.mark.integration

FAST = TINY


def test_four_quadrant_sweep_logs_four_child_runs_under_one_parent(tmp_path):
    done = sweep(
        tmp_path,
        "-m",
        "quadrant=PHR,NHR,PLR,NLR",
        "train.steps=3",
        "hydra.launcher.n_jobs=4",
        *FAST,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mlflow ui --backend-store-uri sqlite:///" in done.stdout
    runs = runs_of(tmp_path)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and len(children) == 4
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert sorted(r.data.tags["quadrant"] for r in children) == ["NHR", "NLR", "PHR", "PLR"]
    for run in children:
        tags = run.data.tags
        assert (
            tags["objective"] == "dapo" and tags["seed"] == "0" and tags["model"] == "tiny-random"
        )
        assert tags["quadrants.sweep_id"] == parents[0].data.tags["quadrants.sweep_id"]
        assert run.info.status == "FINISHED"
        # four jobs wrote to one SQLite store at once: every step of every run is there, once
        assert steps_of(tmp_path, run.info.run_id, "train/step") == [1, 2, 3]
        assert steps_of(tmp_path, run.info.run_id, "tracking/step_logged") == [0, 1, 2, 3]
        q = tags["quadrant"]
        assert steps_of(tmp_path, run.info.run_id, f"train/quadrant/{q}/token_frac") == [1, 2, 3]
        assert "eval/arithmetic/avg_at_1" in run.data.metrics
        # the headline keys (tracking/headline.py), copies of the last step's (eval.samples = 1)
        # rounded to DECIMALS places: an entropy of 4.578065872192383 shows as 4.5781
        metrics = run.data.metrics
        for short, long in [
            ("final/avg_at_1", "eval/arithmetic/avg_at_1"),
            ("final/pass_at_1", "eval/arithmetic/pass_at_1"),
            ("final/entropy", "train/entropy"),
        ]:
            assert metrics[short] == round(metrics[long], DECIMALS), (short, metrics[long])
        assert run.data.params["quadrant.keep"] == q
        # model.attention=null on the CPU: the model runs transformers' default (run/build.py)
        assert run.data.params["model.attention_ran"] == "sdpa"
        artifacts = {a.path for a in client(tmp_path).list_artifacts(run.info.run_id)}
        assert {"config", "samples"} <= artifacts
    assert "quadrant=NHR" in done.stdout and "4 runs" in done.stdout  # the summary table
    # train.cpu.omp_spincount's default: libgomp's own waiting, no second start of the command
    logs = list((tmp_path / "outputs").glob("quadrants/*/*/quadrants.log"))
    assert len(logs) == 4
    assert all("OpenMP waiting: libgomp's default" in log.read_text() for log in logs)
    # what the dashboard shows: a training experiment, the summary and report on the parent, the links
    parent = parents[0]
    experiment_id = parent.info.experiment_id
    assert (
        client(tmp_path).get_experiment(experiment_id).tags["mlflow.experimentKind"]
        == "custom_model_development"
    )
    parent = client(tmp_path).get_run(parent.info.run_id)
    assert (
        "quadrant=PHR" in parent.data.tags["mlflow.note.content"]
        and parent.info.status == "FINISHED"
    )
    logged = {a.path for a in client(tmp_path).list_artifacts(parent.info.run_id, "analysis")}
    assert {"analysis/report.html", "analysis/table.md", "analysis/figures"} <= logged
    assert (
        f"quadrants: parent run  http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/"
        f"{parent.info.run_id}?workflowType=machine_learning"
    ) in done.stdout
    # the runs link opens the view the sweep stored on the experiment (tracking/view.py)
    sweep_id = parent.data.tags["quadrants.sweep_id"]
    assert (
        f"quadrants: runs        http://127.0.0.1:5000/#/experiments/{experiment_id}/runs?"
        f"workflowType=machine_learning&viewStateShareKey=quadrants-{sweep_id}"
    ) in done.stdout
    stored = json.loads(
        client(tmp_path)
        .get_experiment(experiment_id)
        .tags[f"mlflow.sharedViewState.quadrants-{sweep_id}"]
    )
    assert json.loads(stored["state"])["selectedColumns"] == [
        "tags.`quadrant`",
        "tags.`objective`",
        "tags.`seed`",
        "metrics.`final/avg_at_1`",
        "metrics.`final/pass_at_1`",
        "metrics.`final/entropy`",
    ]
    # the study's table on the parent: one section per quadrant (one benchmark: no name in the key)
    assert {f"{q}/avg_at_1" for q in ("NHR", "NLR", "PHR", "PLR")} <= set(parent.data.metrics)
    # the report itself, one click: the parent's artifact viewer on analysis/report.html
    assert (
        f"quadrants: report      http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/"
        f"{parent.info.run_id}/artifacts/analysis/report.html?workflowType=machine_learning"
    ) in done.stdout


def test_killed_run_resumes_into_the_same_mlflow_run_with_every_step_once(tmp_path):
    """Also the spin count a command starts itself again with (os.execve, the same process id, so
    the kill below reaches the run): both starts log it."""
    spin = "train.cpu.omp_spincount=1000"
    args = ["train.steps=30", "checkpoint.every=2", "sweep_id=resume", spin, *FAST]
    proc = commands.start(
        "quadrants.sweep",
        *args,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_dir = tmp_path / "outputs" / "quadrants" / "resume" / "default"
    deadline = time.time() + 300
    try:
        while not (run_dir / "checkpoints" / "step_0000004").exists():
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.time() < deadline, "no checkpoint appeared"
            time.sleep(0.2)
        time.sleep(
            0.3
        )  # let it run a little past the checkpoint: those steps must not be duplicated
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = [int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_???????")]
    assert max(killed_at) < 30, "the run finished before the kill; nothing to resume"

    done = sweep(tmp_path, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed from" in done.stderr + done.stdout
    log = (run_dir / "quadrants.log").read_text()
    assert log.count("OpenMP waiting: GOMP_SPINCOUNT=1000") == 2, log[-2000:]
    runs = runs_of(tmp_path)
    assert len(runs) == 1, "the resumed job must log into the same MLflow run"
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert steps_of(tmp_path, run.info.run_id, "train/step") == list(range(1, 31))
    assert steps_of(tmp_path, run.info.run_id, "tracking/step_logged") == list(range(0, 31))
    assert steps_of(tmp_path, run.info.run_id, "train/quadrant/PHR/token_frac") == list(
        range(1, 31)
    )


def test_invalid_override_fails_before_anything_runs(tmp_path):
    done = sweep(tmp_path, "-m", "quadrant=PHR,XHR", *FAST, timeout=120)
    assert done.returncode != 0
    assert (
        "nothing was launched" in done.stderr and "Available options in 'quadrant'" in done.stderr
    )
    assert not (tmp_path / "outputs").exists()
