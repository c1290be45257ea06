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


# Two gloo ranks, a step far longer than SLURM's warning: the ranks run `checkpointed_steps` with a
# stand-in for submitit's USR2 handler (on task 0: requeue, then sys.exit; on the others: return at
# once, submitit/core/job_environment.py `SignalHandler.checkpoint_and_try_requeue`), USR2 reaches both
# ranks mid-step (SLURM signals every task), and the step goes on for 4 s with a collective at its end.
_LONG_STEP = """
import os, signal, sys, time
import torch, torch.distributed as dist
from quadrants.run.preemption import checkpointed_steps

dist.init_process_group("gloo")
rank = dist.get_rank()

def record(what):
    with open(os.path.join(sys.argv[1], f"rank{rank}.log"), "a") as f:
        f.write(f"{time.monotonic():.3f} {what}\\n")

def submitit_like(signum, frame):
    if rank != 0:
        return
    record("requeue")
    sys.exit(-1)

signal.signal(signal.SIGUSR2, submitit_like)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for index in checkpointed_steps(
        range(10), optimizer=opt, save=lambda step, rng: record(f"save {step}"), first_step=0,
        is_saved=lambda step: False, defer_s=0.5,
    ):
        if index == 2:
            os.kill(os.getpid(), signal.SIGUSR2)
            record("signalled")
            end = time.monotonic() + 4.0
            while time.monotonic() < end:
                time.sleep(0.05)
        dist.barrier()
        record(f"step {index + 1} done")
except SystemExit as leaving:
    record(f"exit {leaving.code}")
    raise
"""


def _events(path) -> list[tuple[float, str]]:
    return [
        (float(t), what)
        for t, what in (line.split(" ", 1) for line in path.read_text().splitlines())
    ]


@pytest.mark.slow
def test_rank0_requeues_within_the_deadline_when_the_step_outlasts_the_warning(tmp_path):
    script = tmp_path / "long_step.py"
    script.write_text(_LONG_STEP)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=ENV,
        cwd=tmp_path,
    )
    assert (tmp_path / "rank0.log").exists(), done.stderr[-4000:]
    rank0, rank1 = _events(tmp_path / "rank0.log"), _events(tmp_path / "rank1.log")
    at = {what: t for t, what in rank0}
    # rank 0 handed USR2 to submitit's handler 0.5 s after it, while step 3 was still running
    # (before this fix: only after step 3 completed, i.e. after the time limit on a real cluster)
    assert "requeue" in at, rank0
    assert at["requeue"] - at["signalled"] < 2.0 and at["requeue"] < at["step 3 done"], rank0
    # then both ranks left at that boundary, without a checkpoint (the job resumes from the last
    # periodic one), with USR2's exit code
    for events in (rank0, rank1):
        whats = [what for _, what in events]
        assert not any(w.startswith("save") for w in whats), whats
        assert whats[-2:] == ["step 3 done", f"exit {128 + signal.SIGUSR2}"], whats
