"""Checkpoint on a signal across ranks, for real: 2 gloo ranks under torchrun train until SIGTERM
reaches both rank processes mid-run (as `scancel`/`scontrol requeue` signal every task of a job). The
ranks agree at the next step boundary, write that step's checkpoint together (one DCP shard file per
rank) and leave; one plain process then resumes from it into the same MLflow run, every step once.
Periodic checkpoints are effectively off (`checkpoint.every` beyond the run), so the only checkpoint
there can be is the one the signal wrote."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from mlflow.tracking import MlflowClient

COMMON = [
    "model=tiny_random",
    "sweep_id=preempt",
    "train.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "train.mini_batch_size=2",
    "eval.problems=0",
    "train.threads=1",
    "checkpoint.every=1000",
    "tracking.log_samples_every=0",
]
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def _logged_steps(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"step (\d+)/200 ", text)]


@pytest.mark.slow
def test_sigterm_to_every_rank_checkpoints_the_last_step_and_one_process_resumes(tmp_path):
    log_path = tmp_path / "ranks.log"
    with open(log_path, "w") as log:
        torchrun = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "2",
                "-m",
                "quadrants.distributed_main",
                *COMMON,
                "train.steps=200",
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=ENV,
        )
        deadline = time.monotonic() + 300
        while max(_logged_steps(log_path.read_text()), default=0) < 3:
            assert torchrun.poll() is None and time.monotonic() < deadline, log_path.read_text()[
                -4000:
            ]
            time.sleep(0.2)
        ranks = psutil.Process(torchrun.pid).children()
        assert len(ranks) == 2
        for rank in ranks:
            os.kill(rank.pid, signal.SIGTERM)
        torchrun.wait(timeout=120)
    text = log_path.read_text()
    assert "the ranks checkpoint together" in text
    saved = re.findall(r"checkpoint of step (\d+) written by every rank", text)
    assert saved, text[-4000:]
    step = int(saved[0])
    assert step >= 3 and set(saved) == {saved[0]}  # both ranks wrote the same step
    assert step == max(_logged_steps(text))  # the last step logged is the one saved: nothing lost
    run_dir = tmp_path / "outputs" / "quadrants" / "preempt" / "default"
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == [f"step_{step:07d}"]
    shards = sorted(
        p.name for p in (run_dir / "checkpoints" / checkpoints[0] / "model_optim").iterdir()
    )
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]

    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "quadrants.distributed_main",
            *COMMON,
            f"train.steps={step + 1}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"resumed_from={step}" in resumed.stdout

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    steps = sorted(
        m.step for m in client.get_metric_history(runs[0].info.run_id, "train/reward_mean")
    )
    assert steps == list(range(1, step + 2))  # every step exactly once across the two launches
