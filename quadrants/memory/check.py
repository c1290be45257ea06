"""From a run's plan (quadrants/run_plan `RunPlan`, called `run` here: `Plan` is the memory plan) to
its memory plan, and the compose-time refusal.

`plan_for(run, world_size, gpus_per_node)` sizes one rank's step the way the trainer will run it:

- ranks: the launcher's (`nodes x tasks_per_node` for launcher=slurm_ddp, else one process,
  unsharded); FSDP2 shards parameters, gradients and optimizer states over them;
- precision: `train.precision` (`auto` is bf16-mixed: the plan is for CUDA);
- rows: every row at its longest, `task.max_prompt_tokens + rollout.max_new_tokens` tokens (the
  worst case a step can meet); a rank's share of a mini-batch is `mini_batch_size / ranks` rows;
  `train.micro_batch_tokens` packs `micro_batch_tokens // row length` rows per micro-batch (at least
  one), else `train.micro_batch_size`, else the whole share; the no-grad passes take
  `train.forward_tokens // row length` rows (else the mini-batch, as today), both as the plan's
  forwards read them (`run.forward`: the layout, the no-grad token budget, the vocabulary chunk);
- the engine: its registry entry answers its own share (rollout/registry.py
  `EngineKind.memory_share`); an engine that generates with the trainer's own model has none,
  and its KV cache is not itemised;
- a KL reference model (`objective.kl_coef > 0`) adds its parameters in `model.dtype`, sharded;
  under LoRA there is none (the reference is the policy with its adapters off);
- `model.lora`: the adapters on a frozen base, traced as the trainer builds them (memory/trace.py).

`check_memory` raises ValueError when the plan's peak exceeds `cluster.gpu_memory_gib`, naming the
phase and the settings that fix it.
"""

from __future__ import annotations

import math

from quadrants.config import ClusterConfig, LoraConfig, TrainConfig
from quadrants.memory.architecture import model_config
from quadrants.memory.peaks import Plan, PlanInputs, fits, format_plan, make_plan
from quadrants.memory.trace import GiB, LoraSpec
from quadrants.models.loading import FLASH
from quadrants.models.lora import target_modules as lora_target_modules
from quadrants.rollout.registry import get_engine
from quadrants.run_plan import RunPlan

# the usable GiB the engine's share is sized on when cluster.gpu_memory_gib is null and no GPU is
# seen: an "80 GB" card's total as torch.cuda.mem_get_info() reports it is about 79.1-79.6 GiB
DEFAULT_GPU_GIB = 79.1
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def resolved_precision(train: TrainConfig) -> str:
    """train.precision as the plan takes it (auto: bf16-mixed, CUDA's choice)."""
    return "bf16-mixed" if train.precision == "auto" else train.precision


def rows_per_budget(budget: int, seq_len: int, packed: bool) -> int:
    """Full rows of `seq_len` tokens the plan traces for a token budget: a budget of padded tokens
    holds at most budget // seq_len of them (at least 1: a longer row runs alone); a budget of real
    tokens (train.attention_layout=packed) holds up to `budget` tokens of shorter rows, traced as
    enough full rows to hold them, ceil(budget / seq_len)."""
    return max(1, math.ceil(budget / seq_len) if packed else budget // seq_len)


def plan_inputs(run: RunPlan, world_size: int, gpus_per_node: int) -> PlanInputs:
    train, forward = run.train, run.forward
    seq_len = run.task.max_prompt_tokens + run.rollout.max_new_tokens
    step_rows = train.prompts_per_step * run.rollout.group_size
    share = max(1, min(train.mini_batch_size, step_rows) // world_size)
    packed = forward.packed
    if train.micro_batch_tokens > 0:
        update_rows = rows_per_budget(train.micro_batch_tokens, seq_len, packed)
    elif train.micro_batch_size > 0:
        update_rows = train.micro_batch_size
    else:
        update_rows = share
    update_rows = min(update_rows, share)
    if forward.forward_tokens > 0:
        forward_rows = rows_per_budget(forward.forward_tokens, seq_len, packed)
    else:
        forward_rows = forward.batch_size
    forward_rows = min(forward_rows, max(1, step_rows // world_size))
    return PlanInputs(
        config=model_config(run.model.name_or_path),
        world_size=world_size,
        gpus_per_node=gpus_per_node,
        sharded=world_size > 1,
        precision=resolved_precision(train),
        checkpointing=train.activation_checkpointing,
        seq_len=seq_len,
        response_tokens=run.rollout.max_new_tokens,
        update_rows=update_rows,
        forward_rows=forward_rows,
        chunk_size=forward.chunk_size,
        micro_batches=math.ceil(share / update_rows),
        packed=packed,
        # an explicit flash kernel holds no N x N mask; null is planned as SDPA, which holds
        # more than the flash_attention_2 a packed run on CUDA may pick (run/build.py)
        varlen=run.model.attention in FLASH,
        engine=run.rollout.engine,
        rollout=run.rollout,
        **dict(zip(("device_bytes", "device_source"), device_total(run.cluster), strict=True)),
        reference_dtype_bytes=(
            _DTYPE_BYTES.get(run.model.dtype, 4)
            if run.objective.kl_coef > 0 and not run.model.lora.enabled
            else 0
        ),
        allocator_headroom=run.cluster.allocator_headroom,
        load_dtype_bytes=_DTYPE_BYTES.get(run.model.dtype, 4),
        offload_optimizer=train.offload_optimizer,
        lora=lora_spec(run.model.lora),
    )


def lora_spec(lora: LoraConfig) -> LoraSpec | None:
    """`model.lora` as the trace takes it (None when off)."""
    if not lora.enabled:
        return None
    modules = lora_target_modules(lora.target_modules)
    return LoraSpec(
        rank=int(lora.rank),
        alpha=float(lora.alpha),
        target_modules=modules if isinstance(modules, str) else tuple(modules),
        dropout=float(lora.dropout),
    )


def device_total(cluster: ClusterConfig) -> tuple[int, str]:
    """(usable bytes of one rank's GPU, where the figure comes from): the device's own total when
    this process sees a CUDA device (`torch.cuda.mem_get_info()[1]`, the figure an engine sizes
    its share on: rollout/registry.py), else `cluster.gpu_memory_gib` (the same figure, in GiB),
    else `DEFAULT_GPU_GIB`."""
    import torch

    if torch.cuda.is_available():
        total = int(torch.cuda.mem_get_info()[1])
        return total, f"read from {torch.cuda.get_device_name()}, torch.cuda.mem_get_info"
    gib = cluster.gpu_memory_gib
    if gib is not None:
        return int(gib * GiB), f"cluster.gpu_memory_gib={gib:g}"
    default = f"no GPU seen and cluster.gpu_memory_gib=null: {DEFAULT_GPU_GIB:g}"
    return int(DEFAULT_GPU_GIB * GiB), default


def plan_for(run: RunPlan, world_size: int, gpus_per_node: int) -> Plan:
    return make_plan(plan_inputs(run, world_size, gpus_per_node))


def check_memory(run: RunPlan, world_size: int, gpus_per_node: int) -> Plan | None:
    """The run's memory plan; ValueError when it does not fit the device's usable bytes
    (`device_total`; `cluster.gpu_memory_gib` null: no check, nothing traced)."""
    if run.cluster.gpu_memory_gib is None:
        return None
    plan = plan_for(run, world_size, gpus_per_node)
    if fits(plan):
        return plan
    raise ValueError(refusal(run, plan) + "\n" + format_plan(plan, checked=True))


def refusal(run: RunPlan, plan: Plan) -> str:
    """What does not fit, where, and the settings that fix it."""
    peak = plan.peak()
    inputs = plan.inputs
    f = peak.trainer
    state = f.parameters + f.gradients + f.optimizer
    fixes = []
    budget = inputs.device_bytes
    # the peak plus the caching allocator's headroom on the trainer's part of it
    # (cluster.allocator_headroom; the engine's share comes from its own memory pool)
    over = plan.needed() - budget
    # the trainer's sharded state: more ranks divide it (LoRA trains in one process)
    if state > 0.1 * peak.total and inputs.lora is None:
        full_state = state * inputs.world_size
        room = budget - (peak.total - state)
        # only where more ranks than the run has would hold the sharded state (a run that has
        # them already is told the other fixes): a full node of 8 first (the rest of the peak,
        # the engine's weights and KV cache, does not shrink with ranks, so the bare count can
        # fall short: test_plan.py), then twice the nodes
        least = math.ceil(full_state / room) if room > 0 else None
        if least is not None and least > inputs.world_size:
            ranks = 8 if inputs.world_size < 8 else max(2 * inputs.world_size, least)
            ranks = 8 * math.ceil(ranks / 8)
            per_node = 8
            nodes = math.ceil(ranks / per_node)
            where = f" hydra.launcher.nodes={nodes}" if nodes > 1 else ""
            fixes.append(
                f"more ranks per run (parameters, gradients and optimizer states, "
                f"{full_state / 1e9:.1f} GB in all, shard over them; at least {least}, now "
                f"{inputs.world_size}): launcher=slurm_ddp hydra.launcher.tasks_per_node="
                f"{per_node}{where}"
            )
    if peak.phase == "update" and f.activations > 0.1 * over:
        fixes.append(
            "fewer tokens per micro-batch: train.micro_batch_tokens="
            f"{max(inputs.seq_len, run.train.micro_batch_tokens // 2 or inputs.seq_len)}"
        )
        if not inputs.checkpointing:
            fixes.append("activation checkpointing: train.activation_checkpointing=true")
    if peak.phase == "behaviour pass" and f.activations > 0.1 * over:
        fixes.append(
            f"fewer tokens per no-grad forward: train.forward_tokens={inputs.seq_len} "
            f"(now {inputs.forward_rows} rows of {inputs.seq_len})"
        )
    if (
        peak.phase in ("rollout", "weight push", "behaviour pass")
        and f.optimizer > 0.1 * over
        and not inputs.offload_optimizer
    ):
        fixes.append(
            "AdamW's states in host memory outside the optimizer step: train.offload_optimizer=true"
        )
    if peak.engine_weights + peak.kv_cache > 0:
        awake = peak.phase in ("load", "rollout", "weight push")
        fixes.extend(get_engine(inputs.engine).share_fixes(run.rollout, awake=awake))
    if not fixes:
        fixes.append("more ranks per run, or a GPU with more memory")
    return (
        f"memory plan: the {peak.phase} phase needs {peak.total / GiB:.1f} GiB per GPU "
        f"({plan.needed() / GiB:.1f} GiB with the allocator's headroom, "
        f"cluster.allocator_headroom={run.cluster.allocator_headroom:g}), over the GPU's "
        f"{budget / GiB:.1f} GiB ({inputs.device_source}; {inputs.world_size} rank(s) per run). "
        "Fix: "
        + "; or ".join(fixes)
        + ". (Check with python -m quadrants.plan <the same overrides>; "
        "cluster.gpu_memory_gib=null skips the check.)"
    )
