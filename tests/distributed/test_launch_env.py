"""Rank layout from the launcher's environment, and the layout checks (no processes started).
The SLURM nodelist expansion runs against the real dev cluster in tests/slurm/test_distributed_slurm.py."""

from __future__ import annotations

import pytest

from quadrants.config import RunConfig
from quadrants.device import resolve_device
from quadrants.distributed.collectives import export_rendezvous, launch_info
from quadrants.run_plan.composition import check_layout, generation_block


def test_torchrun_environment():
    info = launch_info(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "n1",
            "MASTER_PORT": "29500",
        }
    )
    assert (
        info.rank,
        info.world_size,
        info.local_rank,
        info.master_addr,
        info.master_port,
        info.source,
    ) == (3, 4, 1, "n1", 29500, "torchrun")


def test_slurm_environment_with_an_explicit_master():
    # srun task 5 of 8, second task on its node; job 123456 -> port 15000 + 123456 % 5000 = 15000 + 3456
    env = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "123456",
        "MASTER_ADDR": "gpu-001",
    }
    info = launch_info(env)
    assert (info.rank, info.world_size, info.local_rank, info.master_addr, info.master_port) == (
        5,
        8,
        1,
        "gpu-001",
        18456,
    )
    # the step's task count, not the job's (srun --ntasks smaller than the allocation)
    assert launch_info({**env, "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}).world_size == 2
    # the batch script of a 2-task job (outside srun): PROCID 0 and NTASKS 2 but no step -> no group
    assert launch_info({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}) is None


def test_an_srun_task_gets_torchruns_variables_for_the_process_group_and_vllm():
    # task 5 of 8 from the SLURM variables above; a MASTER_PORT already set is kept
    environ = {
        "SLURM_PROCID": "5",
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "123456",
        "MASTER_ADDR": "gpu-001",
        "MASTER_PORT": "29999",
    }
    export_rendezvous(launch_info(environ), environ)
    assert {
        k: environ[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    } == {
        "MASTER_ADDR": "gpu-001",
        "MASTER_PORT": "29999",
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
    }


def test_plain_process_and_single_task_jobs_have_no_layout():
    assert launch_info({}) is None
    info = launch_info(
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1"}
    )  # one-task job
    assert info.world_size == 1


def layout(prompts: int, group: int, mini: int, block: int | None = None) -> RunConfig:
    cfg = RunConfig()
    cfg.train.prompts_per_step, cfg.rollout.group_size, cfg.train.mini_batch_size = (
        prompts,
        group,
        mini,
    )
    cfg.distributed.prompts_per_generate = block
    return cfg


def test_layout_checks_name_the_key_and_what_to_use():
    check_layout(layout(4, 4, 8), 2)  # 16 sequences, mini-batches of 8 -> 4 rows per rank
    assert generation_block(layout(4, 4, 8), 2) == 2  # default: one block of 4 / 2 prompts per rank
    with pytest.raises(ValueError, match="train.prompts_per_step=3"):
        check_layout(layout(3, 4, 4), 2)
    with pytest.raises(ValueError, match="train.mini_batch_size=6"):
        check_layout(layout(4, 4, 6), 4)  # 6 rows do not split into 4 shares
    with pytest.raises(
        ValueError, match="train.mini_batch_size=12 does not divide the 16 sequences"
    ):
        check_layout(
            layout(4, 4, 12), 2
        )  # 16 = 12 + 4: uneven mini-batches are refused, any world size
    with pytest.raises(ValueError, match="distributed.prompts_per_generate=3"):
        check_layout(layout(4, 4, 8, block=3), 1)
    micro = layout(4, 4, 8)
    # 3 sequences do not split over 2 ranks: refused, naming 2, 4, 6
    micro.train.micro_batch_size = 3
    with pytest.raises(
        ValueError, match=r"train.micro_batch_size=3 .* 2 equal shares.*\(e.g. 2, 4, 6\)"
    ):
        check_layout(micro, 2)
    check_layout(micro, 1)  # one process: any micro-batch
    for fine in (2, 4, 6, 8, 0):  # multiples of 2, the whole mini-batch (8), none
        micro.train.micro_batch_size = fine
        check_layout(micro, 2)
    with pytest.raises(ValueError, match="does not deal evenly"):
        check_layout(layout(4, 4, 8, block=4), 2)  # one block of 4 prompts for 2 ranks


def slurm_task(local_id: int, visible: str) -> dict[str, str]:
    """Task 4 + local_id of an 8-task job on 2 nodes of 4 GPUs, as srun starts it, with the
    CUDA_VISIBLE_DEVICES Slurm gives the task."""
    return {
        "SLURM_PROCID": str(4 + local_id),
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_LOCALID": str(local_id),
        "SLURM_JOB_ID": "77",
        "MASTER_ADDR": "gpu-001",
        "CUDA_VISIBLE_DEVICES": visible,
    }


def bound_device(environ: dict[str, str]) -> tuple[str, str]:
    """(the torch device the rank binds, the LOCAL_RANK vLLM reads) as init_distributed chooses
    them, CUDA made available with as many devices as CUDA_VISIBLE_DEVICES lists (what
    torch.cuda.device_count() reports inside such a task; no GPU here)."""
    info = launch_info(environ)
    visible = len(environ["CUDA_VISIBLE_DEVICES"].split(","))
    target = resolve_device("auto", info.local_rank, cuda_available=True, visible=visible)
    export_rendezvous(info, environ, target.index)
    return str(target), environ["LOCAL_RANK"]


def test_gpus_per_task_binds_the_one_visible_gpu_on_every_rank():
    """sbatch --gpus-per-task=1: each task sees its own GPU only (task 3 of the node: physical GPU 3,
    CUDA_VISIBLE_DEVICES=3, cuda:0 inside the task). cuda:<SLURM_LOCALID> would not exist there."""
    for local_id in range(4):
        assert bound_device(slurm_task(local_id, str(local_id))) == ("cuda:0", "0")


def test_gpus_per_node_binds_the_gpu_of_the_local_rank():
    """sbatch --gpus-per-node=4: every task of the node sees all 4, so task 3 takes cuda:3."""
    for local_id in range(4):
        expected = (f"cuda:{local_id}", str(local_id))
        assert bound_device(slurm_task(local_id, "0,1,2,3")) == expected


def test_too_few_gpus_for_the_tasks_of_a_node_is_a_clear_error():
    """4 tasks on a node but --gpus-per-node=2: local rank 3 has no GPU of its own."""
    with pytest.raises(RuntimeError, match=r"local rank 3 sees 2 GPU\(s\).*gpus_per_task=1"):
        bound_device(slurm_task(3, "0,1"))
