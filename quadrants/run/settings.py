"""The step's settings read from the `RunConfig`: `build_step` is the one constructor of the step's
`StepContext` (train/context.py). It resolves the objective and reads each phase's frozen settings
from the config once, by the `*_settings` functions below, so that the step never sees the config
and a default lives in quadrants/config.py only. The run's `build_context` (run/build.py) calls it
with everything it loaded, tests and benchmarks with a model and what they need (the rest defaults
to None).

Apart from run/build.py so that building a one-process step opens no distributed code
(tests/unit/train/test_placement.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from quadrants.config import RolloutConfig, RunConfig, TrainConfig
from quadrants.objectives.control import with_initial_state
from quadrants.objectives.loss import loss_settings
from quadrants.objectives.registry import ObjectiveSpec, resolve_objective
from quadrants.ops.precision import resolve_precision
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import RolloutEngine
from quadrants.rollout.registry import get_engine
from quadrants.tasks.base import Task
from quadrants.train.context import (
    CollectSettings,
    Forwards,
    Objective,
    PassSettings,
    ScoreSettings,
    SignalSettings,
    StepContext,
    UpdateSettings,
)
from quadrants.train.placement import Placement, SingleProcess
from quadrants.validation import NEEDS_LORA


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
        pass_settings(cfg.rollout, cfg.train),
        placement if placement is not None else SingleProcess(),
        resolve_precision(cfg.train.precision, device),
        device,
    )
    return StepContext(
        model=model,
        objective=objective,
        forwards=forwards,
        collect=collect_settings(cfg),
        score=score_settings(cfg, spec),
        update=update_settings(cfg),
        tokenizer=tokenizer,
        ref_model=ref_model,
        engine=engine,
        grader=grader,
        task=task,
        optimizer=optimizer,
        scheduler=scheduler,
    )


def pass_settings(rollout: RolloutConfig, train: TrainConfig) -> PassSettings:
    """The step's `PassSettings` read from the config's rollout and train sections."""
    return PassSettings(
        temperature=rollout.temperature,
        chunk_size=train.entropy_chunk_size,
        batch_size=train.mini_batch_size,
        length_buckets=train.length_buckets,
        forward_tokens=train.forward_tokens,
        layout=train.attention_layout,
    )


def collect_settings(cfg: RunConfig) -> CollectSettings:
    """The collect phase's `CollectSettings` read from `cfg`."""
    rollout = cfg.rollout
    return CollectSettings(
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
        reward=cfg.reward.name,
        reward_probability=cfg.reward.probability,
    )


def signal_settings(cfg: RunConfig) -> SignalSettings:
    """Which extra per-token signals `cfg` asks for (`SignalSettings`)."""
    lora = cfg.model.lora
    wants_residual = cfg.objective.name in NEEDS_LORA or (lora.enabled and lora.residual_telemetry)
    layers: Any = cfg.quadrant.attention_layers
    if layers is not None and not isinstance(layers, str):
        layers = tuple(layers)
    return SignalSettings(
        attention_layers=layers if cfg.quadrant.axis == "attention_entropy" else None,
        residual_layer=lora.residual_layer if wants_residual else None,
        objective=cfg.objective.name,
    )


def score_settings(cfg: RunConfig, spec: ObjectiveSpec) -> ScoreSettings:
    """The score phase's `ScoreSettings` read from `cfg` (`spec`: the objective's)."""
    return ScoreSettings(
        signals=signal_settings(cfg),
        engine_numbers_stand_in=engine_numbers_may_stand_in(cfg, spec),
        reference_from_adapters=cfg.objective.kl_coef > 0 and cfg.model.lora.enabled,
        normalize_std=cfg.advantage.normalize_std,
        advantage_eps=cfg.advantage.eps,
        constant_by_correctness=bool(cfg.rollout.overlong_buffer),
        mismatch_correction=cfg.rollout.mismatch_correction,
        mismatch_cap=cfg.rollout.mismatch_cap,
        engine_is_trainer=engine_is_trainer(cfg),
    )


def engine_is_trainer(cfg: RunConfig) -> bool:
    """True when the rollout engine's recorded log-probs are the trainer's own: it samples from the
    trainer's module (the HF engine) and the trainer computes in its parameters' dtype (not
    bf16-mixed, whose autocast the engine's decode does not share)."""
    return get_engine(cfg.rollout.engine).samples_from_trainer_weights and (
        train_computes_in_storage_dtype(cfg)
    )


def update_settings(cfg: RunConfig) -> UpdateSettings:
    """The update phase's `UpdateSettings` read from `cfg`."""
    train = cfg.train
    return UpdateSettings(
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
        gradient_cosine_every=cfg.quadrant.gradient_cosine_every,
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
        and engine_is_trainer(cfg)
        and cfg.rollout.mismatch_correction == "none"
    )


def train_computes_in_storage_dtype(cfg: RunConfig) -> bool:
    """False when `train.precision` resolves to bf16-mixed on this run's training device (`auto`:
    on CUDA, which `train.device` auto or cuda trains on wherever CUDA is available)."""
    name = cfg.train.precision
    if name == "auto":
        return cfg.train.device == "cpu" or not torch.cuda.is_available()
    return not resolve_precision(name, torch.device("cpu")).mixed
