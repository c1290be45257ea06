"""`train.offload_optimizer`: AdamW's states on the host while the GPU generates, on the device
for the optimizer step.

The states (two float32 moments, 8 bytes a parameter: 7.6 GB a rank for a 7B policy sharded over
8 ranks) are needed only inside `optimizer.step`. Offloaded, they leave the GPU to the rollout
engine (the vLLM KV cache), the behaviour pass and the update's forward and backward:

- `offload()` copies every state tensor that lives on the training device to host memory and
  frees the device copy (the loop calls it after each training step, before evaluation and the
  next step's rollouts, and after resuming);
- `load()` copies them back; it runs as the optimizer's step pre-hook
  (`Optimizer.register_step_pre_hook`), so the states return just before the first
  `optimizer.step` of a step and stay for the step's other mini-batches;
- `loaded()` holds them on the device for a checkpoint save.

verl's FSDP workers do the same: `offload_fsdp_optimizer` / `load_fsdp_optimizer`
(verl/utils/fsdp_utils.py) replace each tensor of `optimizer.state[param]` by its copy on the
CPU and back on the device, and verl/workers/fsdp_workers.py offloads after building the actor
and loads before each update when `_is_offload_optimizer`. Here the copies are blocking
(`non_blocking=True` into pageable host memory may let a host read overtake the copy), and only
tensors on the training device move: AdamW's `step` counter stays where AdamW keeps it (the CPU
unless fused or capturable). The copies are exact, so training is bit-identical with and without
offloading (tests/unit/run/test_offload.py).

On a CPU run there is nothing to free (the states already live in host memory): the setting is
refused at compose time with train.device=cpu (quadrants/run_plan/composition.py) and does
nothing when train.device=auto resolves to the CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

HOST = torch.device("cpu")


class OptimizerOffload:
    """Moves `optimizer`'s states between `device` and the host (module docstring)."""

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.optimizer = optimizer
        self.device = torch.device(device)
        # (state dict, key) of each tensor moved to the host by the last offload()
        self._moved: list[tuple[dict[str, Any], str]] = []
        self._hook = optimizer.register_step_pre_hook(lambda *_: self.load())

    @property
    def on_host(self) -> bool:
        return bool(self._moved)

    @torch.no_grad()
    def offload(self) -> int:
        """Copy the states on `device` to the host; returns the bytes moved."""
        moved = 0
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if (
                    torch.is_tensor(value)
                    and value.device == self.device
                    and not self._has(state, key)
                ):
                    state[key] = value.to(HOST, copy=True)
                    self._moved.append((state, key))
                    moved += value.numel() * value.element_size()
        return moved

    @torch.no_grad()
    def load(self) -> None:
        """Copy the offloaded states back to `device` (nothing when none are offloaded)."""
        for state, key in self._moved:
            state[key] = state[key].to(self.device, copy=True)
        self._moved = []

    @contextmanager
    def loaded(self) -> Iterator[None]:
        """The states on the device inside the block, offloaded again after it if they were."""
        was = self.on_host
        self.load()
        try:
            yield
        finally:
            if was:
                self.offload()

    def close(self) -> None:
        self.load()
        self._hook.remove()

    def _has(self, state: dict[str, Any], key: str) -> bool:
        return any(s is state and k == key for s, k in self._moved)
