"""Trace one training step of a real architecture under torch's memory trackers, with no weights.

What is measured, for one rank of a run of `world_size` ranks (FSDP2 per decoder layer, then the
root, as distributed/collectives.py shards the policy) or one unsharded process:

- `update`: the peak while `micro_batches` micro-batches of [rows, seq_len] go forward through the
  library's own policy forward (models/policy.py, with the fused LM head of ops/fused_head.py when
  the model allows it) and backward, gradients accumulating, with the optimizer's states already
  there (as at every step after the first);
- `optimizer`: the peak of the AdamW step (parameters, gradients, states and the step's own
  temporaries: the implementation the trainer gets on CUDA, `foreach` over DTensor shards, `fused`
  over plain parameters);
- `no_grad`: the peak of one no-grad forward of [forward_rows, seq_len] (the behaviour and
  |Δ log-prob| passes), gradients released (`zero_grad(set_to_none=True)`), states kept.

Rows of unequal length (`TraceSpec.rows`, benchmarks/gpu_acceptance.py on DeepScaleR-shaped rows):
the update runs the given micro-batches in their order, each laid out from its rows' prompt and
response token counts (`micro_batch_rows`): padded, prompts left-padded to the step's widest and
the micro-batch cut after its longest response, so the padding is traced; packed, only the real
tokens (ops/packing.py `pack_known_lengths`). `held` is then the largest of the micro-batches'
forwards, and the no-grad forward runs the micro-batch that feeds the most tokens. The trainer's
plan (memory/peaks.py) traces full rows, the most a micro-batch can hold.

The trackers are torch's own (torch/distributed/_tools/mem_tracker.py `MemTracker`,
fsdp2_mem_tracker.py `FSDPMemTracker`): TorchDispatchModes that see every tensor allocated and
freed and sort them into parameters, gradients, optimizer states, activations and temporaries.
Under `FakeTensorMode` (torch/_subclasses/fake_tensor.py) no tensor has storage, so a 7B-wide layer
traces in about a second on a laptop, and the fake process group
(torch/testing/_internal/distributed/fake_pg.py) gives FSDP2 a world of any size.

Two shortcuts, each the same figures to the byte (`trace_step(spec, shortcuts=False)` runs
without them; tests/unit/memory/test_trace.py compares): the trackers keep only the tracker-wide
peak (`_tracker_wide`), and the fused LM head runs the first two and the last two of its row
chunks (`_head_chunks_elided`), where a 7B-wide trace otherwise spends most of its time.

Two corrections, each found by checking the trackers' figures against arithmetic:

1. The optimizer step of a sharded model is not traced through the DTensor parameters. DTensor's
   sharding propagation computes output shapes on fake tensors of the GLOBAL shape, in the fake
   mode that is active (torch/distributed/tensor/_sharding_prop.py: `detect_fake_mode() or
   FakeTensorMode()`). In eager mode that is a private mode the tracker skips (its
   `active_fake_mode() is self._fake_mode_on_entry` test); under our FakeTensorMode it is the same
   mode, so the tracker counts those global-shape tensors as optimizer states: a 2-layer
   Qwen2.5-7B-shaped model over 8 ranks reported 7.79 GiB of "optimizer states" (19.6 GiB with
   foreach) against 2 x 0.72 GiB of real AdamW moments. The step is traced instead on plain
   tensors of the local shards' shapes (`DTensor.to_local()`), which is exactly what the
   optimizer's per-shard arithmetic allocates.
2. The update phase is traced with the optimizer states allocated beforehand (one step with zero
   gradients outside the tracker), and with two micro-batches, so that the second one runs with
   the first one's gradients held, as every step after the first does.

LoRA (`TraceSpec.lora`): the adapters are put into the traced model by the trainer's own
`apply_lora` (models/lora.py, peft's `get_peft_model`), so the frozen base weights are held in the
storage dtype the trainer gives them (ops/precision.py `store_frozen_linears`, as run/build.py
`prepare_policy` stores them: float32 under fp32, bf16 under bf16; under bf16-mixed the frozen
linears in bf16, the embeddings, norms and adapters in float32), without gradients, and AdamW
(built over `trainable_parameters`, as run/build.py builds it) keeps moments for the adapters only.
Under autocast the bf16 base linears are used as they are; a float32 frozen weight would be cast
at every matmul into a temporary (autocast caches the casts of leaf tensors that require grad only:
aten/src/ATen/autocast_mode.cpp `cached_cast`), which the trace would see.

Attention: the trace runs on the CPU, where `scaled_dot_product_attention` picks the CPU flash
kernel (torch/nn/attention: `_fused_sdp_choice` on CPU), which saves the output and a logsumexp per
query (O(T) per head), as CUDA's flash and memory-efficient kernels do; no [T, T] score matrix is
kept for backward on either device. tests/unit/memory/test_trace.py checks the traced activations
grow linearly in the sequence length. Eager attention (`attn_implementation="eager"`) keeps
[heads, T, T] scores on both devices and is traced as such.

Packed rows under SDPA carry transformers' [1, 1, N, N] block-diagonal mask, which the trace
counts. A flash kernel (`TraceSpec.varlen`: `model.attention=flash_attention_2|3`) holds no such
mask: flash-attn's varlen forward keeps q, k, v (the KV heads unrepeated), the output, a
logsumexp per query and head, the row boundaries and an RNG state for backward
(flash_attn/flash_attn_interface.py `FlashAttnVarlenFunc.forward`'s `ctx.save_for_backward`), and
transformers builds no N x N mask for it (transformers/masking_utils.py `flash_attention_mask`). The
trace stands in for it with `VARLEN_TRACE`, SDPA without a mask and causal over the whole
sequence: the CPU flash kernel keeps the same tensors (with grouped-query heads unrepeated:
transformers/integrations/sdpa_attention.py `use_gqa_in_sdpa` when there is no mask). Its
attention reaches across rows, so its arithmetic is not the packed rows'; only its memory is
used, which is what flash-attn holds for N tokens in any row split.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch import nn
from transformers import AttentionInterface, AutoModelForCausalLM, PretrainedConfig
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface

from quadrants.cpu.matmul import cpu_matmul, set_cpu_matmul
from quadrants.models.lora import apply_lora, trainable_parameters
from quadrants.models.policy import packed_forward, plain_logprobs
from quadrants.ops.packing import lengths_mask, pack_full_rows, pack_known_lengths
from quadrants.ops.precision import resolve_precision, store_frozen_linears

GiB = 2**30

PRECISIONS = ("fp32", "bf16-mixed", "bf16")

# tracker categories -> the plan's kinds
_KINDS = {  # lower case: MemTracker says "Optstate", FSDPMemTracker "OptState"
    "parameter": "parameters",
    "sharded param": "parameters",
    "unsharded param": "gathered",
    "all gather": "gathered",
    "gradient": "gradients",
    "sharded grad": "gradients",
    "unsharded grad": "gradients",
    "reduce scatter": "gradients",
    "optstate": "optimizer",
    "activation": "activations",
    "temp": "activations",
    "inputs": "activations",
    "buffer": "activations",
    "other": "activations",
}
KINDS = ("parameters", "gathered", "gradients", "optimizer", "activations")


@dataclass(frozen=True)
class Footprint:
    """Bytes held at one moment (a phase's peak), by kind."""

    parameters: int = 0  # the rank's parameters (its shards when sharded)
    gathered: int = 0  # FSDP2's unsharded (all-gathered) layer parameters and buffers
    gradients: int = 0
    optimizer: int = 0  # AdamW's moments (and the step's temporaries during the step)
    activations: int = 0  # saved activations, temporaries, inputs, buffers

    @property
    def total(self) -> int:
        return sum(getattr(self, kind) for kind in KINDS)

    def scaled(self, other: Footprint, factor: float) -> Footprint:
        """self + factor * (other - self), kind by kind (rounded to bytes)."""
        return Footprint(
            **{
                kind: round(
                    getattr(self, kind) + factor * (getattr(other, kind) - getattr(self, kind))
                )
                for kind in KINDS
            }
        )

    def plus(self, **extra: int) -> Footprint:
        return replace(self, **{kind: getattr(self, kind) + value for kind, value in extra.items()})


def footprint(snapshot: dict) -> Footprint:
    """A tracker's snapshot (device -> category -> bytes) summed over devices into kinds."""
    kinds = dict.fromkeys(KINDS, 0)
    for per_device in snapshot.values():
        for category, value in per_device.items():
            name = str(getattr(category, "value", category)).lower()
            if name in _KINDS:
                kinds[_KINDS[name]] += int(value)
    return Footprint(**kinds)


@dataclass(frozen=True)
class LoraSpec:
    """`model.lora` as the trace takes it (hashable: plans of one sweep share a trace)."""

    rank: int
    alpha: float
    target_modules: str | tuple[str, ...]
    dropout: float = 0.0


@dataclass(frozen=True)
class TraceSpec:
    """What to trace: the architecture, the rank's view of the run and one micro-batch's shape."""

    config: PretrainedConfig
    layers: int  # decoder layers built (the plan extrapolates to the config's depth)
    seq_len: int  # prompt + response tokens per row (the longest a row can be)
    response_tokens: int  # T, the positions that go through the LM head
    update_rows: int  # rows per micro-batch of the update
    forward_rows: int  # rows per no-grad forward
    precision: str = "bf16-mixed"  # fp32 | bf16-mixed | bf16
    world_size: int = 1
    sharded: bool = True  # FSDP2 over world_size ranks (False: one plain process)
    checkpointing: bool = False
    chunk_size: int = 256  # the fused head's rows per chunk (train.entropy_chunk_size)
    micro_batches: int = 2
    fake: bool = True  # fake tensors and a fake process group (False: real tensors, here)
    device: str = "cpu"
    lora: LoraSpec | None = None  # LoRA adapters on the model (None: full fine-tuning)
    # the rows of each forward packed into one sequence (train.attention_layout=packed)
    packed: bool = False
    # a flash kernel's attention memory (model.attention=flash_attention_2|3): no N x N mask
    varlen: bool = False
    # rows of unequal length: the update's micro-batches in the order they run, each a tuple of
    # its rows' (prompt, response) real token counts; seq_len - response_tokens is then the
    # step's widest prompt P and response_tokens its longest response T (`micro_batch_rows`).
    # None: `micro_batches` micro-batches of `update_rows` full rows of seq_len tokens
    rows: tuple[tuple[tuple[int, int], ...], ...] | None = None


@dataclass
class StepTrace:
    update: Footprint  # peak of the micro-batches' forward and backward
    held: Footprint  # held at the end of the last micro-batch's forward (before its backward)
    optimizer: Footprint  # peak of the AdamW step
    no_grad: Footprint  # peak of one no-grad forward
    resident: Footprint  # between steps: parameters and optimizer states (gradients released)
    parameters: int  # elements of the traced base model (the adapters not counted)
    trainable: int = 0  # elements the optimizer steps (all of them, or the LoRA adapters)


@contextmanager
def _adapters_built_in_place() -> Iterator[None]:
    """peft moves each new adapter to its base layer's device and dtype with `Module.to`, twice
    (peft/tuners/tuners_utils.py `BaseTunerLayer._move_adapter_to_device_of_base_layer`, and the
    "dispatch to correct device" loop of peft/tuners/lora/model.py `LoraModel._replace_module`),
    which fails on fake parameters (`Module._apply` swaps a fake parameter with
    `torch.utils.swap_tensors`, which refuses it). The trace builds the adapters on the base
    layer's device and in its dtype already (the default device and dtype set around them), so
    while inside the moves are skipped: `_replace_module` keeps only its `setattr` of the new
    module."""
    from peft.tuners.lora.model import LoraModel
    from peft.tuners.tuners_utils import BaseTunerLayer

    move = BaseTunerLayer._move_adapter_to_device_of_base_layer
    replace_module = LoraModel._replace_module
    BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda self, *a, **k: None
    LoraModel._replace_module = lambda self, parent, name, new, child: setattr(parent, name, new)
    try:
        yield
    finally:
        BaseTunerLayer._move_adapter_to_device_of_base_layer = move
        LoraModel._replace_module = replace_module


@contextmanager
def _torch_matmul() -> Iterator[None]:
    """CPU linear maps through torch's own kernels while inside (oneDNN's op has no fake kernel;
    the plan is for CUDA, which never takes that route)."""
    before = cpu_matmul()
    set_cpu_matmul("torch")
    try:
        yield
    finally:
        set_cpu_matmul(before)


@contextmanager
def _fake_process_group(world_size: int) -> Iterator[None]:
    """A default process group of `world_size` ranks, rank 0, that communicates nothing."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError(
            "the memory plan traces under its own fake process group and cannot run inside a "
            "process that already has one: run it before init_process_group (or in a subprocess)"
        )
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


VARLEN_TRACE = "quadrants_varlen_trace"


def _varlen_trace_attention(module, query, key, value, attention_mask, **kwargs):
    """flash-attn's memory for the trace (module docstring): SDPA, no mask, causal."""
    return sdpa_attention_forward(module, query, key, value, None, **kwargs)


def _no_mask(*args, **kwargs) -> None:
    """No mask for `VARLEN_TRACE`: flash-attn holds none. (transformers' `flash_attention_mask`
    passes a padded batch's 2D mask on, after asking `attention_mask.all()`, a question fake
    tensors cannot answer; the stand-in reads no mask either way.)"""
    return None


AttentionInterface.register(VARLEN_TRACE, _varlen_trace_attention)
AttentionMaskInterface.register(VARLEN_TRACE, _no_mask)


def traced_chunks(rows: int, step: int) -> list[int]:
    """The first rows of the chunks of `step` rows of `rows` the trace runs: the first two and the
    last two (every chunk when there are at most four)."""
    count = -(-rows // step)
    return [c * step for c in range(count) if c < 2 or c >= count - 2]


@contextmanager
def _head_chunks_elided() -> Iterator[None]:
    """The fused LM head (ops/fused_head.py) runs the first two and the last two of its chunks
    while inside; the rest of its loops, the same to the byte for the trackers, are not run.

    The head's forward and backward loop over chunks of `chunk_size` rows, and a 7B-wide trace
    spends most of its time there (the 7B LoRA preset: 48 chunks of 256 rows each way per
    micro-batch of 4 x 3072 response tokens, 192 in the no-grad forward of 16 rows). Each chunk does
    the same operations on tensors of the same shapes, so from the second chunk on each allocates
    and frees what the one before it did (the first may differ: autocast caches the head's weight
    cast in it): only what the chunks leave behind differs. Backward leaves nothing (it writes into
    gradients allocated before its loop; a chunk's [chunk, V] buffer is freed during the next one,
    as the one before it was): a chunk between the second and the second-last reaches the same
    totals as the second, later, so the trackers' peak (the first moment of the largest total) and
    what is held after the loop are unchanged without it. Forward leaves each chunk's log-probs and
    entropies ([chunk] float32 each) until it returns: an elided chunk allocates exactly those
    (zeros), so every later moment holds what it holds in the full loop, and an elided chunk's
    totals are below the second-last chunk's, which holds more of them (the last, possibly partial,
    runs too)."""
    from quadrants.ops import fused_head

    forward_chunk, backward_chunks = fused_head._forward_chunk, fused_head._backward_chunks

    def elided_forward_chunk(hidden, weight, bias, ids, temperature, rows: slice):
        step = rows.stop - rows.start
        if rows.start in traced_chunks(hidden.shape[0], step):
            return forward_chunk(hidden, weight, bias, ids, temperature, rows)
        # an elided chunk is a full one (the last two run)
        return tuple(hidden.new_zeros(step, dtype=torch.float32) for _ in range(2))

    fused_head._forward_chunk, fused_head._backward_chunks = elided_forward_chunk, traced_chunks
    try:
        yield
    finally:
        fused_head._forward_chunk, fused_head._backward_chunks = forward_chunk, backward_chunks


def build_model(
    config: PretrainedConfig, layers: int, dtype: torch.dtype, varlen: bool = False
) -> nn.Module:
    """The architecture with `layers` decoder layers and random weights, in `dtype`, SDPA
    attention, or with `varlen` the stand-in for a flash kernel's memory (`VARLEN_TRACE`; the
    fake-tensor way: the default dtype set first, as `.to` fails on fake parameters)."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = layers
    for key in ("layer_types",):  # per-layer lists sized for the config's depth
        values = getattr(config, key, None)
        if isinstance(values, list) and values:
            setattr(config, key, (values + values[-1:] * layers)[:layers])
    config.dtype = None  # the shipped configs say bfloat16: build in `dtype`
    with _default_dtype(dtype):
        kernel = VARLEN_TRACE if varlen else "sdpa"
        return AutoModelForCausalLM.from_config(config, attn_implementation=kernel, dtype=dtype)


def shard(model: nn.Module, mesh, spec: TraceSpec) -> nn.Module:
    """FSDP2 over `spec.world_size` ranks through the trainer's own `shard_model` (each decoder
    layer then the root, train.precision's MixedPrecisionPolicy, the gradient reduction a plain
    sum), activation checkpointing as the trainer enables it; `mesh` is built outside the fake
    mode."""
    from quadrants.distributed.collectives import DistEnv, shard_model

    env = DistEnv(rank=0, world_size=spec.world_size, local_rank=0, sharded=spec.sharded)
    return shard_model(
        model,
        env,
        precision=resolve_precision(spec.precision, torch.device(spec.device)),
        activation_checkpointing=spec.checkpointing,
        device=torch.device(spec.device),
        mesh=mesh,
    )


def _autocast(spec: TraceSpec):
    """The context the trainer runs every forward in (ops/precision.py): bf16 autocast under
    bf16-mixed, one process or sharded alike; nothing otherwise."""
    return resolve_precision(spec.precision, torch.device(spec.device)).autocast(
        torch.device(spec.device)
    )


def micro_batch_rows(
    lengths: tuple[tuple[int, int], ...], spec: TraceSpec, vocab: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [n, P + t] long, mask [n, P + t] bool) of one micro-batch of rows of unequal length,
    laid out as the trainer's padded forward runs them: each row's prompt left-padded to the step's
    widest P = seq_len - response_tokens (train/blocks.py `concat_rollouts`), its response
    right-padded and the micro-batch cut after its longest response t (models/policy.py: one length
    bucket, as under FSDP). Random token ids (no operation of the step reads their values)."""
    prompt = spec.seq_len - spec.response_tokens
    if any(not 0 <= p <= prompt or not 1 <= r <= spec.response_tokens for p, r in lengths):
        raise ValueError(
            f"row lengths {lengths} outside the spec's {prompt} prompt columns and "
            f"1..{spec.response_tokens} response tokens"
        )
    span = max(r for _, r in lengths)
    ids = torch.randint(0, vocab, (len(lengths), prompt + span), device=device)
    mask = lengths_mask([p for p, _ in lengths], [r for _, r in lengths], prompt, span)
    return ids, mask.to(device)


def policy_loss(
    model: nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    spec: TraceSpec,
    lengths: tuple[tuple[int, int], ...] | None = None,
) -> torch.Tensor:
    """The traced step's loss (also what benchmarks/gpu_acceptance.py trains): a policy-gradient-
    shaped loss over the response log-probs and entropy, every row carrying
    gradient (the objective's own [rows, T] terms are negligible next to the model's), through the
    policy's one-forward path (models/policy.py `plain_logprobs`). The fused head's backward
    recomputes every row (`skip_gradless=False`): the path of most memory, and the one that asks
    no data-dependent question of the gradients, which fake tensors cannot answer.

    `spec.packed`: the rows packed into one [1, rows x (seq_len - 1)] sequence
    (train.attention_layout=packed; ops/packing.py `pack_full_rows`, laid out from the shapes),
    through the policy's packed forward (models/policy.py `packed_forward`), with the attention
    mask transformers builds for it (a [1, 1, N, N] boolean block-diagonal mask under SDPA).

    `lengths`: rows of unequal length (`micro_batch_rows`: ids and mask [n, P + t], each row's
    (prompt, response) real token counts). Padded, the loss is the mean over the real response
    tokens (the mask); packed, only real tokens are fed (`pack_known_lengths`, laid out from the
    counts, so the plan traces it on fake tensors too), the loss the mean over the targets."""
    response = ids.shape[1] - (spec.seq_len - spec.response_tokens)  # T, or t of `lengths`
    if spec.packed:
        if lengths is None:
            packed = pack_full_rows(ids, response)
        else:
            prompts, responses = [p for p, _ in lengths], [r for _, r in lengths]
            packed = pack_known_lengths(ids, response, prompts, responses)
        logp, entropy = packed_forward(
            model,
            packed,
            temperature=1.0,
            chunk_size=spec.chunk_size,
            with_entropy=True,
            skip_gradless=False,
        )
        return -(logp.mean() + 0.01 * entropy.mean())  # type: ignore[union-attr]
    logp, entropy = plain_logprobs(
        model,
        ids,
        mask,
        response,
        temperature=1.0,
        chunk_size=spec.chunk_size,
        with_entropy=True,
        skip_gradless=False,
    )
    if lengths is None:  # every position real
        return -(logp.mean() + 0.01 * entropy.mean())  # type: ignore[union-attr]
    real = mask[:, mask.shape[1] - response :].to(logp.dtype)  # [n, t]
    return -((logp + 0.01 * entropy) * real).sum() / real.sum()  # type: ignore[operator]


def _adamw(params: list[nn.Parameter], sharded: bool) -> torch.optim.Optimizer:
    """AdamW as the trainer gets it on CUDA: fused over plain parameters (run/build.py
    `fused_optimizer_applies`), the default (foreach, on CUDA) over DTensor shards."""
    if sharded:
        return torch.optim.AdamW(params, lr=1e-6, foreach=True)
    return torch.optim.AdamW(params, lr=1e-6, fused=True)


def _step_with_zero_grads(params: list[nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
    """Allocate the optimizer's states (one step with zero gradients), then release gradients."""
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def trace_step(spec: TraceSpec, shortcuts: bool = True) -> StepTrace:
    """Peaks of the update, the optimizer step and a no-grad forward (module docstring).

    `shortcuts`: the trackers keep the tracker-wide figures only (`_tracker_wide`) and the fused
    LM head runs the first two and the last two of its chunks (`_head_chunks_elided`): the figures
    the same to the byte in less time. False: torch's trackers as they are and every chunk, the
    reference tests/unit/memory/test_trace.py holds the shortcuts to."""
    if spec.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {spec.precision!r}")
    group = _fake_process_group(spec.world_size) if spec.sharded and spec.fake else nullcontext()
    elided = _head_chunks_elided() if shortcuts else nullcontext()
    with group, _torch_matmul(), elided:
        mode = nullcontext()
        if spec.fake:
            from torch._subclasses.fake_tensor import FakeTensorMode

            mode = FakeTensorMode()
        mesh = None
        if spec.sharded:  # the mesh holds real tensors: built outside the fake mode
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(spec.device, (spec.world_size,))
        with mode:
            return _trace(spec, mesh, shortcuts)


def _trace(spec: TraceSpec, mesh, shortcuts: bool) -> StepTrace:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    if shortcuts:
        FSDPMemTracker, MemTracker = _tracker_wide(FSDPMemTracker), _tracker_wide(MemTracker)

    dtype = torch.bfloat16 if spec.precision == "bf16" else torch.float32
    with torch.device(spec.device):
        model = build_model(spec.config, spec.layers, dtype, varlen=spec.varlen)
        elements = sum(p.numel() for p in model.parameters())
        if spec.lora is not None:
            if spec.sharded:
                raise ValueError("LoRA trains in one process: the plan traces it unsharded")
            with _default_dtype(dtype), _adapters_built_in_place():
                apply_lora(model, spec.lora)
            # the storage the trainer gives it (run/build.py `prepare_policy`): bf16 base linears
            precision = resolve_precision(spec.precision, torch.device(spec.device))
            store_frozen_linears(model, precision)
    model.train()
    shard(model, mesh, spec)  # sharded or not: checkpointing is enabled there, as the trainer does
    params = trainable_parameters(model)  # under LoRA the adapters only, as the trainer's AdamW
    optimizer = _adamw(params, spec.sharded)
    _step_with_zero_grads(params, optimizer)
    vocab = spec.config.vocab_size

    def batch(rows: int, lengths) -> tuple[torch.Tensor, torch.Tensor]:
        if lengths is not None:
            return micro_batch_rows(lengths, spec, vocab, spec.device)
        ids = torch.randint(0, vocab, (rows, spec.seq_len), device=spec.device)
        return ids, torch.ones(rows, spec.seq_len, dtype=torch.bool, device=spec.device)

    def tracker():
        if spec.sharded:
            return FSDPMemTracker(model, optimizer)
        plain = _frozen_aware(MemTracker)() if spec.lora is not None else MemTracker()
        plain.track_external(model, optimizer)
        return plain

    # the update: micro-batches forward and backward, gradients accumulating
    resident_tracker = tracker()
    with resident_tracker:
        pass
    resident = footprint(resident_tracker.get_tracker_snapshot("current"))
    update_tracker = tracker()
    groups = [None] * spec.micro_batches if spec.rows is None else list(spec.rows)
    held = None  # the most any micro-batch's forward leaves held (equal rows: the last one's)
    with update_tracker:
        for lengths in groups:
            ids, mask = batch(spec.update_rows, lengths)
            with _autocast(spec):
                loss = policy_loss(model, ids, mask, spec, lengths)
            now = footprint(update_tracker.get_tracker_snapshot("current"))
            held = now if held is None or now.total >= held.total else held
            loss.backward()
            del loss, ids, mask
            update_tracker.reset_mod_stats()  # per-module stats only; the peak stays
    update = footprint(update_tracker.get_tracker_snapshot("peak"))

    optimizer_peak = _trace_optimizer(model, optimizer, spec, MemTracker, tracker)

    # the no-grad passes: gradients released after the update, states kept
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    forward_tracker = tracker()
    widest = None if spec.rows is None else max(spec.rows, key=lambda g: fed_tokens(g, spec))
    with forward_tracker, torch.no_grad():
        ids, mask = batch(spec.forward_rows, widest)
        with _autocast(spec):
            policy_loss(model, ids, mask, spec, widest)
        del ids, mask
    no_grad = footprint(forward_tracker.get_tracker_snapshot("peak"))
    model.train()
    assert held is not None  # at least one micro-batch
    return StepTrace(
        update=update,
        held=held,
        optimizer=optimizer_peak,
        no_grad=no_grad,
        resident=resident,
        parameters=elements,
        trainable=sum(p.numel() for p in params),
    )


def fed_tokens(lengths: tuple[tuple[int, int], ...], spec: TraceSpec) -> int:
    """Tokens a micro-batch of rows of unequal length feeds: padded, rows x (P + its longest
    response); packed, its rows' real tokens."""
    if spec.packed:
        return sum(p + r for p, r in lengths)
    return len(lengths) * (spec.seq_len - spec.response_tokens + max(r for _, r in lengths))


def _tracker_wide(tracker_class):
    """`tracker_class` (torch's MemTracker or FSDPMemTracker) keeping the tracker-wide figures
    only. After every operation torch's `_update_peak_stats` walks every module the tracker has
    seen to update that module's own peak (`memory_tracking`, what `display_modulewise_snapshots`
    prints), about half the time of a trace; then it updates the tracker-wide peak. The trace reads
    the tracker-wide snapshots only (`get_tracker_snapshot("current")` and `("peak")`), which the
    per-module walk never writes, so this keeps torch's second part as it is and skips the walk:
    the same figures to the byte (tests/unit/memory/test_trace.py)."""
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY

    class TrackerWide(tracker_class):
        def _update_peak_stats(self, peak_state) -> None:
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL_KEY]:
                    self._peak_mem[dev] = dev_snap[_TOTAL_KEY]
                    self._peak_mem_snap[dev] = copy.deepcopy(dev_snap)

    TrackerWide.__name__ = TrackerWide.__qualname__ = f"TrackerWide{tracker_class.__name__}"
    return TrackerWide


def _frozen_aware(tracker_class):
    """`tracker_class` (torch's MemTracker, or `_tracker_wide`'s) for a model with frozen
    parameters."""
    from torch.distributed._tools.mem_tracker import _MemRefType

    class FrozenAwareMemTracker(tracker_class):
        """torch's MemTracker with gradient hooks on the parameters that require grad only: its
        module pre-forward hook registers one on every parameter of every module
        (torch/distributed/_tools/mem_tracker.py `_track_module_params_and_buffers`), which raises
        on a frozen one ("cannot register a hook on a tensor that doesn't require gradient"), as
        LoRA's base weights are. The hooks (hook and post-accumulate hook, as torch installs them)
        only file the gradients under "gradient"; a frozen parameter has none."""

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            out = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
            if not install_grad_hooks:
                return out

            def on_grad(grad: torch.Tensor) -> None:
                self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

            for param in module.parameters():
                if param.requires_grad and self._param_to_grad_hook_handles.get(param) is None:
                    self._param_to_grad_hook_handles[param] = (
                        param.register_hook(on_grad),
                        param.register_post_accumulate_grad_hook(lambda p: on_grad(p.grad)),
                    )
            return out

    return FrozenAwareMemTracker


def frozen_aware_mem_tracker():
    """A MemTracker for a model with frozen parameters (LoRA's base): torch's class, imported
    lazily, with gradient hooks on the trainable parameters only (also benchmarks/gpu_acceptance.py
    on the CPU)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    return _frozen_aware(MemTracker)()


def _trace_optimizer(model, optimizer, spec: TraceSpec, MemTracker, tracker) -> Footprint:
    """The AdamW step's peak. Sharded: on plain tensors of the local shards' shapes (correction 1
    of the module docstring), with the model's own parameters, gradients and states as the base."""
    if not spec.sharded:
        step_tracker = tracker()
        with step_tracker:
            optimizer.step()
        return footprint(step_tracker.get_tracker_snapshot("peak"))
    base_tracker = tracker()
    with base_tracker:
        pass
    base = footprint(base_tracker.get_tracker_snapshot("current"))
    local = [nn.Parameter(p.to_local().detach().clone()) for p in model.parameters()]
    for shard_param, param in zip(local, model.parameters(), strict=True):
        shard_param.grad = param.grad.to_local().detach().clone()
    local_optimizer = _adamw(local, sharded=True)
    grads = [p.grad for p in local]
    _step_with_zero_grads(local, local_optimizer)
    for shard_param, grad in zip(local, grads, strict=True):
        shard_param.grad = grad
    step_tracker = MemTracker()
    step_tracker.track_external(*local, *grads, local_optimizer)
    with step_tracker:
        before = step_tracker.get_tracker_snapshot("current")
        local_optimizer.step()
    extra = footprint(step_tracker.get_tracker_snapshot("peak")).total - footprint(before).total
    return base.plus(optimizer=max(extra, 0))
