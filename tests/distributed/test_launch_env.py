"""Rank layout from the launcher's environment, and the layout checks (no processes started).
The SLURM nodelist expansion runs against the real dev cluster in tests/slurm/test_distributed_slurm.py."""

from __future__ import annotations

import pytest

from quadrants.config import RunConfig
from quadrants.distributed.collectives import (
    check_layout,
    export_rendezvous,
    generation_block,
    launch_info,
)


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
