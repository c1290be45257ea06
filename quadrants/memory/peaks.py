"""The memory plan of a run: per GPU and per phase, the peak by kind, and the host memory per node.

The trainer's share is measured (memory/trace.py: one micro-batch step of the real architecture
traced with torch's trackers on fake tensors at 1 and 2 decoder layers, extrapolated to the
model's depth); the rollout engine's share is what its registry entry answers
(rollout/registry.py `EngineKind.memory_share`: vLLM's follows from its settings,
rollout/vllm_share.py). Phases, in the order a step runs them:

- load: the trainer's parameters and the engine awake (its weights and KV cache);
- rollout: parameters and optimizer states (gradients released after the last update) and the
  engine awake;
- behaviour pass: the no-grad forward of `train.forward_tokens` (or the mini-batch) with the
  engine asleep (what sleep does not free, its CUDA graphs and buffers, still held);
- update: the micro-batches' forward and backward and the AdamW step, engine asleep;
- weight push: the engine's weights woken and receiving the trainer's, plus one gathered full
  parameter (the largest, in the engine's dtype) at a time and the copy the engine's reload makes
  of it (`EngineShare.receive_tensors`).

Every phase also holds the process's non-torch memory (`NON_TORCH_GIB`: CUDA context, NCCL), and
the budget is the device's usable total (`PlanInputs.device_bytes`: `cluster.gpu_memory_gib`, or
the device's own figure when the planning process sees one: memory/check.py).

Rows: the trace runs the plan's own rows per micro-batch and per no-grad forward (a peak is the
largest of several moments, each linear in the rows, and which one is largest changes with them,
so the rows are not extrapolated).

Depth: memory held grows by a fixed amount per decoder layer (its parameter shards, gradients,
optimizer states, and the activations it saves for backward). The update's peak at depth L is the
2-layer peak plus (L - 2) times the per-layer growth of what is held at the end of the forward
(where backward starts and every layer's saved activations are held), or the 2-layer peak extended
linearly, whichever is larger; the no-grad peak, the optimizer's step and the resident state are
linear in depth. FSDP2's gathered (unsharded) parameters are not: it gathers one layer at a time
and frees it (`reshard_after_forward`), so at every depth the plan holds them at the deeper trace's
value (`_deepest_gathered`).
tests/unit/memory/test_plan.py checks the extrapolation against a full trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from transformers import PretrainedConfig

from quadrants.config import RolloutConfig
from quadrants.memory.trace import (
    KINDS,
    Footprint,
    GiB,
    LoraSpec,
    StepTrace,
    TraceSpec,
    trace_step,
)
from quadrants.rollout.engine import EngineShare
from quadrants.rollout.registry import get_engine

# the depths traced (this and one more): the first layer sits between the embedding and the head,
# so a 1-layer model's peak can fall at another moment than a deep model's; from 2 layers on a
# middle layer exists and the per-layer growth is the deep model's (tests/unit/memory/test_plan.py)
TRACED_DEPTH = 2
PHASES = ("load", "rollout", "behaviour pass", "update", "weight push")
# host memory of one trainer process besides what the plan itemises (interpreter, torch, CUDA's
# host side, data): an assumption, not a measurement
HOST_BASE_GIB = 4.0
# what a SLURM job's memory request (sbatch --mem) must hold beyond the plan's host figure: the
# process base is an assumption (its estimates run to 5 GiB a rank with vLLM imported and the
# grader's workers: +25 %), so the request covers the plan by this share (launch/hydra_setup.py)
HOST_MARGIN = 0.25
# GPU memory one process holds outside torch's allocator, in every phase: an assumption, not a
# measurement here (no GPU): the CUDA context of a Hopper GPU with lazy module loading (CUDA 12+'s
# default) about 0.5 GiB, NCCL's communicator buffers for 8 ranks over NVLink (NCCL_BUFFSIZE, 4 MiB
# per channel and peer, and its NVLS buffers) up to about 1 GiB. The engine runs in the trainer's
# process (one CUDA context). benchmarks/gpu_acceptance.py measures it where a GPU is lent.
NON_TORCH_GIB = 1.5


@dataclass(frozen=True)
class PlanInputs:
    """Everything the plan depends on."""

    config: PretrainedConfig
    world_size: int  # ranks per run
    gpus_per_node: int  # ranks per node (host memory)
    sharded: bool  # FSDP2 over the ranks (False: one plain process)
    precision: str  # fp32 | bf16-mixed | bf16
    checkpointing: bool
    seq_len: int  # prompt + response tokens of the longest row
    response_tokens: int
    update_rows: int  # rows per micro-batch (per rank)
    forward_rows: int  # rows per no-grad forward (per rank)
    chunk_size: int
    micro_batches: int  # micro-batches per optimizer step (per rank)
    engine: str = "hf"  # rollout.engine: its registry entry answers its share of the GPU
    rollout: RolloutConfig | None = None  # the rollout section the engine's share is sized on
    # one rank's GPU, usable bytes (what torch.cuda.mem_get_info()[1] reports): the budget, and
    # what the engine's share is a fraction of; `device_source` says where the figure came from
    device_bytes: int = int(79.1 * 2**30)
    device_source: str = "cluster.gpu_memory_gib=79.1"
    reference_dtype_bytes: int = 0  # a KL reference model's bytes per parameter (0: none)
    load_dtype_bytes: int = 2  # bytes per parameter of the checkpoint as read (model.dtype)
    # train.offload_optimizer: AdamW's states in host memory except during the optimizer step
    offload_optimizer: bool = False
    # torch's caching allocator reserves this share of the trainer's peak beyond it
    # (cluster.allocator_headroom); counted by `Plan.needed`, not in the phases
    allocator_headroom: float = 0.0
    # model.lora: adapters trained on a frozen base (memory/trace.py); None: full fine-tuning
    lora: LoraSpec | None = None
    packed: bool = False  # train.attention_layout=packed: each micro-batch one packed sequence
    varlen: bool = False  # model.attention is a flash kernel: no N x N mask (memory/trace.py)

    def trace_key(self) -> tuple:
        """What the trainer's trace depends on (plans of one sweep's jobs share one trace)."""
        return (
            self.config.to_json_string(),
            self.world_size,
            self.sharded,
            self.precision,
            self.checkpointing,
            self.seq_len,
            self.response_tokens,
            self.update_rows,
            self.forward_rows,
            self.chunk_size,
            min(2, max(self.micro_batches, 1)),
            self.lora,
            self.packed,
            self.varlen,
        )


@dataclass(frozen=True)
class PhasePeak:
    phase: str
    trainer: Footprint
    engine_weights: int = 0
    kv_cache: int = 0
    engine_fixed: int = 0  # what the engine holds outside its share or sleep (CUDA graphs)
    gathered_push: int = 0  # the weight push: the gathered parameter and the engine's reload copy
    reference: int = 0
    non_torch: int = 0  # CUDA context and NCCL buffers (`NON_TORCH_GIB`)

    @property
    def total(self) -> int:
        return (
            self.trainer.total
            + self.engine_weights
            + self.kv_cache
            + self.engine_fixed
            + self.gathered_push
            + self.reference
            + self.non_torch
        )


@dataclass
class Plan:
    inputs: PlanInputs
    phases: list[PhasePeak]
    host_per_node: int
    head_buffers: int  # the fused LM head's two [chunk, V] float32 buffers (in activations)
    parameters: int  # elements of the full-depth model (its base, without LoRA adapters)
    trainable: int = 0  # elements the optimizer steps (the adapters under LoRA)
    notes: list[str] = field(default_factory=list)

    def _needs(self, phase: PhasePeak) -> float:
        return phase.total + self.inputs.allocator_headroom * phase.trainer.total

    def peak(self) -> PhasePeak:
        """The phase that needs the most from the GPU (`needed`)."""
        return max(self.phases, key=self._needs)

    def needed(self) -> float:
        """Bytes the peak phase needs from the GPU: its live tensors plus the caching allocator's
        headroom on the trainer's share (the engine's share comes from its own memory pool)."""
        return self._needs(self.peak())


def extrapolate(one: StepTrace, two: StepTrace, layers: int, depth: int = 1) -> StepTrace:
    """The trace at `layers` decoder layers from traces at `depth` and `depth + 1` layers (module
    docstring).

    The update's peak: the larger of two linear extrapolations, the deeper trace's peak plus the
    per-layer growth of what the forward leaves held (exact when the peak is where backward
    starts), and the peak itself extended linearly (exact when the peak's moment is a fixed
    distance from the end); the no-grad peak, the optimizer step and the resident state: linear in
    depth (what grows per layer is that layer's parameters, states and, under autocast, its cached
    bf16 weight copies)."""
    steps = layers - depth - 1  # layers beyond the deeper trace
    per_layer_held = _minus(two.held, one.held)
    by_held = _deepest_gathered(_add(two.update, per_layer_held, steps), two.update)
    by_peak = _deepest_gathered(one.update.scaled(two.update, steps + 1), two.update)
    return StepTrace(
        update=max(by_held, by_peak, key=lambda f: f.total),
        held=_deepest_gathered(_add(two.held, per_layer_held, steps), two.held),
        optimizer=_deepest_gathered(one.optimizer.scaled(two.optimizer, steps + 1), two.optimizer),
        no_grad=_deepest_gathered(one.no_grad.scaled(two.no_grad, steps + 1), two.no_grad),
        resident=one.resident.scaled(two.resident, steps + 1),
        parameters=one.parameters + (steps + 1) * (two.parameters - one.parameters),
        trainable=one.trainable + (steps + 1) * (two.trainable - one.trainable),
    )


def _deepest_gathered(extrapolated: Footprint, deepest: Footprint) -> Footprint:
    """`extrapolated` with FSDP2's gathered parameters held at the deepest trace's value: FSDP2
    unshards one layer at a time (and prefetches the next: torch/distributed/fsdp/_fully_shard,
    forward and backward prefetch of one module), so what is gathered at any moment is a layer or
    two and the root's embedding and head, whatever the depth; extended linearly, the 7B at 8
    ranks planned 13.75 GiB of gathered layers where the full 28-layer trace holds 2.90 (update
    46.02 GiB planned against 35.17 traced; now 35.17: benchmarks/plan_full_depth.py)."""
    return replace(extrapolated, gathered=deepest.gathered)


def _minus(a: Footprint, b: Footprint) -> Footprint:
    return Footprint(**{k: getattr(a, k) - getattr(b, k) for k in KINDS})


def _add(a: Footprint, delta: Footprint, times: int) -> Footprint:
    return Footprint(**{k: getattr(a, k) + times * getattr(delta, k) for k in KINDS})


_TRACES: dict[tuple, StepTrace] = {}


def trainer_trace(inputs: PlanInputs) -> StepTrace:
    """The trainer's step at the model's full depth (traces of 1 and 2 layers, extrapolated;
    cached per `trace_key` for the life of the process)."""
    key = inputs.trace_key()
    if key not in _TRACES:
        _TRACES[key] = _trainer_trace(inputs)
    return _TRACES[key]


def trace_at(inputs: PlanInputs, layers: int) -> StepTrace:
    """One trace of `layers` decoder layers at the plan's rows."""
    return trace_step(
        TraceSpec(
            inputs.config,
            layers=layers,
            seq_len=inputs.seq_len,
            response_tokens=inputs.response_tokens,
            update_rows=inputs.update_rows,
            forward_rows=inputs.forward_rows,
            precision=inputs.precision,
            world_size=inputs.world_size,
            sharded=inputs.sharded,
            checkpointing=inputs.checkpointing,
            chunk_size=inputs.chunk_size,
            micro_batches=min(2, max(inputs.micro_batches, 1)),
            lora=inputs.lora,
            packed=inputs.packed,
            varlen=inputs.varlen,
        )
    )


def _trainer_trace(inputs: PlanInputs) -> StepTrace:
    layers = int(inputs.config.num_hidden_layers)
    if layers <= TRACED_DEPTH + 1:  # small enough to trace whole
        return trace_at(inputs, layers)
    one, two = trace_at(inputs, TRACED_DEPTH), trace_at(inputs, TRACED_DEPTH + 1)
    return extrapolate(one, two, layers, TRACED_DEPTH)


def host_per_node(
    parameters: int, ranks: int, *, pinned: int, copies: int = 1, dtype_bytes: int = 2
) -> int:
    """Host bytes of the node that holds rank 0: each of its `ranks` processes' base
    (`HOST_BASE_GIB`), plus the larger of

    - the load: rank 0 alone reads the checkpoint, `copies` copies (the policy, and a KL
      reference) of `dtype_bytes` per parameter (`model.dtype`, as read) on the host, and nothing
      more: each tensor goes to the GPU and is cast to the trainer's float32 there
      (ops/precision.py `store_parameters`, `cast_on_device`); the other ranks build the model on
      the meta device and receive their shards from rank 0 (quadrants/distributed/collectives.py,
      `fill_from_rank0`);
    - the steps: every rank's `pinned` bytes, its engine's weights at sleep level 1 (0 at level 2)
      and its offloaded optimizer states (train.offload_optimizer).

    vLLM reads its own weights from the checkpoint on every rank, one tensor at a time from the
    page cache (shared by the ranks of a node, reclaimable; on NFS or Lustre vLLM prefetches the
    files into it: `vllm/model_executor/model_loader/weight_utils.py`,
    `safetensors_weights_iterator`), which is not counted."""
    load = copies * parameters * dtype_bytes
    return ranks * int(HOST_BASE_GIB * GiB) + max(load, ranks * pinned)


def make_plan(inputs: PlanInputs) -> Plan:
    """The plan of `inputs` (module docstring)."""
    step = trainer_trace(inputs)
    engine = engine_share(inputs, step.parameters)
    awake = asleep = push = {}
    if engine is not None:
        awake = dict(
            engine_weights=engine.weights, kv_cache=engine.kv_cache, engine_fixed=engine.awake_fixed
        )
        asleep = dict(
            engine_weights=engine.asleep_weights,
            kv_cache=engine.asleep_kv,
            engine_fixed=engine.asleep_fixed,
        )
    reference = step.parameters * inputs.reference_dtype_bytes // inputs.world_size
    ref = dict(reference=reference, non_torch=int(NON_TORCH_GIB * GiB))
    resident, no_grad, forward_backward = step.resident, step.no_grad, step.update
    offloaded = 0
    if inputs.offload_optimizer:  # AdamW's states on the host but for the step itself
        offloaded = step.resident.optimizer
        resident, no_grad, forward_backward = (
            replace(f, optimizer=0) for f in (resident, no_grad, forward_backward)
        )
    update = max(forward_backward, step.optimizer, key=lambda f: f.total)
    load = Footprint(parameters=step.resident.parameters)
    largest = _largest_parameter(inputs.config) * (engine.dtype_bytes if engine else 2)
    # sharded: one gathered full parameter at a time; LoRA: one merged weight W + scale * B A at a
    # time in the engine's dtype (rollout/weights.py `merged_lora_weights`), the widest projection
    merged = _largest_linear(inputs.config) * (engine.dtype_bytes if engine else 2)
    one_at_a_time = largest if inputs.sharded else merged if inputs.lora is not None else 0
    if engine is not None:  # the weights woken, the KV cache asleep
        push = dict(
            engine_weights=engine.weights,
            kv_cache=engine.asleep_kv,
            engine_fixed=engine.asleep_fixed,
            gathered_push=one_at_a_time + engine.receive_tensors * largest,
        )
    phases = [
        PhasePeak("load", load, **awake, **ref),
        PhasePeak("rollout", resident, **awake, **ref),
        PhasePeak("behaviour pass", no_grad, **asleep, **ref),
        PhasePeak("update", update, **asleep, **ref),
        PhasePeak("weight push", resident, **push, **ref),
    ]
    host = host_per_node(
        step.parameters,
        inputs.gpus_per_node,
        pinned=(engine.host_pinned if engine else 0) + offloaded,
        copies=2 if inputs.reference_dtype_bytes else 1,
        dtype_bytes=inputs.load_dtype_bytes,
    )
    vocab = int(inputs.config.vocab_size)
    return Plan(
        inputs=inputs,
        phases=phases,
        host_per_node=host,
        head_buffers=2 * inputs.chunk_size * vocab * 4,
        parameters=step.parameters,
        trainable=step.trainable,
    )


def engine_share(inputs: PlanInputs, parameters: int) -> EngineShare | None:
    """The rollout engine's own share of each GPU, as its registry entry answers it (None: it
    generates with the trainer's module, or no rollout section was given)."""
    if inputs.rollout is None:
        return None
    return get_engine(inputs.engine).memory_share(inputs.rollout, parameters, inputs.device_bytes)


def _largest_linear(config: PretrainedConfig) -> int:
    """Elements of the widest decoder projection (an MLP matrix, or attention's hidden x hidden)."""
    hidden = int(config.hidden_size)
    return max(int(config.intermediate_size) * hidden, hidden * hidden)


def _largest_parameter(config: PretrainedConfig) -> int:
    """Elements of the largest single parameter: the embedding (or LM head), vocab x hidden, or
    the widest MLP matrix."""
    hidden = int(config.hidden_size)
    return max(int(config.vocab_size) * hidden, int(config.intermediate_size) * hidden)


def host_line(plan: Plan) -> str:
    """The host line of the plan: its peak per node and what it is made of (`host_per_node`)."""
    i = plan.inputs
    copies = 2 if i.reference_dtype_bytes else 1
    base = i.gpus_per_node * int(HOST_BASE_GIB * GiB)
    load = copies * plan.parameters * i.load_dtype_bytes
    held = plan.host_per_node - base
    what = (
        f"rank 0's load {load / 1e9:.1f} GB ({copies} cop{'y' if copies == 1 else 'ies'} of "
        f"{plan.parameters / 1e9:.2f} B parameters x {i.load_dtype_bytes} B as read; each tensor "
        "is cast to the trainer's dtype on the GPU, never on the host)"
    )
    if held > load:
        what = (
            f"every rank's pinned engine weights (sleep level 1) and offloaded optimizer states "
            f"{held / 1e9:.1f} GB (more than {what})"
        )
    return (
        f"host peak per node ({i.gpus_per_node} rank(s)): {plan.host_per_node / 1e9:.1f} GB = "
        f"process bases {i.gpus_per_node} x {HOST_BASE_GIB:g} GiB ({base / 1e9:.1f} GB) + {what}; "
        f"a SLURM job's sbatch --mem must cover it + {HOST_MARGIN:.0%}: "
        f"{plan.host_per_node * (1 + HOST_MARGIN) / 1e9:.1f} GB"
    )


def fits(plan: Plan) -> bool:
    """Whether the plan's need fits the device's usable bytes (`PlanInputs.device_bytes`)."""
    return plan.needed() <= plan.inputs.device_bytes


def gib(value: int) -> str:
    return f"{value / GiB:.2f}"


def format_plan(plan: Plan, checked: bool = False) -> str:
    """The plan as one table (GiB per GPU) plus its host line and notes."""
    i = plan.inputs
    columns = ["phase", *KINDS, "engine weights", "KV cache", "engine fixed", "push", "reference"]
    columns += ["non-torch", "total"]
    rows = []
    for p in plan.phases:
        f = p.trainer
        rows.append(
            [
                p.phase,
                *(gib(getattr(f, k)) for k in KINDS),
                gib(p.engine_weights),
                gib(p.kv_cache),
                gib(p.engine_fixed),
                gib(p.gathered_push),
                gib(p.reference),
                gib(p.non_torch),
                gib(p.total),
            ]
        )
    widths = [max(len(str(r[c])) for r in [columns, *rows]) for c in range(len(columns))]
    line = lambda r: "  ".join(str(v).rjust(w) for v, w in zip(r, widths, strict=True))  # noqa: E731
    mode = f"FSDP2 over {i.world_size} ranks" if i.sharded else "one process, unsharded"
    if i.lora is not None:
        mode += (
            f", LoRA rank {i.lora.rank} ({plan.trainable / 1e6:.1f} M trainable parameters, "
            "the base frozen)"
        )
    head = [
        f"memory plan per GPU, GiB ({plan.parameters / 1e9:.2f} B parameters, {mode}, "
        f"{i.precision}, checkpointing {'on' if i.checkpointing else 'off'})",
        f"micro-batch: {i.update_rows} rows x {i.seq_len} tokens ({i.response_tokens} response); "
        f"no-grad forward: {i.forward_rows} rows",
        line(columns),
    ]
    out = head + [line(r) for r in rows]
    peak = plan.peak()  # the phase that needs most once the headroom is added (a row of the
    # table can have a larger total of live tensors: vLLM's share gets no allocator headroom)
    out.append(
        f"needs most: {peak.phase}, {gib(int(plan.needed()))} GiB per GPU = its total "
        f"{gib(peak.total)} + the caching allocator's headroom ({i.allocator_headroom:g} x the "
        f"trainer's {gib(peak.trainer.total)})"
        + (
            f"; budget {gib(i.device_bytes)} GiB ({i.device_source}): "
            + ("fits" if fits(plan) else "DOES NOT FIT")
            if checked
            else ""
        )
    )
    out.append(host_line(plan))
    out.append(
        f"the fused LM head's buffers: {gib(plan.head_buffers)} GiB (2 x chunk x vocab float32, "
        "inside activations)"
    )
    out.extend(plan.notes)
    return "\n".join(out)
