"""`torchrun -m quadrants.distributed_main` end to end: 2 gloo ranks train and checkpoint into
one MLflow run (real SQLite store), then the same command with one process resumes it: the same run
directory, the same MLflow run, every step logged exactly once. The tiny *random* model keeps it fast
(its rewards are all 0: this tests launching, tracking and resuming, not learning)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

COMMON = [
    "model=tiny_random",
    "sweep_id=dist",
    "train.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "train.mini_batch_size=2",
    "eval.problems=0",
    "train.threads=1",
    "checkpoint.every=1",
    "tracking.log_samples_every=1",
]


def launch(cwd, ranks: int, *overrides: str) -> subprocess.CompletedProcess:
    prefix = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(ranks),
            "-m",
        ]
        if ranks > 1
        else [sys.executable, "-m"]
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return subprocess.run(
        [*prefix, "quadrants.distributed_main", *COMMON, *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.slow
def test_two_rank_run_resumes_in_one_process_into_the_same_mlflow_run(tmp_path):
    first = launch(tmp_path, 2, "train.steps=2")
    assert first.returncode == 0, first.stderr[-4000:]
    run_dir = tmp_path / "outputs" / "quadrants" / "dist" / "default"
    assert f"run_dir={run_dir} " in first.stdout and "resumed_from=0" in first.stdout
    shards = sorted(
        p.name for p in (run_dir / "checkpoints" / "step_0000002" / "model_optim").iterdir()
    )
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # one shard file per rank

    second = launch(tmp_path, 1, "train.steps=3")
    assert second.returncode == 0, second.stderr[-4000:]
    assert "resumed_from=2" in second.stdout

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    assert len(runs) == 1  # rank 1 logged nothing; the resume continued rank 0's run
    run = runs[0]
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/reward_mean"))
    assert steps == [1, 2, 3]
    assert sorted(p.name for p in (run_dir / "samples").iterdir()) == [
        "step_000001.json",
        "step_000002.json",
        "step_000003.json",
    ]
