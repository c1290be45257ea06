"""A 2-rank training job on the real one-machine SLURM cluster (launcher=slurm_ddp): submitit starts
one srun task per rank, the ranks find each other from SLURM's environment (gloo), train, checkpoint
every 2 steps with DCP, are requeued mid-run (`scontrol requeue`: SIGTERM to both tasks, then the job
starts again from the beginning). On the SIGTERM the ranks agree at the next step boundary and save
that step together; the requeued job resumes from exactly that step into the same MLflow run, with
every step logged exactly once. The tiny random model keeps it to seconds."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

DEV_CLUSTER = [
    "launcher=slurm_ddp",
    "hydra.launcher.tasks_per_node=2",
    "hydra.launcher.partition=debug",
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=30",
    "tracking.sqlite_on_slurm=true",  # one machine: the SQLite store is safe
]
FAST = [
    "model=tiny_random",
    "train.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "train.mini_batch_size=2",
    "eval.problems=0",
    "tracking.log_samples_every=0",
]


def test_slurm_nodelist_expands_to_its_first_host(slurm_cluster):
    # what a rank does without MASTER_ADDR: `scontrol show hostnames` against the cluster
    env = {
        **slurm_cluster.env,
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_JOB_NODELIST": "gpu[007-009]",
    }
    env.pop("MASTER_ADDR", None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from quadrants.distributed.collectives import launch_info; "
            "print(launch_info(os.environ).master_addr)",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "gpu007", done.stderr


def test_two_task_job_trains_is_requeued_and_resumes_every_step_once(slurm_cluster, tmp_path):
    run_dir, job_id = slurm_cluster.interrupted_sweep(
        tmp_path,
        ["objective=grpo", *DEV_CLUSTER, *FAST, "train.steps=30", "checkpoint.every=2"],
        sweep_id="ddp",
        what="a checkpoint of step 4",
        ready=lambda run: (run / "checkpoints" / "step_0000004").exists(),
        interrupt=["scontrol", "requeue"],
    )
    job_dir = run_dir.parent / ".submitit" / job_id
    assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout
    logs = sorted(p.name for p in job_dir.iterdir() if p.name.endswith("_log.out"))
    assert len(logs) == 2  # one log per srun task (rank)
    # srun is told the job's CPUs per task before it starts the ranks (SLURM 22.05-23.02, this
    # cluster's release, do not pass sbatch's on: sweeps/launcher/slurm.yaml)
    script = (job_dir / f"{job_id}_submission.sh").read_text()
    export = "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK"
    assert export in script and script.index(export) < script.index("\nsrun "), script
    log = (run_dir / "quadrants.log").read_text()
    assert "joined the gloo process group via slurm" in log
    # on SIGTERM both ranks left at the same step boundary, with that step checkpointed (by the signal,
    # or already by the periodic save when the step was even)
    saved = re.findall(r"step (\d+) is checkpointed: leaving", log)
    assert len(saved) == 2 and saved[0] == saved[1], log[-3000:]
    assert (
        f"(step {int(saved[0])})" in log.split("resumed from", 1)[1].splitlines()[0]
    )  # and resumed there
    shards = sorted(
        p.name for p in (run_dir / "checkpoints" / "step_0000030" / "model_optim").iterdir()
    )
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    (run,) = children  # rank 1 logged nothing; the requeued job continued rank 0's run
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/step"))
    assert steps == list(range(1, 31))


def test_usr2_to_a_two_task_job_checkpoints_then_submitit_requeues_it_once(slurm_cluster, tmp_path):
    """SLURM's time-limit signal (USR2, here `scancel --signal=USR2`, which reaches both tasks) with
    submitit's real handler: the ranks save the step in flight's boundary together, then submitit on
    task 0 requeues the job (its other tasks' handlers return), once; the requeued job resumes from
    that step into the same MLflow run. The tiny steps end well within the 30 s that rank 0 waits
    for a boundary (quadrants/run/preemption.py; the longer-step case: tests/distributed/
    test_preemption.py), so no requeue without a checkpoint here."""
    run_dir, job_id = slurm_cluster.interrupted_sweep(
        tmp_path,
        ["objective=grpo", *DEV_CLUSTER, *FAST, "train.steps=30", "checkpoint.every=1000"],
        sweep_id="ddp_usr2",
        what="step 3 in the log",
        ready=lambda run: (
            (run / "quadrants.log").exists() and "step 3/30" in (run / "quadrants.log").read_text()
        ),
        interrupt=["scancel", "--signal=USR2"],
    )
    log = (run_dir / "quadrants.log").read_text()
    saved = re.findall(r"checkpoint of step (\d+) written by every rank", log)
    assert len(saved) == 2 and saved[0] == saved[1], log[-3000:]  # both ranks, the same step
    assert log.count("Requeued job") == 1 and log.index("written by every rank") < log.index(
        "Requeued job"
    ), log[-3000:]
    assert "no step boundary within" not in log
    assert f"(step {int(saved[0])})" in log.split("resumed from", 1)[1].splitlines()[0]
    assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    (run,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/step"))
    assert steps == list(range(1, 31))
