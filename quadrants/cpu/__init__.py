"""What quadrants does to run fast on a CPU, in one place, applied only when a run's device is the
CPU (`train.cpu.*`; docs/performance.md has the measurements behind each).

- `matmul.py`: float32 linear maps through oneDNN where torch's MKL default is slow
  (`train.cpu.matmul`: auto = oneDNN on x86 processors that are not Intel's);
- `linears.py`: a policy's plain `nn.Linear` layers compute through `matmul.linear`, so that its
  forwards follow that choice;
- `allocator.py`: glibc keeps the memory the trainer frees instead of handing it back every step
  (`train.cpu.retain_freed_mb`);
- `sdpa.py`: transformers hands grouped key/value heads to torch's SDPA kernel as they are
  (`train.cpu.sdpa_grouped_heads`);
- `openmp.py`: how long idle OpenMP threads spin (`train.cpu.omp_spincount`); libgomp reads it when
  a process starts, so the command line starts a CPU run's process with it
  (quadrants/launch/sweep.py) and `tune_for` only reports it.

`tune_for(device, settings, models)` is the one entry: the trainer, `python -m quadrants.evaluate`
and `python -m quadrants.probe` call it once with their resolved device and loaded models. On any
device but the CPU it returns None and touches nothing; `import quadrants` itself sets nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from quadrants.cpu import allocator, linears, matmul, openmp, sdpa

log = logging.getLogger(__name__)


class CpuSettings(Protocol):
    """What `tune_for` reads: the `train.cpu` section (quadrants.config.CpuConfig)."""

    matmul: str
    retain_freed_mb: int
    sdpa_grouped_heads: bool
    omp_spincount: int | None


@dataclass(frozen=True)
class CpuTuning:
    """What `tune_for` did: the matmul backend in use, how many linear layers it routed, whether
    glibc took the allocator setting and transformers' grouped-heads switch was set here, and
    the OpenMP waiting this process started with."""

    matmul: str
    routed_linears: int
    retains_freed: bool
    grouped_heads: bool
    openmp: str


def tune_for(
    device: torch.device, settings: CpuSettings, models: Iterable[nn.Module | None] = ()
) -> CpuTuning | None:
    """Apply `settings` (`train.cpu`) to this process and `models` when `device` is the CPU; on
    any other device do nothing and return None. The settings hold for the rest of the process."""
    if device.type != "cpu":
        return None
    backend = matmul.set_cpu_matmul(settings.matmul)
    routed = sum(linears.route_linears(model) for model in models if model is not None)
    tuning = CpuTuning(
        matmul=backend,
        routed_linears=routed,
        retains_freed=allocator.retain_freed_memory(settings.retain_freed_mb),
        grouped_heads=settings.sdpa_grouped_heads and sdpa.hand_grouped_heads_to_sdpa(),
        openmp=openmp.spin_in_effect(os.environ),
    )
    log.info(
        "CPU tuning: matmul %s, %d linear layers routed, freed memory kept: %s, grouped heads "
        "to SDPA: %s, OpenMP waiting: %s",
        *(tuning.matmul, tuning.routed_linears, tuning.retains_freed, tuning.grouped_heads),
        tuning.openmp,
    )
    return tuning
