"""What a training step works with: `StepContext` (built once by the loop) and `Collected` (a graded
rollout batch). Their own module so that the step and its helpers (accumulate, refill,
distributed_step) import them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from quadrants.config import RunConfig
from quadrants.distributed.collectives import DistEnv
from quadrants.objectives.loss import LossSettings
from quadrants.objectives.registry import ObjectiveSpec
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, Rollouts
from quadrants.tasks.base import Task


@dataclass
class StepContext:
    cfg: RunConfig
    model: nn.Module
    tokenizer: Any
    ref_model: nn.Module | None
    engine: RolloutEngine
    grader: Grader
    task: Task
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    spec: ObjectiveSpec
    params: dict[str, Any]
    loss_settings: LossSettings  # its `quadrant`: the run's one QuadrantSettings
    dist: DistEnv = field(default_factory=DistEnv)  # rank layout (world 1 = one plain process)
    device: torch.device = field(
        default_factory=lambda: torch.device("cpu")
    )  # train.device, resolved

    @property
    def quadrant(self) -> QuadrantSettings:
        """The run's quadrant settings, built once (with the loss settings): the token-batch
        builder reads the threshold from it, the loss the keep set and the denominator."""
        return self.loss_settings.quadrant


@dataclass(frozen=True)
class Collected:
    """A graded rollout batch: rewards [B] float, one Outcome per sequence, the phase timings, and
    metrics of the collection itself (refill rounds, overlong penalty; {} when both are off)."""

    rollouts: Rollouts
    rewards: Tensor
    outcomes: list[Outcome]
    generate_s: float
    grade_s: float
    metrics: dict[str, float] = field(default_factory=dict)
