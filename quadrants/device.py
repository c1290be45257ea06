"""Where training tensors live: `train.device` = auto | cpu | cuda.

- `auto`: this rank's GPU (`local_cuda_index`) when `torch.cuda.is_available()`, else the CPU.
- `cpu`: the CPU even on a GPU machine.
- `cuda`: this rank's GPU; a machine without CUDA fails at start, before any model is loaded.

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

import torch

DEVICES = ("auto", "cpu", "cuda")


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
        raise RuntimeError(
            "train.device=cuda but torch.cuda.is_available() is False on this machine (no "
            "GPU, no CUDA driver, or a CPU-only torch build); run on a GPU node or set "
            "train.device=auto or cpu"
        )
    count = torch.cuda.device_count() if visible is None else visible
    return torch.device("cuda", local_cuda_index(local_rank, count))


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (the CPU for a module without parameters)."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")
