"""`train.device=cuda` without a usable CUDA device stops at start, naming the driver floor of the
pinned stack and the installed torch build, before any tracking run, process group or weights."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from quadrants.device import driver_version, no_cuda_message, require_usable_device

REPO = Path(__file__).resolve().parents[2]


def test_the_message_names_the_floor_of_the_build_and_of_the_pinned_stack():
    # a CPU-only torch: only the pinned stack's floor applies (CUDA 13.0: >= 580.65.06)
    cpu = no_cuda_message(None, None)
    assert "CPU-only build (torch.version.cuda is None)" in cpu and ">= 580.65.06" in cpu
    assert "no NVIDIA driver loaded" in cpu and "train.device=cpu" in cpu
    # a CUDA 12.6 build on an old driver: 12.x needs >= 525.60.13, the pinned stack >= 580.65.06
    old = no_cuda_message("12.6", "470.82.01")
    assert "built for CUDA 12.6 (torch.version.cuda)" in old and ">= 525.60.13" in old
    assert "needs >= 580.65.06" in old and "driver 470.82.01 loaded" in old
    assert ">= 580.65.06" in no_cuda_message("13.0", "570.86.10")


def test_driver_version_is_read_from_the_kernel_modules_line(tmp_path):
    line = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs)"
    )
    (tmp_path / "version").write_text(line + "\nGCC version:  gcc version 12.3.0\n")
    assert driver_version(tmp_path / "version") == "580.65.06"
    assert driver_version(tmp_path / "absent") is None


def test_only_cuda_without_cuda_stops():
    require_usable_device("auto", cuda_available=False)  # auto falls back to the CPU, by design
    require_usable_device("cpu", cuda_available=False)
    require_usable_device("cuda", cuda_available=True)
    with pytest.raises(RuntimeError, match=r"train.device=cuda but no usable CUDA device"):
        require_usable_device("cuda", cuda_available=False)


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the stop on a machine without CUDA")
def test_a_gpu_preset_stops_within_seconds_naming_the_driver_floor(tmp_path):
    """The paper preset (train.device: cuda) started as a job on this CPU machine: it stops within
    seconds (composition and imports only; ~15 s on a loaded 2-core machine), names the floor and
    the torch build, and writes nothing (no run directory, no tracking store, no weights read)."""
    outputs = tmp_path / "outputs"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "quadrants.distributed_main",
            "experiment=paper_quadrants_qwen7b",
            f"outputs={outputs}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert "train.device=cuda but no usable CUDA device" in done.stderr, done.stderr[-2000:]
    assert ">= 580.65.06" in done.stderr and "torch.version.cuda" in done.stderr
    assert elapsed < 60, elapsed  # seconds: nothing but imports and composition
    assert "Loading" not in done.stderr and not outputs.exists()
