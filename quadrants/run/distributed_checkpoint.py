"""Model and optimizer state through torch.distributed.checkpoint (DCP): every rank writes its own
shards plus one metadata file, and a load reshards to whatever layout the loading run has, so a
checkpoint written by 2 ranks resumes in 1 process and the other way round.

The state is keyed by parameter names (FSDP2 keeps the module's names; `get_state_dict` flattens the
optimizer state to the same names), which is what makes it independent of the number of ranks.
Without a process group DCP runs in single-process mode, so laptops use the same format.

A model with frozen parameters (LoRA: models/lora.py) saves only what trains, the adapters and
their optimizer state: `StateDictOptions(ignore_frozen_params=True)` drops every parameter whose
`requires_grad` is False from the model's state dict (torch/distributed/checkpoint/state_dict.py
`_get_model_state_dict`), and the optimizer holds states for the adapters only. The frozen base is
not the run's to store: it is read from `model.name_or_path` again, as at the start. Loading uses
the same option with `strict=False` (the base's keys are then expected to be absent: torch's
`load_state_dict(strict=False)`); a trainable key the checkpoint lacks still fails, in `dcp.load`
(torch/distributed/checkpoint/default_planner.py: "Missing key in checkpoint state_dict", the
default `allow_partial_load=False`). A checkpoint written with the full model (before this) holds
the adapters too and loads the same way.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from quadrants.models.lora import has_frozen, without_frozen

SHARDS_DIR = "model_optim"


_SINGLE_PROCESS_WARNING = ".*torch.distributed is (disabled|not initialized|unavailable).*"


def _options(model: nn.Module) -> StateDictOptions | None:
    """Only the trainable parameters when some are frozen (module docstring); None otherwise."""
    if not has_frozen(model):
        return None
    return StateDictOptions(ignore_frozen_params=True, strict=False)


def _trainable_only(model: nn.Module, model_state: dict, optim_state: dict) -> tuple[dict, dict]:
    """The model part less a tied name of a frozen weight (models/lora.py `without_frozen`)."""
    return without_frozen(model, model_state), optim_state


def save_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write the model and optimizer states (this rank's shards) under
    `directory` (a collective); a model with frozen parameters: its trainable ones only."""
    model_state, optim_state = _trainable_only(
        model, *get_state_dict(model, optimizer, options=_options(model))
    )
    with (
        warnings.catch_warnings()
    ):  # DCP warns that it assumes one process without a group: it is meant
        warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory))


def load_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load states written by `save_sharded` with any number of ranks into this run's layout."""
    options = _options(model)
    model_state, optim_state = _trainable_only(
        model, *get_state_dict(model, optimizer, options=options)
    )
    state = {"model": model_state, "optim": optim_state}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
        dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=options,
    )
