"""What a training step works with: `StepContext` (built once by the loop) and `Collected` (a graded
rollout batch). Their own module so that the step and its helpers (accumulate, refill,
distributed_step) import them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from quadrants.config import RolloutConfig, RunConfig, TrainConfig
from quadrants.distributed.collectives import DistEnv
from quadrants.objectives.loss import LossSettings
from quadrants.objectives.registry import ObjectiveSpec
from quadrants.ops.precision import FP32, Precision
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, Rollouts
from quadrants.tasks.base import Task


@dataclass(frozen=True)
class PassSettings:
    """What every forward of the step over a policy needs, read from the config once.

    Attributes:
        temperature: log-probs and entropy are those of softmax(logits / temperature), the sampling
            temperature (rollout.temperature).
        chunk_size: vocabulary chunk of the log-softmax and entropy (train.entropy_chunk_size).
        batch_size: sequences per call of a no-grad pass (train.mini_batch_size), when
            `forward_tokens` is 0.
        length_buckets: at most this many response-length buckets per forward
            (train.length_buckets; models/policy.py).
        forward_tokens: a no-grad pass's rows packed into calls of at most this many padded
            tokens per rank (train.forward_tokens; train/micro_batches.py); 0 = `batch_size` rows.
    """

    temperature: float
    chunk_size: int
    batch_size: int
    length_buckets: int = 1
    forward_tokens: int = 0

    @classmethod
    def from_config(cls, rollout: RolloutConfig, train: TrainConfig) -> PassSettings:
        return cls(
            temperature=rollout.temperature,
            chunk_size=train.entropy_chunk_size,
            batch_size=train.mini_batch_size,
            length_buckets=train.length_buckets,
            forward_tokens=train.forward_tokens,
        )


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
    passes: PassSettings  # temperature, chunk and rows of every policy forward
    dist: DistEnv = field(default_factory=DistEnv)  # rank layout (world 1 = one plain process)
    device: torch.device = field(
        default_factory=lambda: torch.device("cpu")
    )  # train.device, resolved
    # train.precision resolved on `device`: the forwards run in its autocast (train/precision.py)
    precision: Precision = field(default_factory=lambda: FP32)

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
