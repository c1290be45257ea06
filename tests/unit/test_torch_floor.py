"""An older torch is refused at compose time for a run that trains on CUDA in mixed precision,
naming the installed version, the floor and the fix (quadrants/run_plan/composition.py
`validate_torch_floor`: the fused LM head's `torch.addmm(..., out_dtype=torch.float32)`, first
released in torch 2.8 by pytorch/pytorch#150812).

The version the check sees is `torch.__version__`, patched here; the configurations are the real
paper preset composed as the sweep composes it. What only a GPU with torch < 2.8 could show (the
TypeError at the first backward that the refusal prevents) is not run: none is here, and CI's
torch is 2.13.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from quadrants.launch.hydra_setup import compose_run_config, preflight
from quadrants.run_plan.composition import TORCH_FLOOR, validate_torch_floor

PAPER = "experiment=paper_quadrants_qwen7b"  # train.device=cuda, train.precision=bf16-mixed
FIX = "pip install 'torch>=2.8'"


@pytest.fixture
def torch_version(monkeypatch):
    """Set the torch version the check reads (each parse checks it: no plan is cached)."""

    def set_version(version: str) -> None:
        monkeypatch.setattr(torch, "__version__", version)

    return set_version


def test_the_floor_is_what_pyproject_asks():
    # pyproject.toml's dependency line and the check name the same release
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'"torch>={TORCH_FLOOR},' in pyproject
    assert TORCH_FLOOR == "2.8"


def test_the_paper_preset_is_refused_under_torch_2_7_naming_the_fix(torch_version):
    """packaging's Version("2.7.1+cu126").release = (2, 7, 1) < (2, 8): refused, with the
    installed version, the floor and the pip command in the message."""
    torch_version("2.7.1+cu126")
    with pytest.raises(ValueError) as refused:
        compose_run_config([PAPER], files=False)
    message = str(refused.value)
    assert "torch 2.7.1+cu126 is installed" in message, message
    assert "needs torch >= 2.8" in message, message
    assert "train.device=cuda with train.precision=bf16-mixed" in message, message
    assert FIX in message and "pytorch/pytorch#150812" in message, message


def test_the_sweep_is_refused_before_its_memory_plan(torch_version):
    """The paper command as a SLURM sweep (launcher=slurm_ddp): refused at compose time, by the
    same message, before any job is planned or queued."""
    torch_version("2.6.0")
    argv = ["-m", PAPER, "launcher=slurm_ddp", "seed=0", "tracking.sqlite_on_slurm=true"]
    with pytest.raises(ValueError, match=r"torch 2\.6\.0 is installed.*torch>=2\.8"):
        preflight(argv)


@pytest.mark.parametrize("version", ["2.8.0", "2.8.0rc1", "2.13.0+cpu", "2.14.0+cu130"])
def test_the_paper_preset_composes_from_torch_2_8_on(torch_version, version):
    """(2, 8, 0) >= (2, 8), and (2, 13, 0), (2, 14, 0) too; the pre-release 2.8.0rc1 has release
    (2, 8, 0) as well, and the local tags (+cpu, +cu130) are not part of the release."""
    torch_version(version)
    run = compose_run_config([PAPER], files=False)
    assert (run.train.device, run.train.precision) == ("cuda", "bf16-mixed")


@pytest.mark.parametrize(
    ("device", "precision", "cuda_here", "refused"),
    [
        ("cuda", "bf16-mixed", False, True),  # the GPU presets: refused even on a login node
        ("cuda", "auto", False, True),  # auto is bf16-mixed on CUDA
        ("auto", "bf16-mixed", True, True),  # auto on a machine that sees a GPU trains there
        ("auto", "bf16-mixed", False, False),  # ... and on one without, on the CPU (checked
        # again by the job where it runs: launch/job.py parses its own plan there)
        ("cpu", "bf16-mixed", False, False),  # the CPU's bf16 GEMM is addmm_ in float32
        ("cuda", "fp32", False, False),  # no autocast: the head's GEMM is float32 throughout
        ("cuda", "bf16", False, False),  # pure bf16, no autocast either
    ],
)
def test_only_mixed_precision_on_cuda_needs_the_floor(
    torch_version, monkeypatch, device, precision, cuda_here, refused
):
    torch_version("2.7.1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_here)
    train = compose_run_config(["model=tiny_random"], files=False).train
    train = dataclasses.replace(train, device=device, precision=precision)
    if refused:
        with pytest.raises(ValueError, match=r"torch 2\.7\.1 is installed.*torch>=2\.8"):
            validate_torch_floor(train)
    else:
        validate_torch_floor(train)
