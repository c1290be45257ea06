"""The SLURM launchers point vLLM's, Triton's and FlashInfer's compile caches at the node's own
/tmp (every process of a sweep shares the home directory otherwise): the `setup` lines of
sweeps/launcher/slurm.yaml (which slurm_ddp.yaml inherits) run in bash as the batch script runs
them; a value the user exported is kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

LAUNCHER = Path(__file__).resolve().parents[3] / "sweeps" / "launcher"
CACHES = ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")


@pytest.mark.subprocess
def test_the_setup_lines_put_the_compile_caches_on_node_local_storage():
    setup = list(OmegaConf.load(LAUNCHER / "slurm.yaml").hydra.launcher.setup)
    script = "\n".join([*setup, *(f'echo "{name}=${name}"' for name in CACHES)])
    env = {k: v for k, v in os.environ.items() if k not in CACHES}
    env.update(USER="alice", TRITON_CACHE_DIR="/scratch/mine/triton")  # one the user chose
    out = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "VLLM_CACHE_ROOT=/tmp/quadrants-alice/vllm" in out
    assert "FLASHINFER_WORKSPACE_BASE=/tmp/quadrants-alice/flashinfer" in out
    assert "TRITON_CACHE_DIR=/scratch/mine/triton" in out  # kept
    assert "slurm" in OmegaConf.load(LAUNCHER / "slurm_ddp.yaml").defaults  # inherits them
