"""The hindsight-credit probe on real models: the bounds at every probed position of the tiny policy,
and `python -m quadrants.probe` on a trained run directory (MLflow run, credit.csv, figures)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from quadrants.config import (
    CheckpointConfig,
    EvalConfig,
    ModelConfig,
    ProbeConfig,
    RolloutConfig,
    RunConfig,
    TrackingConfig,
    TrainConfig,
)
from quadrants.eval.generation import TextEngine
from quadrants.models.loading import load_policy
from quadrants.probe.__main__ import main
from quadrants.probe.branching import ProbeSettings
from quadrants.probe.measure import probe_policy
from quadrants.rewards.grader import Grader
from quadrants.run.build import make_run_task
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker


@pytest.mark.slow
def test_tiny_policy_credit_stays_within_its_bounds(base_policy):
    torch.set_num_threads(1)
    cfg = RunConfig(
        probe=ProbeConfig(prompts=4, positions=16, continuations=8, resamples=100, seed=1)
    )
    model, tokenizer = load_policy("tiny")
    plan = RunPlan.parse(cfg)
    task = make_run_task(plan, tokenizer)
    with Grader(num_workers=1, timeout_s=5.0) as grader:
        result = probe_policy(
            model,
            tokenizer,
            TextEngine(model, tokenizer),
            grader,
            task,
            ProbeSettings.of(plan),
            announce=False,
        )
    c = result.credit
    assert len(result.positions) == 16
    # exact for the plug-in: a mutual information of the estimated joint is at most either entropy
    assert (c.cmi_plugin <= c.branch_entropy + 1e-9).all() and (
        c.cmi_plugin <= c.outcome_entropy_plugin + 1e-9
    ).all()
    # (estimates.check_estimator_bounds raised inside probe_policy had any of these failed; they are
    # estimator invariants, not findings)
    assert (c.cmi <= c.outcome_entropy + 1e-9).all() and (c.cmi_low <= math.log(2) + 1e-6).all()
    # every position with rest mass rolled its rest out (probe.min_rest_mass = 0): no structural
    # zeros; one branch only where the sampling distribution has a single token
    assert (c.rest_cut == 0).all()
    single = c.branches == 1
    assert (c.sampling_entropy[single] < 1e-6).all() and (c.cmi[single] == 0).all()
    # near-deterministic tokens carry little credit: with H_t < 0.01 the top token holds >= 99.9 %
    low = c.entropy < 0.01
    assert low.any(), c.entropy.tolist()  # the low-entropy strata of PLR / NLR give such tokens
    assert (c.cmi[low].abs() < 0.02).all()
    # intervals of a non-negative quantity: ordered, never below 0
    assert (c.cmi_low <= c.cmi_high).all() and (c.cmi_low >= 0).all()


@pytest.mark.slow
def test_probe_command_on_a_trained_run_directory_writes_the_mlflow_run_table_and_figures(tmp_path):
    run_dir = tmp_path / "outputs" / "quadrants" / "s1" / "quadrant=all,seed=0"
    cfg = RunConfig(
        model=ModelConfig(name_or_path="tiny-random"),
        run_dir=str(run_dir),
        train=TrainConfig(steps=1, prompts_per_step=2, threads=1, measure_dlogp=False),
        rollout=RolloutConfig(group_size=2, max_new_tokens=8),
        eval=EvalConfig(problems=0),
        checkpoint=CheckpointConfig(every=1),
        tracking=TrackingConfig(log_samples_every=0),
    )
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    run_training(RunPlan.parse(cfg), RecordingTracker())
    main(
        [
            str(run_dir),
            "probe.prompts=2",
            "probe.positions=4",
            "probe.continuations=2",
            "probe.resamples=20",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            f"outputs={tmp_path / 'outputs'}",
            "train.threads=1",
        ]
    )
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert (
        tags["quadrants.role"] == "probe"
        and tags["quadrants.checkpoint_step"] == "1"
        and tags["model"] == "tiny-random"
    )
    source = (
        json.loads((run_dir / "run.json").read_text())["run_id"]
        if (run_dir / "run.json").is_file()
        else None
    )
    if source is not None:
        assert tags["quadrants.source_run_id"] == source
    assert run.data.params["probe.continuations"] == "2"
    metrics = run.data.metrics
    assert metrics["probe/all/positions"] == 4 and metrics["probe/rollouts"] > 0
    assert [m.step for m in client.get_metric_history(run.info.run_id, "probe/all/cmi_mean")] == [1]
    local = client.download_artifacts(run.info.run_id, "probe", str(tmp_path / "downloaded"))
    names = {p.name for p in Path(local).iterdir()}
    assert {
        "credit.csv",
        "branches.csv",
        "cmi_vs_entropy.png",
        "credit_by_quadrant.png",
        "credit_vs_token_weight.png",
        "metrics.json",
    } <= names
    with open(f"{local}/credit.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and {
        "cmi",
        "cmi_low",
        "cmi_high",
        "credit",
        "w_grpo",
        "w_hapo",
        "w_entroadv",
        "w_forking",
    } <= set(rows[0])


@pytest.mark.slow
def test_probe_every_logs_probe_metrics_during_training(tmp_path):
    run_dir = tmp_path / "run"
    cfg = RunConfig(
        model=ModelConfig(name_or_path="tiny-random"),
        run_dir=str(run_dir),
        train=TrainConfig(steps=2, prompts_per_step=2, threads=1, measure_dlogp=False),
        rollout=RolloutConfig(group_size=2, max_new_tokens=8),
        eval=EvalConfig(problems=0),
        checkpoint=CheckpointConfig(every=0),
        tracking=TrackingConfig(log_samples_every=0),
        probe=ProbeConfig(prompts=2, positions=3, continuations=2, resamples=20, every=2),
    )
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    assert [step for step, _ in tracker.series("probe/all/positions")] == [2]
    assert [step for step, _ in tracker.series("train/reward_mean")] == [1, 2]
    assert (run_dir / "probe" / "step_0000002" / "credit.csv").is_file()
    assert [p.name for p in tracker.artifacts if p.parent.name == "probe"] == ["step_0000002"]
