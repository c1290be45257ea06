"""Where training tensors live: `train.device` = auto | cpu | cuda.

- `auto`: `cuda:<LOCAL_RANK>` when `torch.cuda.is_available()`, else the CPU.
- `cpu`: the CPU even on a GPU machine.
- `cuda`: `cuda:<LOCAL_RANK>`; a machine without CUDA fails at start, before any model is loaded.

The convention every module follows (one place for every transfer):

1. Rollout engines return `Rollouts` on the CPU (the HF engine runs `generate` on the model's device
   and moves its outputs back; vLLM builds CPU tensors). CPU rollouts pickle cheaply when ranks
   gather each other's blocks.
2. The training step moves the rollouts and rewards to the step's device once (`rollouts_to`), so
   the TokenBatch, the policy forwards, the objectives and the telemetry all run on that device.
3. Metrics become Python floats (`.item()`) at the end of the step.

Helpers in quadrants/ops and quadrants/objectives create tensors on their inputs' device
(`device=x.device`, `new_zeros`), which tests/unit/train/test_device_placement.py checks by running
them on the `meta` device. On these CPU-only machines CUDA itself has never been run.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from quadrants.rollout.engine import Rollouts

DEVICES = ("auto", "cpu", "cuda")


def validate_device(name: str) -> None:
    """A name check (compose time: a login node that submits GPU jobs has no GPU itself)."""
    if name not in DEVICES:
        raise ValueError(f"train.device={name!r} is unknown; choose one of {list(DEVICES)}")


def resolve_device(
    name: str, local_rank: int = 0, *, cuda_available: bool | None = None
) -> torch.device:
    """The torch.device for `train.device=name` on this process (rank `local_rank` on its node)."""
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
    return torch.device("cuda", local_rank)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (the CPU for a module without parameters)."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def rollouts_to(rollouts: Rollouts, device: torch.device) -> Rollouts:
    """The same rollouts with every tensor on `device` (no copy when already there)."""
    return replace(
        rollouts,
        prompt_ids=rollouts.prompt_ids.to(device),
        prompt_mask=rollouts.prompt_mask.to(device),
        response_ids=rollouts.response_ids.to(device),
        response_mask=rollouts.response_mask.to(device),
        behaviour_logp=rollouts.behaviour_logp.to(device),
        group_ids=rollouts.group_ids.to(device),
        finished=rollouts.finished.to(device),
        behaviour_entropy=None
        if rollouts.behaviour_entropy is None
        else rollouts.behaviour_entropy.to(device),
    )
