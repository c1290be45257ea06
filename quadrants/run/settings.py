"""The step's settings read from the run's plan: `build_step` is the one constructor of the step's
`StepContext` (train/context.py). It takes the objective, the loss's and the forwards' settings as
the plan parsed them (quadrants/run_plan) and reads each phase's frozen settings from the plan's
sections, by the `*_settings` functions below, so that the step never sees the config and a
default lives in quadrants/config.py only. The run's `build_context` (run/build.py) calls it
with everything it loaded, tests and benchmarks with a model and what they need (the rest defaults
to None).

Apart from run/build.py so that building a one-process step opens no distributed code
(tests/unit/train/test_placement.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from quadrants.objectives.control import with_initial_state
from quadrants.objectives.registry import ObjectiveSpec
from quadrants.ops.precision import resolve_precision
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import RolloutEngine
from quadrants.rollout.registry import get_engine
from quadrants.run_plan import RunPlan
from quadrants.tasks.base import Task
from quadrants.train.context import (
    CollectSettings,
    Forwards,
    Objective,
    ScoreSettings,
    SignalSettings,
    StepContext,
    UpdateSettings,
)
from quadrants.train.placement import Placement, SingleProcess


def build_step(
    plan: RunPlan,
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
    """The StepContext of `plan` over `model`: the plan's objective (with an adaptive objective's
    initial state), each phase's settings read from `plan` once, forwards in `train.precision`
    resolved on `device` (default: the CPU) over `placement` (default: one process).

    A part left out is None: a test of the update alone needs only the model (and an optimizer and
    scheduler for `update_policy`); a whole `train_step` needs every part, as the loop's
    `build_context` passes them.

    >>> from quadrants.models.tiny import random_tiny_policy  # doctest: +SKIP
    >>> plan = RunPlan.parse(RunConfig())  # doctest: +SKIP
    >>> ctx = build_step(plan, random_tiny_policy(seed=0)[0])  # doctest: +SKIP
    """
    device = torch.device("cpu") if device is None else device
    spec = plan.objective_spec
    objective = Objective(
        spec,
        # an adaptive objective's state (objectives/control), fresh for each step context
        with_initial_state(spec, plan.objective_params),
        plan.loss,
    )
    forwards = Forwards(
        plan.forward,
        placement if placement is not None else SingleProcess(),
        resolve_precision(plan.train.precision, device),
        device,
    )
    return StepContext(
        model=model,
        objective=objective,
        forwards=forwards,
        collect=collect_settings(plan),
        score=score_settings(plan, spec),
        update=update_settings(plan),
        tokenizer=tokenizer,
        ref_model=ref_model,
        engine=engine,
        grader=grader,
        task=task,
        optimizer=optimizer,
        scheduler=scheduler,
    )


def collect_settings(plan: RunPlan) -> CollectSettings:
    """The collect phase's `CollectSettings` read from `plan`."""
    rollout = plan.rollout
    return CollectSettings(
        seed=plan.seed,
        prompts_per_step=plan.train.prompts_per_step,
        group_size=rollout.group_size,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        max_new_tokens=rollout.max_new_tokens,
        prompts_per_generate=plan.distributed.prompts_per_generate,
        refill_rounds=rollout.refill_rounds,
        overlong_buffer=rollout.overlong_buffer,
        overlong_penalty=rollout.overlong_penalty,
        reward=plan.reward.name,
        reward_probability=plan.reward.probability,
    )


def signal_settings(plan: RunPlan) -> SignalSettings:
    """Which extra per-token signals `plan` asks for (`SignalSettings`)."""
    lora = plan.model.lora
    wants_residual = "adapter_residual" in plan.objective_spec.needs or (
        lora.enabled and lora.residual_telemetry
    )
    layers: Any = plan.quadrant.attention_layers
    if layers is not None and not isinstance(layers, str):
        layers = tuple(layers)
    return SignalSettings(
        attention_layers=layers if plan.quadrant.axis == "attention_entropy" else None,
        residual_layer=lora.residual_layer if wants_residual else None,
        objective=plan.objective.name,
    )


def score_settings(plan: RunPlan, spec: ObjectiveSpec) -> ScoreSettings:
    """The score phase's `ScoreSettings` read from `plan` (`spec`: the objective's)."""
    return ScoreSettings(
        signals=signal_settings(plan),
        engine_numbers_stand_in=engine_numbers_may_stand_in(plan, spec),
        reference_from_adapters=plan.objective.kl_coef > 0 and plan.model.lora.enabled,
        normalize_std=plan.advantage.normalize_std,
        advantage_eps=plan.advantage.eps,
        constant_by_correctness=bool(plan.rollout.overlong_buffer),
        mismatch_correction=plan.rollout.mismatch_correction,
        mismatch_cap=plan.rollout.mismatch_cap,
        engine_is_trainer=engine_is_trainer(plan),
    )


def engine_is_trainer(plan: RunPlan) -> bool:
    """True when the rollout engine's recorded log-probs are the trainer's own: it samples from the
    trainer's module (the HF engine) and the trainer computes in its parameters' dtype (not
    bf16-mixed, whose autocast the engine's decode does not share)."""
    return get_engine(plan.rollout.engine).samples_from_trainer_weights and (
        train_computes_in_storage_dtype(plan)
    )


def update_settings(plan: RunPlan) -> UpdateSettings:
    """The update phase's `UpdateSettings` read from `plan`."""
    train = plan.train
    return UpdateSettings(
        seed=plan.seed,
        epochs=train.epochs,
        mini_batch_size=train.mini_batch_size,
        micro_batch_size=train.micro_batch_size,
        micro_batch_tokens=train.micro_batch_tokens,
        forward_tokens=plan.forward.forward_tokens,  # the forwards' budget, as the plan parsed it
        max_grad_norm=train.max_grad_norm,
        measure_dlogp=train.measure_dlogp,
        dlogp_rows=train.dlogp_rows,
        minibatch_grouping=train.minibatch_grouping,
        gradient_cosine_every=plan.quadrant.gradient_cosine_every,
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


def engine_numbers_may_stand_in(plan: RunPlan, spec: ObjectiveSpec) -> bool:
    """True when `train.behaviour_pass=auto` and an engine that records entropy would give the
    numbers the trainer's pass would (the settings' half; the step checks the batch's half)."""
    return (
        plan.train.behaviour_pass == "auto"
        and not spec.recomputed_old_logp
        and engine_is_trainer(plan)
        and plan.rollout.mismatch_correction == "none"
    )


def train_computes_in_storage_dtype(plan: RunPlan) -> bool:
    """False when `train.precision` resolves to bf16-mixed on this run's training device (`auto`:
    on CUDA, which `train.device` auto or cuda trains on wherever CUDA is available)."""
    name = plan.train.precision
    if name == "auto":
        return plan.train.device == "cpu" or not torch.cuda.is_available()
    return not resolve_precision(name, torch.device("cpu")).mixed
