"""`python -m quadrants.evaluate` end to end: the tiny model on slices of two benchmarks (the
fixture files of the session's data home, in their real formats; tests/conftest.py) and the toy task, into a real MLflow SQLite store; a training checkpoint evaluated
afterwards reproduces the in-training evaluation; bad input stops before anything is generated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from quadrants.config import (
    CheckpointConfig,
    EvalConfig,
    ModelConfig,
    ObjectiveConfig,
    RolloutConfig,
    RunConfig,
    TrackingConfig,
    TrainConfig,
)
from quadrants.eval.results import benchmark_metrics, read_counts
from quadrants.launch.evaluate import main
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker

SLICE = ["eval.benchmarks={arithmetic:2,gsm8k:2,math500:2}", "eval.limit=3", "train.threads=1"]


def only_run(store: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("quadrants")
    assert experiment is not None, "no MLflow experiment was written"
    (run,) = client.search_runs([experiment.experiment_id])
    return client, run


@pytest.mark.integration
def test_tiny_model_on_two_real_benchmarks_and_the_toy_task_lands_in_mlflow(tmp_path, base_policy):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "quadrants.evaluate",
            "tiny",
            "eval=quick",
            *SLICE,
            "eval.max_new_tokens=40",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mlflow ui --backend-store-uri sqlite:///" in done.stdout and "gsm8k" in done.stdout
    client, run = only_run(tmp_path / "outputs" / "mlflow.db")
    assert run.info.status == "FINISHED"
    assert run.data.tags["quadrants.role"] == "eval" and run.data.tags["model"] == "tiny"
    assert (
        run.data.params["eval.benchmarks.gsm8k"] == "2"
        and run.data.params["eval.temperature"] == "0.6"
    )
    metrics = run.data.metrics
    local = Path(client.download_artifacts(run.info.run_id, "eval", str(tmp_path / "downloaded")))
    for name in ("arithmetic", "gsm8k", "math500"):
        ns, cs = read_counts(local / name / "counts.csv")
        assert ns == [2, 2, 2]  # 3 problems x n = 2
        # every logged number follows from the (n, c) table in the artifacts
        for key, value in benchmark_metrics(name, ns, cs).items():
            assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-15, nan_ok=True), key
        assert {
            f"eval/{name}/{m}" for m in ("pass_at_1", "pass_at_2", "avg_at_2", "avg_at_2_stderr")
        } <= set(metrics)
        assert [
            m.step for m in client.get_metric_history(run.info.run_id, f"eval/{name}/pass_at_2")
        ] == [0]
        samples = [
            json.loads(line) for line in (local / name / "samples.jsonl").read_text().splitlines()
        ]
        assert len(samples) == 6
        assert sum(s["outcome"] == "correct" for s in samples) == sum(cs)
        for outcome in ("no_answer", "timeout", "error"):
            assert metrics[f"eval/{name}/{outcome}_count"] == sum(
                s["outcome"] == outcome for s in samples
            )
    # the warmed-up policy solves some toy problems (held-out greedy accuracy ~85 %, T=0.6 ~57 %)
    assert metrics["eval/arithmetic/pass_at_2"] > 0


@pytest.mark.slow
def test_checkpoint_evaluated_afterwards_reproduces_the_in_training_evaluation(tmp_path):
    run_dir = tmp_path / "outputs" / "quadrants" / "s1" / "quadrant=all,seed=0"
    cfg = RunConfig(
        model=ModelConfig(name_or_path="tiny-random"),
        objective=ObjectiveConfig(name="grpo"),
        run_dir=str(run_dir),
        train=TrainConfig(steps=1, prompts_per_step=2, threads=1, measure_dlogp=False),
        rollout=RolloutConfig(group_size=2, max_new_tokens=8),
        eval=EvalConfig(benchmarks={"arithmetic": 2, "gsm8k": 2}, limit=2, max_new_tokens=8),
        checkpoint=CheckpointConfig(every=1),
        tracking=TrackingConfig(log_samples_every=0),
    )
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    # in training: the benchmarks at step 0 and at the end, with their files as artifacts
    assert [step for step, _ in tracker.series("eval/gsm8k/pass_at_2")] == [0, 1]
    assert [p.name for p in tracker.artifacts if p.parent.name == "eval"] == [
        "step_0000000",
        "step_0000001",
    ]
    in_training = run_dir / "eval" / "step_0000001"

    main(
        [
            str(run_dir),
            "eval=quick",
            "eval.benchmarks={arithmetic:2,gsm8k:2}",
            "eval.limit=2",
            "eval.max_new_tokens=8",
            f"outputs={tmp_path / 'outputs'}",
            "train.threads=1",
        ]
    )
    client, run = only_run(tmp_path / "outputs" / "mlflow.db")
    assert (
        run.data.tags["quadrants.checkpoint_step"] == "1"
        and run.data.tags["model"] == "tiny-random"
    )
    # the standalone evaluation keeps the prompt limit's drops per benchmark too: none here, every
    # fixture prompt is far under task.max_prompt_tokens=1024
    assert {k: v for k, v in run.data.params.items() if k.startswith("eval.too_long.")} == {
        "eval.too_long.arithmetic": "0",
        "eval.too_long.gsm8k": "0",
    }
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/gsm8k/avg_at_2")] == [
        1
    ]
    (results,) = (tmp_path / "outputs" / "quadrants" / "eval").glob("*/*/results")
    for name in ("arithmetic", "gsm8k"):
        # same weights (the step-1 checkpoint), same problems, same seeds: the same samples
        assert (results / name / "samples.jsonl").read_text() == (
            in_training / name / "samples.jsonl"
        ).read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["tiny", "eval.benchmarks={gsm8k:2}", "eval.data_dir=/no/such/data"],
            "eval.benchmarks.gsm8k: no data file at /no/such/data/gsm8k/test.jsonl",
        ),
        (
            ["tiny", "eval.benchmarks={aime2024:32}"],
            "unknown benchmark 'aime2024'; known benchmarks: ['aime24', 'aime25'",
        ),
        (
            ["tiny", "eval=paper", "eval.ks=[64]"],
            "eval.ks=[64]: pass@k needs k <= n, but aime24 draws n=32",
        ),
        (["./no/such/model", "eval=quick"], "no model, run or checkpoint directory at"),
    ],
)
def test_bad_input_fails_before_anything_is_generated(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*args, f"outputs={tmp_path / 'outputs'}"])
    assert "nothing was generated" in str(exit_info.value) and message in str(exit_info.value)
    assert not (tmp_path / "outputs").exists()  # no MLflow store, no run directory, no model loaded
