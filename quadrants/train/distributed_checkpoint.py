"""Model and optimizer state through torch.distributed.checkpoint (DCP): every rank writes its own
shards plus one metadata file, and a load reshards to whatever layout the loading run has, so a
checkpoint written by 2 ranks resumes in 1 process and the other way round.

The state is keyed by parameter names (FSDP2 keeps the module's names; `get_state_dict` flattens the
optimizer state to the same names), which is what makes it independent of the number of ranks.
Without a process group DCP runs in single-process mode, so laptops use the same format.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

SHARDS_DIR = "model_optim"


_SINGLE_PROCESS_WARNING = ".*torch.distributed is (disabled|not initialized|unavailable).*"


def save_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write the model and optimizer states (this rank's shards) under
    `directory` (a collective)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    with (
        warnings.catch_warnings()
    ):  # DCP warns that it assumes one process without a group: it is meant
        warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory))


def load_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load states written by `save_sharded` with any number of ranks into this run's layout."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
        dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
