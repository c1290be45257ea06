"""The SLURM launcher profiles (sweeps/launcher/slurm*.yaml) compose with the quadrants tree, keep
every setting under hydra.launcher.* (overridable from the command line) and need no cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from quadrants.launch.hydra_setup import CONFIG_DIR, register

# these tests compose the profiles with no tracking server: the SQLite store, allowed explicitly
# (a real sweep with it is refused, tests/unit/sweep/test_refusals.py)
SQLITE = "tracking.sqlite_on_slurm=true"

KEYS = {
    "partition",
    "account",
    "qos",
    "timeout_min",
    "gpus_per_node",
    "gres",
    "cpus_per_task",
    "mem_gb",
    "array_parallelism",
    "signal_delay_s",
    "max_num_timeout",
    "setup",
    "submitit_folder",
}


def _compose(*overrides: str):
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
        threads = cfg.train.threads
    return launcher, threads


@pytest.mark.parametrize("profile", ["slurm", "slurm_dev"])
def test_profile_uses_submitit_slurm_with_every_setting(profile):
    launcher, threads = _compose(f"launcher={profile}")
    assert launcher["_target_"].endswith("submitit_launcher.SlurmLauncher")
    assert KEYS <= set(launcher)
    assert launcher["max_num_timeout"] >= 1
    assert launcher["additional_parameters"] == {"requeue": True}
    assert launcher["submitit_folder"].endswith("/.submitit/%j")
    assert threads == launcher["cpus_per_task"]
    # no machine-specific absolute paths in the setup lines: not this checkout, not a home directory
    checkout = str(Path(__file__).resolve().parents[2])
    home = str(Path.home())
    assert not any(
        checkout in line or home in line or "/home/" in line for line in launcher["setup"]
    )


def test_dev_profile_targets_the_dev_cluster():
    launcher, threads = _compose("launcher=slurm_dev")
    assert launcher["partition"] == "debug"
    assert threads == launcher["cpus_per_task"] == 1


def test_overrides_reach_the_launcher_and_the_thread_count():
    launcher, threads = _compose(
        "launcher=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=proj",
        "hydra.launcher.qos=high",
        "hydra.launcher.gpus_per_node=4",
        "hydra.launcher.cpus_per_task=16",
        "hydra.launcher.timeout_min=120",
        "hydra.launcher.max_num_timeout=5",
    )
    assert (launcher["partition"], launcher["account"], launcher["qos"]) == ("gpu", "proj", "high")
    assert (launcher["gpus_per_node"], launcher["timeout_min"], launcher["max_num_timeout"]) == (
        4,
        120,
        5,
    )
    assert threads == 16


def test_quadrants_preflight_accepts_the_profiles():
    from quadrants.launch.hydra_setup import preflight

    assert preflight(["-m", "quadrant=PHR,NHR,PLR,NLR", "launcher=slurm_dev"]) == 4
    assert (
        preflight(
            [
                "-m",
                "experiment=paper_main_qwen7b",
                "launcher=slurm",
                SQLITE,
                "hydra.launcher.partition=gpu",
                # one GPU per 7B run does not fit: the memory plan refuses it
                # (tests/unit/memory/test_plan.py); composing the profile is what is tested here
                "cluster.gpu_memory_gib=null",
            ]
        )
        == 6
    )


# ------------------------------------------------------------------ cluster-scale presets on SLURM
# The paper presets need GPUs and the vLLM engine: they are composed here, never run (no GPU on these
# machines). With launcher=slurm each job asks SLURM for the GPUs its process uses.
PAPER_PRESETS = {"paper_quadrants_qwen7b": 8, "paper_main_qwen7b": 6, "paper_main_dsr1p5b": 4}


@pytest.mark.parametrize("preset", sorted(PAPER_PRESETS))
def test_paper_presets_compose_with_the_slurm_profile_and_request_gpus(preset):
    from quadrants.launch.hydra_setup import preflight

    launcher, threads = _compose(
        f"experiment={preset}", "launcher=slurm", "hydra.launcher.partition=gpu"
    )
    assert launcher["_target_"].endswith("submitit_launcher.SlurmLauncher")
    assert launcher["gpus_per_node"] == 1  # the vLLM engine's tensor-parallel size (default 1)
    assert launcher["partition"] == "gpu" and launcher["name"] == preset  # job name = the study
    assert (
        launcher["timeout_min"] * (launcher["max_num_timeout"] + 1) >= 4 * 1440
    )  # days, with requeues
    assert launcher["additional_parameters"]["requeue"] is True
    assert threads == launcher["cpus_per_task"] == 8
    # every job of the study validates with the profile (one job array)
    # (the memory plan, skipped here, refuses one GPU per 7B run: tests/unit/memory/test_plan.py)
    jobs = preflight(
        ["-m", f"experiment={preset}", "launcher=slurm", "cluster.gpu_memory_gib=null", SQLITE]
    )
    assert jobs == PAPER_PRESETS[preset]


def test_gpu_request_follows_the_tensor_parallel_size_and_stays_overridable():
    launcher, _ = _compose(
        "experiment=paper_main_qwen7b", "launcher=slurm", "rollout.vllm.tensor_parallel_size=4"
    )
    assert launcher["gpus_per_node"] == 4
    launcher, _ = _compose(
        "experiment=paper_main_qwen7b", "launcher=slurm", "hydra.launcher.gpus_per_node=8"
    )
    assert launcher["gpus_per_node"] == 8


def test_cpu_runs_request_no_gpu():
    assert _compose("launcher=slurm")[0]["gpus_per_node"] is None  # the HF engine on the tiny model
    # the dev cluster has no GPU: its profile never asks, whatever the run
    assert (
        _compose("experiment=paper_main_qwen7b", "launcher=slurm_dev")[0]["gpus_per_node"] is None
    )


def test_detached_submission_needs_a_slurm_profile(tmp_path, monkeypatch, capsys):
    from quadrants.launch.submit import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["quadrant=PHR,NHR", "model=tiny_random"])  # the default launcher: local
    assert "needs a SLURM launcher profile" in str(exit_info.value)
    assert "launcher=slurm" in str(exit_info.value)
    assert not (tmp_path / "outputs").exists()  # nothing written
    with pytest.raises(SystemExit) as exit_info:
        main(["quadrant=PHR,XHR", "launcher=slurm_dev"])
    assert "nothing was submitted" in str(exit_info.value) and "XHR" in str(exit_info.value)


def test_multi_rank_profile_checks_every_runs_layout_at_compose_time():
    """launcher=slurm_ddp runs nodes x tasks_per_node ranks per run: a batch that does not deal evenly
    to them, or a vLLM engine wider than one GPU per rank, stops the command before any submission."""
    from quadrants.launch.hydra_setup import preflight

    assert (
        preflight(["-m", "quadrant=PHR,NHR", "launcher=slurm_ddp", SQLITE]) == 2
    )  # 2 runs of 8 ranks each (the profile's default: one 8-GPU node per run)
    # 16 ranks: the 7B preset's batch deals evenly (its prompts and mini-batches are multiples of 16)
    assert (
        preflight(
            [
                "-m",
                "experiment=paper_main_qwen7b",
                "launcher=slurm_ddp",
                SQLITE,
                "hydra.launcher.nodes=2",
                "hydra.launcher.tasks_per_node=8",
            ]
        )
        == 6
    )
    with pytest.raises(
        ValueError, match=r"train.prompts_per_step=3 does not deal evenly to 8 ranks"
    ):
        preflight(
            ["-m", "quadrant=PHR,NHR", "launcher=slurm_ddp", SQLITE, "train.prompts_per_step=3"]
        )
    with pytest.raises(
        ValueError,
        match=r"train.prompts_per_step=16 does not deal evenly to 3 ranks; use a multiple of 3",
    ):
        preflight(
            ["-m", "quadrant=PHR", "launcher=slurm_ddp", SQLITE, "hydra.launcher.tasks_per_node=3"]
        )
    with pytest.raises(
        ValueError, match=r"rollout.vllm.tensor_parallel_size=2 with 8 trainer ranks is not built"
    ):
        preflight(
            [
                "-m",
                "quadrant=PHR",
                "launcher=slurm_ddp",
                SQLITE,
                "rollout=vllm",
                "rollout.vllm.tensor_parallel_size=2",
            ]
        )
    # one process per run (launcher=slurm): a 2-GPU engine is fine
    assert (
        preflight(
            [
                "-m",
                "quadrant=PHR",
                "launcher=slurm",
                SQLITE,
                "rollout=vllm",
                "rollout.vllm.tensor_parallel_size=2",
            ]
        )
        == 1
    )
