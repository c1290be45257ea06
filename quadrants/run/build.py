"""The composition root of a run: everything a step needs, loaded and placed from the `RunConfig`.

`build_context` loads the parts (model, reference, engine, task, optimizer) on the run's device,
places and shards them (`prepare_policy`, which also starts the rollout engine) and hands them to
`build_step` (run/settings.py). `make_run_task` is the run's task with its prompts rendered; `Run`
is what the loop works with: the step's context, the config and the rank layout.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from quadrants.cpu import tune_for
from quadrants.device import resolve_device
from quadrants.distributed.agreement import exchange
from quadrants.distributed.collectives import (
    DistEnv,
    fill_from_rank0,
    fill_replica,
    rollout_replica,
    shard_model,
)
from quadrants.distributed.collectives import current as current_dist
from quadrants.distributed.placement import Sharded
from quadrants.models.loading import (
    agreed_attention,
    flash_installed,
    load_policy,
    packed_attention,
)
from quadrants.models.lora import trainable_parameters
from quadrants.models.policy import check_packable
from quadrants.ops.precision import cast_on_device, resolve_precision, store_parameters
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import RolloutEngine
from quadrants.rollout.identity_guard import identity_checked
from quadrants.rollout.registry import get_engine
from quadrants.run.settings import build_step
from quadrants.run_plan import RunPlan
from quadrants.tasks import RenderedTask, make_task
from quadrants.tasks.benchmarks import known_benchmarks
from quadrants.tasks.prompt_length import LengthLimitedTask, prompt_token_counter
from quadrants.tasks.prompts import make_renderer
from quadrants.train.context import StepContext
from quadrants.train.placement import SingleProcess

log = logging.getLogger("quadrants.train")


def fused_optimizer_applies(model: torch.nn.Module) -> bool:
    """Whether torch's fused AdamW kernel can step `model`: every parameter a plain floating
    tensor on the CPU or a CUDA device. It does the for-loop implementation's arithmetic in one
    pass per parameter (half its time on the tiny model: 1.9 vs 4.0 ms a step); a sharded
    (DTensor) parameter or another device keeps the default implementation."""
    parameters = list(model.parameters())
    return bool(parameters) and all(
        type(p) is torch.nn.Parameter and p.is_floating_point() and p.device.type in ("cpu", "cuda")
        for p in parameters
    )


def build_context(plan: RunPlan, grader: Grader) -> StepContext:
    """Load everything a step needs (model, reference, engine, task, optimizer, objective), the
    modules on `train.device` (resolved first: train.device=cuda without CUDA
    fails before any load), and build the step from them (run/settings.py `build_step`). The
    plan is checked for the ranks found here first (`RunPlan.for_ranks`)."""
    dist_env = (
        current_dist()
    )  # world 1 without a process group; FSDP2-sharded under torchrun / srun
    plan = plan.for_ranks(dist_env.world_size)
    device = resolve_device(plan.train.device, dist_env.local_rank)
    # sharded: only rank 0 reads the weights, the others build the model on the meta device and
    # receive their shards from rank 0 (prepare_policy): one host copy per job, not one per rank
    weights = dist_env.is_main or not dist_env.sharded
    attention = attention_kernel(plan, device, dist_env)
    load = dict(dtype=plan.model.dtype, seed=plan.seed, weights=weights, attention=attention)
    model, tokenizer = load_policy(plan.model.name_or_path, lora=plan.model.lora, **load)
    ref_model = None
    # the KL reference: a frozen copy of the base, or under LoRA the policy itself with its
    # adapters switched off (train/forwards.py `reference_logprobs`)
    if plan.objective.kl_coef > 0 and not plan.model.lora.enabled:
        ref_model, _ = load_policy(plan.model.name_or_path, **load)
        ref_model.requires_grad_(False).eval()
    tune_for(device, plan.train.cpu, [model, ref_model])  # nothing unless device is the CPU
    # the parameters now in train.precision's storage dtype (float32 under fp32 and bf16-mixed):
    # AdamW's moments are allocated like them (torch/optim/adamw.py: zeros_like(param))
    # the task first: the identity guard's probe is sampled from its first held-out prompts
    task = make_run_task(plan, tokenizer)
    model, ref_model, engine = prepare_policy(
        plan, model, tokenizer, ref_model, dist_env, device, probe_prompts=probe_prompts(plan, task)
    )
    optimizer = torch.optim.AdamW(
        trainable_parameters(model),  # all of them, or under LoRA the adapters only
        lr=plan.train.lr,
        weight_decay=plan.train.weight_decay,
        betas=tuple(plan.train.betas),
        fused=fused_optimizer_applies(model) or None,
    )
    warmup = plan.train.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
    )
    # data parallelism behind one placement: a plain process never builds the sharded one
    placement = Sharded(dist_env) if dist_env.sharded else SingleProcess()
    return build_step(
        plan,
        model,
        tokenizer=tokenizer,
        ref_model=ref_model,
        engine=engine,
        grader=grader,
        task=task,
        optimizer=optimizer,
        scheduler=scheduler,
        placement=placement,
        device=device,
    )


def attention_kernel(plan: RunPlan, device: torch.device, env: DistEnv) -> str | None:
    """The attention kernel the run's models load with: `model.attention`, or where it is null
    the one models/loading.py `packed_attention` picks for this machine (flash_attention_2 for
    packed rows on CUDA where flash-attn is installed; else transformers' default), agreed by
    every rank (`agreed_attention`: one exchange, the same error on every rank)."""
    kernel = plan.model.attention
    if kernel is None:
        kernel = packed_attention(
            layout=plan.forward.layout,
            device_type=device.type,
            compute_dtype=resolve_precision(plan.train.precision, device).compute_dtype,
            flash=flash_installed(),
            samples_from_policy=get_engine(plan.rollout.engine).replica_for_ranks,
        )
        if kernel is not None:
            log.info("model.attention=null: %s for the packed rows (flash-attn installed)", kernel)
        elif plan.forward.packed and device.type == "cuda":
            log.warning(
                "train.attention_layout=packed with SDPA: transformers masks the packed sequence "
                "with an N x N block-diagonal mask per forward (docs/performance.md). For the "
                "varlen kernel install flash-attn (model.attention=flash_attention_2 then "
                "applies by itself, with rollout.engine=vllm)"
            )
    return agreed_attention(exchange(kernel, env))


def prepare_policy(
    plan: RunPlan,
    model: nn.Module,
    tokenizer: Any,
    ref_model: nn.Module | None,
    env: DistEnv,
    device: torch.device | None = None,
    probe_prompts: list[str] | None = None,
) -> tuple[nn.Module, nn.Module | None, RolloutEngine]:
    """Place the policy (and the frozen reference) on `device` (default: `train.device` resolved for
    this rank), shard them over the ranks, and start the rollout engine `rollout.engine` names
    (quadrants/rollout/registry.py) on the placed policy. An engine that asks for a replica (the HF
    engine) samples from the policy itself in one plain process, from a full per-rank copy on the
    same device when sharded, taken here before sharding.

    Sharded, only rank 0 needs the weights: the other ranks may pass the model on the meta device
    (`load_policy(weights=False)`, as `build_context` does), and every rank's shards (and replica)
    are filled from rank 0's values (`fill_from_rank0`), whatever the others passed.

    The modules are moved before `fully_shard`, so each rank's shards and its rollout copy are on
    `cuda:<LOCAL_RANK>` with CUDA (not run here) and the CPU otherwise (`.to` of a CPU module to the
    CPU is a no-op).

    The parameters are stored in `train.precision`'s dtype (ops/precision.py): float32 for fp32
    and bf16-mixed whatever `model.dtype` they were read in (a bf16 checkpoint cast up exactly),
    bfloat16 for pure bf16; under bf16-mixed a LoRA policy's frozen base linears in bf16
    (ops/precision.py `store_parameters`: autocast's matmul sees bf16(W) either way). Each tensor is
    moved to the device first and cast there, one at a time, so neither the host (a bf16
    checkpoint's load) nor the device (a LoRA base) ever holds a float32 copy of the model. The
    replica is taken after
    the cast: the HF engine samples from the trainer's parameters in their stored dtype (under
    autocast when they are stored in two dtypes, rollout/hf.py).

    The engine starts under the rollout identity guard (rollout/identity_guard.py), whose probe it
    samples from `probe_prompts` (None: the guard's fixed prompts)."""
    plan = plan.for_ranks(env.world_size)
    if plan.forward.packed:  # a hub id's architecture is known only now
        check_packable(model.config)
    kind = get_engine(plan.rollout.engine)
    device = resolve_device(plan.train.device, env.local_rank) if device is None else device
    precision = resolve_precision(plan.train.precision, device)
    # moved and cast one tensor at a time (ops/precision.py): no float32 copy on the host
    model = store_parameters(model, precision, device)
    if ref_model is not None:  # frozen: the policy's dtype, so that its forward is the policy's
        ref_model = cast_on_device(ref_model, device, lambda _: precision.param_dtype)
    options = dict(
        precision=precision,
        reshard_after_forward=plan.distributed.reshard_after_forward,
        device=device,
    )
    # rank 0's full tensors, to fill every rank's shards from (the other ranks: on the meta device)
    full = model.state_dict() if env.sharded and env.is_main else {}
    full_ref = ref_model.state_dict() if env.sharded and env.is_main and ref_model else {}
    replica = rollout_replica(model, env) if kind.replica_for_ranks else None
    model = shard_model(
        model, env, activation_checkpointing=plan.train.activation_checkpointing, **options
    )
    if env.sharded:
        fill_from_rank0(model, full, env, device)
        del full  # rank 0's full copy: only its shards remain
        if replica is not None:
            fill_replica(replica, model, device)
    if env.sharded and ref_model is not None:
        ref_model = shard_model(ref_model, env, **options)
        fill_from_rank0(ref_model, full_ref, env, device)
        del full_ref
    engine = kind.start(plan.cfg, model, tokenizer, replica=replica, world_size=env.world_size)
    # every weight push checked: the engine scores what the trainer scores
    # (rollout/identity_guard.py)
    return model, ref_model, identity_checked(engine, plan.cfg, precision, model, probe_prompts)


def probe_prompts(plan: RunPlan, task: Any) -> list[str]:
    """The identity guard's probe prompts: the task's first `rollout.identity_check.probe_size`
    held-out prompts, rendered as training renders them (fewer or none when the task holds fewer
    out; none when the check is off)."""
    settings = plan.rollout.identity_check
    if settings.every <= 0:
        return []
    return [problem.prompt for problem in task.heldout(settings.probe_size)]


@dataclass
class Run:
    """What the loop works with: the step's context, the run's plan and its rank layout (the
    step itself reads neither)."""

    step: StepContext
    plan: RunPlan
    dist: DistEnv

    model = property(lambda self: self.step.model)
    tokenizer = property(lambda self: self.step.tokenizer)
    engine = property(lambda self: self.step.engine)
    grader = property(lambda self: self.step.grader)
    task = property(lambda self: self.step.task)
    optimizer = property(lambda self: self.step.optimizer)
    scheduler = property(lambda self: self.step.scheduler)
    device = property(lambda self: self.step.device)
    spec = property(lambda self: self.step.objective.spec)
    params = property(lambda self: self.step.objective.params)


def make_run_task(plan: RunPlan, tokenizer: Any) -> LengthLimitedTask:
    """The run's task with its prompts rendered in the run's prompt format (the function evaluation
    uses too), none longer than task.max_prompt_tokens (tasks/prompt_length.py); a dataset task
    also drops the problems of the benchmarks this run evaluates on."""
    params = dict(plan.task.params)
    if params.get("decontaminate") is not None:  # None = every known benchmark already
        evaluated = [name for name in plan.eval.benchmarks if name in known_benchmarks()]
        params["decontaminate"] = sorted({*params["decontaminate"], *evaluated})
    task = make_task(plan.task.name, plan.task.heldout_size, params)
    render = make_renderer(
        plan.prompt.format,
        tokenizer=tokenizer,
        instruction=plan.prompt.instruction,
        task_format=getattr(task, "prompt_format", None),
    )
    rendered = RenderedTask(task, render)
    return LengthLimitedTask(rendered, prompt_token_counter(tokenizer), plan.task.max_prompt_tokens)
