"""Where training tensors live: `train.device` = auto | cpu | cuda.

- `auto`: this rank's GPU (`local_cuda_index`) when `torch.cuda.is_available()`, else the CPU.
- `cpu`: the CPU even on a GPU machine.
- `cuda`: this rank's GPU; a machine without a usable CUDA device fails at start, before any model
  is loaded, naming the driver floor and the torch build (`require_usable_device`). The GPU
  presets set it, so a node with an old driver never falls back to the CPU.

This rank's GPU is chosen from what the process can see (`local_cuda_index`): one visible GPU is
`cuda:0` whatever the rank's place on the node (Slurm's `--gpus-per-task=1` usually shows each
task only its own GPU, renumbered 0 by CUDA_VISIBLE_DEVICES), else `cuda:<local rank>` (torchrun,
or Slurm's `--gpus-per-node`, where every task of the node sees all of them).

The convention every module follows (one place for every transfer):

1. Rollout engines return `Rollouts` on the CPU (the HF engine runs `generate` on the model's device
   and moves its outputs back; vLLM builds CPU tensors). CPU rollouts pickle cheaply when ranks
   gather each other's blocks.
2. The training step moves the rollouts and rewards to the step's device once
   (`rollout.engine.rollouts_to`), so the TokenBatch, the policy forwards, the objectives and the
   telemetry all run on that device.
3. Metrics become Python floats (`.item()`) at the end of the step.

Helpers in quadrants/ops and quadrants/objectives create tensors on their inputs' device
(`device=x.device`, `new_zeros`), which tests/unit/train/test_device_placement.py checks by running
them on the `meta` device. On these CPU-only machines CUDA itself has never been run.
"""

from __future__ import annotations

from pathlib import Path

import torch

DEVICES = ("auto", "cpu", "cuda")

# The GPU stack `pip install 'quadrants[vllm]'` resolves to: vLLM 0.33.0 pins torch==2.14.0
# (vllm-project/vllm requirements/cuda.txt, with its CUDA 13 kernels: nvidia-cutlass-dsl[cu13]);
# torch 2.14's PyPI wheel is its CUDA 13.0 build (pytorch/pytorch RELEASE.md, release compatibility
# matrix; .github/scripts/generate_binary_build_matrix.py CUDA_STABLE = "13.0").
PINNED_STACK = "vLLM 0.33.0 with torch 2.14.0, CUDA 13.0 build"
# The oldest Linux driver a CUDA major release runs on (NVIDIA's CUDA Toolkit release notes, table
# "CUDA Toolkit and Corresponding Driver Versions": 13.x needs >= 580.65.06 and 12.x >= 525.60.13
# under minor-version compatibility). An older driver makes torch.cuda.is_available() False.
DRIVER_FLOOR = {12: "525.60.13", 13: "580.65.06"}
PINNED_DRIVER_FLOOR = DRIVER_FLOOR[13]
_DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def driver_version(path: Path = _DRIVER_VERSION_FILE) -> str | None:
    """The loaded NVIDIA kernel driver's version (`NVRM version: ... Kernel Module  580.65.06 ...`),
    None when no NVIDIA driver is loaded."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


def no_cuda_message(torch_cuda: str | None, driver: str | None) -> str:
    """Why `train.device=cuda` cannot run here, naming the driver floor and this torch build."""
    if torch_cuda is None:
        build = f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None)"
        floor = (
            f"the pinned GPU stack ({PINNED_STACK}) needs NVIDIA driver >= {PINNED_DRIVER_FLOOR}"
        )
    else:
        major = int(torch_cuda.split(".")[0])
        build = f"torch {torch.__version__} is built for CUDA {torch_cuda} (torch.version.cuda)"
        floor = (
            f"it needs NVIDIA driver >= {DRIVER_FLOOR.get(major, '?')}; the pinned GPU stack "
            f"({PINNED_STACK}) needs >= {PINNED_DRIVER_FLOOR}"
        )
    found = f"driver {driver} loaded" if driver else "no NVIDIA driver loaded"
    return (
        f"train.device=cuda but no usable CUDA device here (torch.cuda.is_available() is False): "
        f"{build}; {floor}; {found} ({_DRIVER_VERSION_FILE}). Run on a GPU node whose driver "
        f"meets the floor (nvidia-smi shows it), or install a torch build for that driver, or set "
        f"train.device=cpu to train on the CPU"
    )


def require_usable_device(name: str, *, cuda_available: bool | None = None) -> None:
    """Stop at once when `train.device=cuda` finds no usable CUDA device: called first thing in a
    job, before any tracking run, process group or weights."""
    validate_device(name)
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if name == "cuda" and not available:
        raise RuntimeError(no_cuda_message(torch.version.cuda, driver_version()))


def validate_device(name: str) -> None:
    """A name check (compose time: a login node that submits GPU jobs has no GPU itself)."""
    if name not in DEVICES:
        raise ValueError(f"train.device={name!r} is unknown; choose one of {list(DEVICES)}")


def local_cuda_index(local_rank: int, visible: int) -> int:
    """The CUDA index of the rank `local_rank` on its node when the process sees `visible` GPUs:
    0 when it sees one (its own), else its local rank, which must be below `visible`."""
    if visible == 1:
        return 0
    if not 0 <= local_rank < visible:
        raise RuntimeError(
            f"local rank {local_rank} sees {visible} GPU(s) and needs one of its own. Ask "
            f"Slurm for one per task (hydra.launcher.gpus_per_task=1) or for one per task on every "
            f"node (hydra.launcher.gpus_per_node = tasks_per_node), or start fewer ranks per node"
        )
    return local_rank


def resolve_device(
    name: str,
    local_rank: int = 0,
    *,
    cuda_available: bool | None = None,
    visible: int | None = None,
) -> torch.device:
    """The torch.device for `train.device=name` on this process (rank `local_rank` on its node,
    seeing `visible` GPUs: torch.cuda.device_count() when None)."""
    validate_device(name)
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if name == "cpu" or (name == "auto" and not available):
        return torch.device("cpu")
    if not available:
        raise RuntimeError(no_cuda_message(torch.version.cuda, driver_version()))
    count = torch.cuda.device_count() if visible is None else visible
    return torch.device("cuda", local_cuda_index(local_rank, count))


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (the CPU for a module without parameters)."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")
