"""`build_step` reads each phase's settings from the config once, and the step's context holds no
RunConfig: every key a phase reads is set here to a value unlike its default and found in that
phase's settings object."""

from __future__ import annotations

import dataclasses

import torch

from quadrants.config import RunConfig
from quadrants.models.tiny import random_tiny_policy
from quadrants.run.settings import build_step
from quadrants.run_plan import RunPlan
from quadrants.train.context import StepContext
from quadrants.train.placement import SingleProcess


def test_the_context_has_no_config_field():
    names = {f.name for f in dataclasses.fields(StepContext)}
    assert "cfg" not in names and "dist" not in names
    assert not any("RunConfig" in str(f.type) for f in dataclasses.fields(StepContext))


def test_each_phase_reads_its_own_keys():
    cfg = RunConfig(seed=7)
    cfg.train.prompts_per_step, cfg.rollout.group_size = 6, 3
    cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.max_new_tokens = 0.7, 0.9, 33
    cfg.distributed.prompts_per_generate = 2
    cfg.rollout.refill_rounds, cfg.rollout.overlong_buffer = 2, 5
    cfg.rollout.overlong_penalty = 0.5
    cfg.rollout.mismatch_correction, cfg.rollout.mismatch_cap = "token", 3.0
    cfg.advantage.normalize_std, cfg.advantage.eps = False, 1e-3
    cfg.train.epochs, cfg.train.mini_batch_size, cfg.train.micro_batch_size = 2, 9, 3
    cfg.train.max_grad_norm, cfg.train.measure_dlogp, cfg.train.dlogp_rows = 0.5, False, 4
    cfg.train.entropy_chunk_size, cfg.train.length_buckets, cfg.train.forward_tokens = 11, 2, 64
    cfg.objective.name, cfg.objective.kl_coef = "grpo", 0.25
    model = random_tiny_policy(seed=0)[0]
    ctx = build_step(RunPlan.unchecked(cfg), model)
    assert ctx.model is model and ctx.engine is None and ctx.optimizer is None
    c = ctx.collect
    assert (c.seed, c.prompts_per_step, c.group_size, c.prompts_per_generate) == (7, 6, 3, 2)
    assert (c.temperature, c.top_p, c.max_new_tokens) == (0.7, 0.9, 33)
    assert (c.refill_rounds, c.overlong_buffer, c.overlong_penalty) == (2, 5, 0.5)
    s = ctx.score
    # the mismatch correction is on: the engine's numbers never stand in for the behaviour pass
    assert not s.engine_numbers_stand_in and not s.reference_from_adapters  # no LoRA
    assert (s.normalize_std, s.advantage_eps, s.constant_by_correctness) == (False, 1e-3, True)
    assert (s.mismatch_correction, s.mismatch_cap) == ("token", 3.0)
    u = ctx.update
    assert (u.seed, u.epochs, u.mini_batch_size, u.micro_batch_size) == (7, 2, 9, 3)
    assert (u.max_grad_norm, u.measure_dlogp, u.dlogp_rows, u.forward_tokens) == (0.5, False, 4, 64)
    p = ctx.forwards.passes
    assert (p.temperature, p.chunk_size, p.batch_size, p.length_buckets) == (0.7, 11, 9, 2)
    assert p.forward_tokens == 64
    assert isinstance(ctx.forwards.placement, SingleProcess)
    assert ctx.forwards.device == torch.device("cpu") and not ctx.forwards.precision.mixed
    assert ctx.objective.loss.kl_coef == 0.25 and ctx.objective.spec.name == "grpo"


def test_the_engine_numbers_stand_in_only_where_exact():
    """Defaults (HF engine, no mismatch correction, fp32, GRPO): they stand in; KL-Cov (its
    gradient is not continuous at logπ = logπ_old) or train.behaviour_pass=always: they do not."""
    model = random_tiny_policy(seed=0)[0]
    cfg = RunConfig()
    cfg.objective.name = "grpo"
    assert build_step(RunPlan.unchecked(cfg), model).score.engine_numbers_stand_in
    cfg.train.behaviour_pass = "always"
    assert not build_step(RunPlan.unchecked(cfg), model).score.engine_numbers_stand_in
    cfg.train.behaviour_pass = "auto"
    cfg.objective.name = "kl_cov"
    assert not build_step(RunPlan.unchecked(cfg), model).score.engine_numbers_stand_in


def test_the_engines_numbers_are_the_trainers_only_for_the_hf_engine_in_storage_precision():
    """The flip telemetry's baseline (train/telemetry.py `trainer_logp_before`) reuses the engine's
    numbers only where they are the trainer's own: the HF engine (the trainer's module) with the
    trainer computing in its parameters' dtype; vLLM or bf16-mixed: a pass of its own."""
    model = random_tiny_policy(seed=0)[0]
    cfg = RunConfig()
    assert build_step(RunPlan.unchecked(cfg), model).score.engine_is_trainer  # hf, fp32
    cfg.train.behaviour_pass = "always"  # the old log-probs are the pass's, and it stays true
    assert build_step(RunPlan.unchecked(cfg), model).score.engine_is_trainer
    cfg.train.precision = "bf16-mixed"
    assert not build_step(RunPlan.unchecked(cfg), model).score.engine_is_trainer
    cfg.train.precision = "fp32"
    cfg.rollout.engine = "vllm"
    assert not build_step(RunPlan.unchecked(cfg), model).score.engine_is_trainer
