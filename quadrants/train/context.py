"""What a training step works with: the settings of each phase (small frozen dataclasses, each
holding only what its phase reads), the objective, how forwards run, and `StepContext`, which holds
the parts (model, engine, optimizer, ...) and those settings but never the run's config. The run
builds it once (quadrants/run/settings.py `build_step`, which reads each phase's settings from the
config, so that a default lives in quadrants/config.py only); tests and benchmarks build it there
too, with a model and what they need.

Also `Collected` (a graded rollout batch). Its own module so that the step and its helpers
(refill) import these without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from quadrants.objectives.loss import LossSettings
from quadrants.objectives.registry import ObjectiveSpec
from quadrants.ops.precision import FP32, Precision
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, Rollouts
from quadrants.tasks.base import Task
from quadrants.train.placement import Placement, SingleProcess


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
        forward_tokens: a no-grad pass's rows packed into calls of at most this many tokens per
            rank (train.forward_tokens; train/micro_batches.py: padded tokens under the padded
            layout, real tokens under the packed one); 0 = `batch_size` rows.
        layout: `padded` or `packed` (train.attention_layout): how every policy forward lays out
            its rows (models/policy.py `response_logprobs`).
    """

    temperature: float
    chunk_size: int
    batch_size: int
    length_buckets: int
    forward_tokens: int
    layout: str

    @property
    def packed(self) -> bool:
        return self.layout == "packed"


@dataclass(frozen=True)
class Forwards:
    """How every forward of the step runs: its pass settings, over this rank's share of the rows
    (`placement`), in `precision`'s autocast on `device`."""

    passes: PassSettings
    placement: Placement = field(default_factory=SingleProcess)
    precision: Precision = FP32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


@dataclass(frozen=True)
class Objective:
    """The objective the update minimises: its spec, its resolved parameters (an adaptive
    objective's state under objectives/control.py's STATE_KEY, advanced by the loop), and the loss
    settings (aggregation, KL, and the run's one QuadrantSettings)."""

    spec: ObjectiveSpec
    params: dict[str, Any]
    loss: LossSettings

    @property
    def quadrant(self) -> QuadrantSettings:
        return self.loss.quadrant


@dataclass(frozen=True)
class CollectSettings:
    """Phase 1, collect: which prompts, how many samples, and the reward shaping of a round.

    `prompts_per_generate`: prompts per generate call (distributed.prompts_per_generate; None =
    prompts_per_step / world size). `refill_rounds`, `overlong_buffer` (0 = off): rollout.*."""

    seed: int
    prompts_per_step: int
    group_size: int
    temperature: float
    top_p: float
    max_new_tokens: int
    prompts_per_generate: int | None
    refill_rounds: int
    overlong_buffer: int
    overlong_penalty: float
    # the training reward (reward.name, reward.probability; rewards/confound.py)
    reward: str
    reward_probability: float | None


@dataclass(frozen=True)
class SignalSettings:
    """Which extra per-token signals the step computes.

    Attributes:
        attention_layers: quadrant.attention_layers when quadrant.axis=attention_entropy, else None
            (no attention-entropy pass).
        residual_layer: model.lora.residual_layer when the adapter residual is wanted (ARCA always;
            any objective under LoRA with model.lora.residual_telemetry), else None.
        objective: the objective's name, for the error when the residual is wanted without adapters.
    """

    attention_layers: str | Sequence[int] | None
    residual_layer: int | None
    objective: str


@dataclass(frozen=True)
class ScoreSettings:
    """Phase 2, score: old log-probs, the reference's, advantages, the token batch.

    Attributes:
        engine_numbers_stand_in: the engine's recorded log-probs and entropy replace the behaviour
            pass when it recorded them (train.behaviour_pass=auto; run/settings.py
            `engine_numbers_may_stand_in`).
        engine_is_trainer: the engine's numbers are the trainer's own (it samples from the
            trainer's module in the trainer's precision: the HF engine), so the flip telemetry may
            take them as its before-update baseline; else it runs its own pass (train/telemetry.py
            `trainer_logp_before`).
        reference_from_adapters: the KL reference is the policy with its LoRA adapters switched off
            (objective.kl_coef > 0 under model.lora).
        normalize_std, advantage_eps: advantage.*.
        constant_by_correctness: dynamic sampling judges a group constant by correctness, not by the
            shaped rewards (with the overlong penalty on, as DAPO does).
        mismatch_correction, mismatch_cap: rollout.* (truncated IS weights; "none" = off).
        signals: the per-token signals besides the token entropy (train/signals.py): the attention
            entropy (quadrant.axis) and the LoRA adapter residual (ARCA, its telemetry).
    """

    engine_numbers_stand_in: bool
    reference_from_adapters: bool
    normalize_std: bool
    advantage_eps: float
    constant_by_correctness: bool
    mismatch_correction: str
    mismatch_cap: float
    signals: SignalSettings
    engine_is_trainer: bool = True


@dataclass(frozen=True)
class UpdateSettings:
    """Phase 3, update: `epochs` passes of shuffled mini-batches of `mini_batch_size` rows, each
    accumulated over micro-batches (`micro_batch_tokens` per rank, else `micro_batch_size` rows;
    0 = none), its gradient clipped to `max_grad_norm`. `forward_tokens`: the budget of the no-grad
    value passes of an accumulated mini-batch (0 = `micro_batch_tokens`). Then telemetry:
    `measure_dlogp` on `dlogp_rows` rows (None = auto, 0 = all), drawn with `seed`."""

    seed: int
    epochs: int
    mini_batch_size: int
    micro_batch_size: int
    micro_batch_tokens: int
    forward_tokens: int
    max_grad_norm: float
    measure_dlogp: bool
    dlogp_rows: int | None
    minibatch_grouping: str  # shuffle | query | balanced (train/update.py update_policy)
    # every N steps the arm's gradient against the full objective's (`quadrant.
    # gradient_cosine_every`, train/update.py `gradient_cosine`); None = off, nothing computed
    gradient_cosine_every: int | None = None


@dataclass
class StepContext:
    """Everything a step works with: the loaded parts and each phase's settings (no run config).
    Build it with `build_step` (quadrants/run/settings.py)."""

    model: nn.Module
    objective: Objective
    forwards: Forwards
    collect: CollectSettings
    score: ScoreSettings
    update: UpdateSettings
    tokenizer: Any = None
    ref_model: nn.Module | None = None
    engine: RolloutEngine | None = None
    grader: Grader | None = None
    task: Task | None = None
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None

    @property
    def device(self) -> torch.device:
        return self.forwards.device


@dataclass(frozen=True)
class Collected:
    """A graded rollout batch: rewards [B] float (the training reward, shaped), one Outcome per
    sequence (the verifier's), the phase timings, metrics of the collection itself (refill rounds,
    overlong penalty; {} when both are off), and `hits` [B] float: the 0/1 training reward before
    shaping under a confound reward (reward=random, format_only; rewards/confound.py), None under
    the verifier's, whose 0/1 reward is the outcomes' correctness (train/refill.py `hits`)."""

    rollouts: Rollouts
    rewards: Tensor
    outcomes: list[Outcome]
    generate_s: float
    grade_s: float
    metrics: dict[str, float] = field(default_factory=dict)
    hits: Tensor | None = None
