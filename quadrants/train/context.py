"""What a training step works with, built once from the config: the settings of each phase (small
frozen dataclasses, each holding only what its phase reads), the objective, how forwards run, and
`StepContext`, which holds the parts (model, engine, optimizer, ...) and those settings but never
the `RunConfig`. `build_step` is the one constructor: the loop calls it with everything it loaded,
tests and benchmarks with a model and what they need (the rest defaults to None). The phase settings
state no defaults of their own: each is read from a `RunConfig` by its `from_config`, so a default
lives in quadrants/config.py only.

Also `Collected` (a graded rollout batch). Its own module so that the step and its helpers
(refill) import these without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from quadrants.config import RolloutConfig, RunConfig, TrainConfig
from quadrants.objectives.control import with_initial_state
from quadrants.objectives.loss import LossSettings
from quadrants.objectives.registry import ObjectiveSpec, resolve_objective
from quadrants.ops.precision import FP32, Precision, resolve_precision
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, Rollouts
from quadrants.rollout.registry import get_engine
from quadrants.tasks.base import Task
from quadrants.train.placement import Placement, SingleProcess
from quadrants.validation import NEEDS_LORA, loss_settings


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

    @classmethod
    def from_config(cls, cfg: RunConfig) -> CollectSettings:
        rollout = cfg.rollout
        return cls(
            seed=cfg.seed,
            prompts_per_step=cfg.train.prompts_per_step,
            group_size=rollout.group_size,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            max_new_tokens=rollout.max_new_tokens,
            prompts_per_generate=cfg.distributed.prompts_per_generate,
            refill_rounds=rollout.refill_rounds,
            overlong_buffer=rollout.overlong_buffer,
            overlong_penalty=rollout.overlong_penalty,
        )


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

    @classmethod
    def from_config(cls, cfg: RunConfig) -> SignalSettings:
        lora = cfg.model.lora
        wants_residual = cfg.objective.name in NEEDS_LORA or (
            lora.enabled and lora.residual_telemetry
        )
        layers: Any = cfg.quadrant.attention_layers
        if layers is not None and not isinstance(layers, str):
            layers = tuple(layers)
        return cls(
            attention_layers=layers if cfg.quadrant.axis == "attention_entropy" else None,
            residual_layer=lora.residual_layer if wants_residual else None,
            objective=cfg.objective.name,
        )


@dataclass(frozen=True)
class ScoreSettings:
    """Phase 2, score: old log-probs, the reference's, advantages, the token batch.

    Attributes:
        engine_numbers_stand_in: the engine's recorded log-probs and entropy replace the behaviour
            pass when it recorded them (`engine_numbers_may_stand_in`, train.behaviour_pass=auto).
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

    @classmethod
    def from_config(cls, cfg: RunConfig, spec: ObjectiveSpec) -> ScoreSettings:
        return cls(
            signals=SignalSettings.from_config(cfg),
            engine_numbers_stand_in=engine_numbers_may_stand_in(cfg, spec),
            reference_from_adapters=cfg.objective.kl_coef > 0 and cfg.model.lora.enabled,
            normalize_std=cfg.advantage.normalize_std,
            advantage_eps=cfg.advantage.eps,
            constant_by_correctness=bool(cfg.rollout.overlong_buffer),
            mismatch_correction=cfg.rollout.mismatch_correction,
            mismatch_cap=cfg.rollout.mismatch_cap,
        )


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
    minibatch_grouping: str = "shuffle"  # shuffle | query (train/step.py update_policy)

    @classmethod
    def from_config(cls, cfg: RunConfig) -> UpdateSettings:
        train = cfg.train
        return cls(
            seed=cfg.seed,
            epochs=train.epochs,
            mini_batch_size=train.mini_batch_size,
            micro_batch_size=train.micro_batch_size,
            micro_batch_tokens=train.micro_batch_tokens,
            forward_tokens=train.forward_tokens,
            max_grad_norm=train.max_grad_norm,
            measure_dlogp=train.measure_dlogp,
            dlogp_rows=train.dlogp_rows,
            minibatch_grouping=train.minibatch_grouping,
        )


@dataclass
class StepContext:
    """Everything a step works with: the loaded parts and each phase's settings (no RunConfig).
    Build it with `build_step`."""

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


def build_step(
    cfg: RunConfig,
    model: nn.Module,
    *,
    tokenizer: Any = None,
    ref_model: nn.Module | None = None,
    engine: RolloutEngine | None = None,
    grader: Grader | None = None,
    task: Task | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    placement: Placement | None = None,
    device: torch.device | None = None,
) -> StepContext:
    """The StepContext of `cfg` over `model`: the objective resolved (with an adaptive objective's
    initial state), each phase's settings read from `cfg` once, forwards in `train.precision`
    resolved on `device` (default: the CPU) over `placement` (default: one process).

    A part left out is None: a test of the update alone needs only the model (and an optimizer and
    scheduler for `update_policy`); a whole `train_step` needs every part, as the loop's
    `build_context` passes them.

    >>> from quadrants.models.tiny import random_tiny_policy  # doctest: +SKIP
    >>> ctx = build_step(RunConfig(), random_tiny_policy(seed=0)[0])  # doctest: +SKIP
    """
    device = torch.device("cpu") if device is None else device
    spec, params = resolve_objective(cfg.objective.name, dict(cfg.objective.params))
    objective = Objective(
        spec,
        with_initial_state(spec, params),  # an adaptive objective's state (objectives/control)
        loss_settings(
            cfg.objective,
            QuadrantSettings.from_config(cfg.quadrant),
            max_new_tokens=cfg.rollout.max_new_tokens,
        ),
    )
    forwards = Forwards(
        PassSettings.from_config(cfg.rollout, cfg.train),
        placement if placement is not None else SingleProcess(),
        resolve_precision(cfg.train.precision, device),
        device,
    )
    return StepContext(
        model=model,
        objective=objective,
        forwards=forwards,
        collect=CollectSettings.from_config(cfg),
        score=ScoreSettings.from_config(cfg, spec),
        update=UpdateSettings.from_config(cfg),
        tokenizer=tokenizer,
        ref_model=ref_model,
        engine=engine,
        grader=grader,
        task=task,
        optimizer=optimizer,
        scheduler=scheduler,
    )


# --- when the engine's numbers stand in for the behaviour pass (train.behaviour_pass) ---------
# The behaviour pass recomputes, with the trainer's module, the log-prob of every sampled token and
# the entropy of every step's distribution at the sampling temperature. The HF engine records both
# while it samples (quadrants/rollout/decode.py), from the same numbers: same module (one process)
# or a per-rank replica synced with the trainer before every step, same temperature, before top-p
# truncation, in eval mode. What separates the two is float32 summation order (the engine decodes
# token by token through a KV cache, the pass runs the whole sequence): observed differences ~1e-6.
# `auto` therefore skips the pass exactly when all of these hold, and recomputes otherwise:
# - the HF engine sampled the batch and recorded the entropy (vLLM samples from its own kernels,
#   and is the case the mismatch metrics are for; checked per batch by the step);
# - no mismatch correction (`rollout.mismatch_correction=none`: with engine numbers as π_old the
#   importance weights would be 1 by construction);
# - the objective's gradient is continuous at logπ = logπ_old (not KL-Cov:
#   `ObjectiveSpec.recomputed_old_logp`, its |logπ − logπ_old| turns rounding into a gradient sign);
# - the trainer computes in the dtype its parameters are stored in (`train.precision` fp32, or pure
#   bf16; not bf16-mixed, `train_computes_in_storage_dtype`: its bf16 autocast or FSDP2 bf16 compute
#   differs from the engine's decode over the stored weights by far more than float32 rounding).
# The frozen reference policy's pass (a KL term) is never skipped: the engine does not sample
# from it.


def engine_numbers_may_stand_in(cfg: RunConfig, spec: ObjectiveSpec) -> bool:
    """True when `train.behaviour_pass=auto` and an engine that records entropy would give the
    numbers the trainer's pass would (the settings' half; the step checks the batch's half)."""
    return (
        cfg.train.behaviour_pass == "auto"
        and not spec.recomputed_old_logp
        and get_engine(cfg.rollout.engine).samples_from_trainer_weights
        and cfg.rollout.mismatch_correction == "none"
        and train_computes_in_storage_dtype(cfg)
    )


def train_computes_in_storage_dtype(cfg: RunConfig) -> bool:
    """False when `train.precision` resolves to bf16-mixed on this run's training device (`auto`:
    on CUDA, which `train.device` auto or cuda trains on wherever CUDA is available)."""
    name = cfg.train.precision
    if name == "auto":
        return cfg.train.device == "cpu" or not torch.cuda.is_available()
    return not resolve_precision(name, torch.device("cpu")).mixed


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
