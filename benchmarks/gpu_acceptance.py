"""GPU acceptance: the trainer's cluster path on one GPU, against the memory plan.

    QUADRANTS_DATA=DATA PYTHONPATH=. python benchmarks/gpu_acceptance.py --out gpu.json   # one GPU
    QUADRANTS_DATA=DATA PYTHONPATH=. python benchmarks/gpu_acceptance.py --packed         # packed
    PYTHONPATH=. python benchmarks/gpu_acceptance.py --equal-rows --layers 28 --lora-rank 16
    PYTHONPATH=. python benchmarks/gpu_acceptance.py --device cpu --smoke --equal-rows    # CI smoke
    QUADRANTS_DATA=DATA PYTHONPATH=. python benchmarks/gpu_acceptance.py --layers 12 --plan-only

What it builds and runs (on the GPU machine: one H100 80 GB, torch + CUDA, transformers, nothing
downloadable; it needs torch and transformers only, no Hydra, OmegaConf, MLflow or math-verify):

- a Qwen2.5-7B-shaped model (the shipped config.json of Qwen2.5-Math-7B: hidden 3584, MLP 18944,
  28 query / 4 key-value heads, vocabulary 152,064, untied head) cut to `--layers` (2) decoder
  layers, random weights built on the device;
- bf16-mixed: fp32 parameters and AdamW states, bf16 compute (FSDP2 `MixedPrecisionPolicy(
  param_dtype=bfloat16, reduce_dtype=float32)`), FSDP2 over one rank (nccl, world 1; gloo on CPU);
- activation checkpointing (HF's non-reentrant), the fused LM head (ops/fused_head.py, through the
  library's policy forward in models/policy.py);
- the rows of one mini-batch (below), dealt to micro-batches of at most `--micro-batch-tokens`
  tokens by the trainer's own packing (train/micro_batches.py), gradients accumulated: padded (the
  default, train.attention_layout=padded), a micro-batch costs rows x its longest row, each prompt
  left-padded to the step's widest and the micro-batch cut after its longest response (as the
  trainer runs a micro-batch); `--packed` (train.attention_layout=packed), a micro-batch is its
  rows' real tokens end to end (ops/packing.py) and costs their sum;
- one warm-up step (allocates the AdamW states), then `--steps` timed steps at lr 1e-6.

The rows. By default real lengths: a DeepScaleR-shaped step drawn as benchmarks/padding_fraction.py
draws it (benchmarks/deepscaler_lengths.py: `--prompts` DeepScaleR problems from the data home x
`--group` responses, prompt tokens counted by `--tokenizer`, response lengths log-normal with median
`--median`, log-sd `--sigma`, cut at `--max-new-tokens`, one generator seeded `--seed`), shuffled
as the trainer deals rows to mini-batches; the timed mini-batch is the first `--rows` rows of that
order, every prompt left-padded to the whole step's widest. Without the problems in the data home
($QUADRANTS_DATA) it says so and stops. `--equal-rows`: the synthetic rows of earlier runs instead,
`--rows` rows of `--seq-len` tokens, the last `--response` of them the response.

The no-grad pass (`--gradless-pass`). Where a mini-batch is split into more than one micro-batch,
train/update.py `backward_minibatch` runs a no-grad forward over every row first, for an objective
that does not decompose over rows (Clip-Cov, KL-Cov, KTAE, STEER, ...); a decomposable one (DAPO,
GRPO: the quadrant study) skips it (`backward_by_rows`). By default the script times the skipped
path; `--gradless-pass` adds that forward: every row, without grad, in groups of at most
`--forward-tokens` tokens (train.forward_tokens; default the micro-batch budget) dealt as the
trainer deals them. It is the same forward as the update's (the script's loss, not an objective's),
so it measures the pass's cost, not an objective's.

`--attention` sets the trained model's attention kernel (model.attention: `sdpa`, the default,
`flex_attention`, `flash_attention_2` where flash-attn is installed, `eager`). The plan traces
what the trainer's plan traces for that kernel: flash_attention_2 without the N x N mask
(memory/trace.py `varlen`), the others as SDPA. For flex attention, which holds no N x N mask
either, the packed plan is then an over-estimate (with eager, which keeps every layer's scores,
an under-estimate), and the plan check may say OFF.

With `--lora-rank R` the step is the trainer's LoRA step instead (models/lora.py, the 1-GPU
presets): peft adapters of rank R (alpha 2R) on every linear layer but the head, the frozen base
linears stored in bf16 and the adapters in float32 (ops/precision.py `store_frozen_linears`, as
the trainer stores them), one process without FSDP (the trainer trains LoRA unsharded), fused AdamW
over the adapters only; the plan traces the same (TraceSpec.lora), and the watched weight is layer
0's q_proj `lora_B`. It needs peft.

It prints one table: the measured peak (`torch.cuda.max_memory_allocated` over the timed steps;
on the CPU, torch's MemTracker on the real tensors) against the memory plan for the same shapes
(quadrants/memory: the same micro-batches traced on fake tensors, no GPU involved; deeper than 3
layers, traced at 2 and 3 layers and extrapolated, as `python -m quadrants.plan` plans a full
model), the padding fraction of the timed mini-batch in both layouts, throughput and MFU, and the
fraction of one weight matrix that the lr 1e-6 update changed. Throughput counts *useful* tokens:
each row's real prompt tokens + real response tokens (padding not credited; verl counts the same,
the attention mask summed per row: volcengine/verl, verl/trainer/ppo/ray_trainer.py
`global_token_num`), per second of the timed steps, optimizer step included. MFU: the training
FLOPs of those useful tokens per second against `--peak-tflops`, with the FLOP model of earlier
runs per row: 6 x the matmul parameters per token plus attention's 12 x layers x hidden x the
row's own length per token (`flops_per_token`; the checkpointing recompute, the fused head's
recompute and the no-grad pass are not credited). "padding credited" is the same model over every
token the layout computes (padded: rows x the micro-batch's width). With `--equal-rows` every
figure is the earlier runs' (no padding: useful = computed). The last line is PASS or FAIL: PASS
when the plan is within `--tolerance` of the measured peak and the update moved at least 99 % of
the weights. `--out` writes every figure as JSON.

`--plan-only` prints the lines that need no device (the rows, the batch, its padding in both
layouts, the no-grad pass and the plan) and stops: the padding arithmetic of the GPU command's
batch, on the CPU, without building the model.

What only a GPU can show: every time, throughput and MFU figure (on the CPU they time the CPU's
SDPA, which does the full N x N work of a packed micro-batch, and MFU is not printed), the peak
against the caching allocator, and what packing and the skipped pass buy on the real kernels.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from deepscaler_lengths import add_length_arguments, draw_rows, require_data_file

from quadrants.memory.architecture import shipped_config
from quadrants.memory.peaks import TRACED_DEPTH, extrapolate
from quadrants.memory.trace import (
    GiB,
    LoraSpec,
    TraceSpec,
    build_model,
    frozen_aware_mem_tracker,
    policy_loss,
    trace_step,
)
from quadrants.models.loading import FLASH
from quadrants.models.lora import apply_lora, trainable_parameters
from quadrants.ops.packing import lengths_mask
from quadrants.ops.precision import resolve_precision, store_frozen_linears
from quadrants.train.micro_batches import pack_by_tokens as library_packing

# model.attention choices the script takes (transformers' attn_implementation names)
ATTENTION = ("sdpa", "flex_attention", "flash_attention_2", "eager")

# bf16 dense tensor-core peak of an H100 SXM (NVIDIA's datasheet, without sparsity)
H100_BF16_TFLOPS = 989.0


# --smoke: a model of the same structure, narrow enough for a CI CPU in seconds, and short rows;
# options given on the command line win
SMOKE = dict(seq_len=96, response=64, micro_batch_tokens=200, chunk_size=32, steps=1)
SMOKE_EQUAL = dict(rows=6)
SMOKE_REAL = dict(
    rows=6, prompts=8, group=2, median=24.0, max_new_tokens=64, micro_batch_tokens=320
)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--smoke", action="store_true", help="a narrow model and short rows (CI)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--rows", type=int, default=8, help="rows per mini-batch")
    p.add_argument(
        "--equal-rows",
        action="store_true",
        help="synthetic rows of --seq-len tokens (earlier runs) instead of DeepScaleR lengths",
    )
    p.add_argument("--seq-len", type=int, default=4096, help="--equal-rows: tokens per row")
    p.add_argument("--response", type=int, default=3072, help="--equal-rows: response tokens")
    add_length_arguments(p)
    p.add_argument("--micro-batch-tokens", type=int, default=16384)
    p.add_argument(
        "--gradless-pass",
        action="store_true",
        help="run the no-grad pass over every row that a non-decomposable objective runs",
    )
    p.add_argument(
        "--forward-tokens", type=int, default=0, help="the no-grad pass's budget (0: the update's)"
    )
    p.add_argument("--chunk-size", type=int, default=256, help="the fused head's rows per chunk")
    p.add_argument("--steps", type=int, default=2, help="timed steps after the warm-up")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--peak-tflops", type=float, default=H100_BF16_TFLOPS)
    p.add_argument("--tolerance", type=float, default=0.15)
    p.add_argument("--no-checkpointing", action="store_true")
    p.add_argument(
        "--lora-rank", type=int, default=0, help="LoRA adapters of this rank; 0 = full, FSDP2"
    )
    p.add_argument(
        "--packed", action="store_true", help="train.attention_layout=packed: rows as one sequence"
    )
    p.add_argument(
        "--plan-only",
        action="store_true",
        help="print the batch's padding and the plan, then stop (no model, no device)",
    )
    p.add_argument(
        "--attention",
        default="sdpa",
        choices=ATTENTION,
        help="the trained model's attention kernel (model.attention), planned as the trainer does",
    )
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.smoke:
        p.set_defaults(**{**SMOKE, **(SMOKE_EQUAL if args.equal_rows else SMOKE_REAL)})
        args = p.parse_args(argv)
    return args


def model_config(args: argparse.Namespace):
    config = shipped_config("qwen2.5-math-7b.json")
    if args.smoke:
        for key, value in dict(
            hidden_size=128,
            intermediate_size=256,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=1024,
        ).items():
            setattr(config, key, value)
    return config


def pack_by_tokens(lengths: list[int], budget: int, packed: bool = False) -> list[list[int]]:
    """Row indices packed into micro-batches of at most `budget` tokens, padding counted (a
    micro-batch costs rows x its longest row; `packed`: the sum of its rows), as the trainer packs
    them (train/micro_batches.py: rows in order of length; a row longer than the budget alone)."""
    return library_packing(lengths, budget, packed=packed)


def shard(model: torch.nn.Module, device: torch.device, checkpointing: bool) -> torch.nn.Module:
    """FSDP2 over the one-rank group through the library's own `shard_model`, bf16-mixed."""
    from quadrants.distributed.collectives import current, shard_model

    precision = resolve_precision("bf16-mixed", device)
    return shard_model(
        model, current(), precision=precision, activation_checkpointing=checkpointing, device=device
    )


def flops_per_token(
    config, layers: int, seq_len: int, parameters: int, adapters: int | None = None
) -> float:
    """Training FLOPs per token: 6 x the matmul parameters (everything but the input embedding)
    plus attention's 12 x layers x hidden x seq_len (forward QK^T and AV, x3 for backward). Under
    LoRA (`adapters` trainable elements) the frozen base needs no weight gradient: 4 x its matmul
    parameters (forward, input gradient) + 6 x the adapters'."""
    embedding = int(config.vocab_size) * int(config.hidden_size)
    attention = 12.0 * layers * int(config.hidden_size) * seq_len
    if adapters is None:
        return 6.0 * (parameters - embedding) + attention
    return 4.0 * (parameters - embedding) + 6.0 * adapters + attention


def lora_spec(args: argparse.Namespace) -> LoraSpec | None:
    """verl's LoRA recipe as the trainer's defaults (config.py LoraConfig): alpha = 2 x rank,
    every linear layer but the head, no dropout."""
    if not args.lora_rank:
        return None
    return LoraSpec(rank=args.lora_rank, alpha=2.0 * args.lora_rank, target_modules="all-linear")


@dataclass(frozen=True)
class Rows:
    """The timed mini-batch: each row's real prompt and response tokens, the step's widest prompt
    P (every prompt is left-padded to it) and how the rows were made."""

    prompts: list[int]
    responses: list[int]
    prompt_width: int
    source: str

    @property
    def useful(self) -> int:
        """Real prompt + response tokens (padding not counted)."""
        return sum(self.prompts) + sum(self.responses)

    def budget_lengths(self, packed: bool) -> list[int]:
        """Each row's length as the token budget counts it (train/micro_batches.py `row_lengths`):
        padded, P + its response; packed, its real tokens."""
        if packed:
            return [p + r for p, r in zip(self.prompts, self.responses, strict=True)]
        return [self.prompt_width + r for r in self.responses]

    def computed(self, groups: list[list[int]], packed: bool) -> int:
        """Tokens the micro-batches `groups` compute: padded, rows x the widest row of each;
        packed, their rows' real tokens."""
        lengths = self.budget_lengths(packed)
        if packed:
            return sum(lengths[i] for g in groups for i in g)
        return sum(len(g) * max(lengths[i] for i in g) for g in groups)

    def lengths(self, group: list[int]) -> tuple[tuple[int, int], ...]:
        return tuple((self.prompts[i], self.responses[i]) for i in group)


def timed_rows(args: argparse.Namespace) -> Rows:
    """The mini-batch to time (module docstring): `--equal-rows`, or the first `--rows` rows of a
    drawn DeepScaleR-shaped step; without the problems in the data home it stops, saying so."""
    if args.equal_rows:
        if not 0 < args.response < args.seq_len:
            sys.exit(f"gpu_acceptance: --response must be in 1..{args.seq_len - 1}")
        prompt = args.seq_len - args.response
        source = f"equal rows: {args.rows} x {args.seq_len} tokens ({args.response} response)"
        return Rows([prompt] * args.rows, [args.response] * args.rows, prompt, source)
    path = require_data_file(
        "gpu_acceptance", "Or time the synthetic rows of earlier runs with --equal-rows."
    )
    drawn = draw_rows(args, path)
    if not 0 < args.rows <= len(drawn.order):
        sys.exit(f"gpu_acceptance: --rows {args.rows}: the step has {len(drawn.order)} rows")
    chosen = drawn.order[: args.rows]
    return Rows(
        [drawn.prompts[i] for i in chosen],
        [drawn.responses[i] for i in chosen],
        max(drawn.prompts),  # the step's widest (train/blocks.py concat_rollouts)
        f"the first {args.rows} shuffled rows of {drawn.describe(args)}",
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available() and not args.plan_only:
        sys.exit(
            "gpu_acceptance: --device cuda but CUDA is not available (use --device cpu --smoke)"
        )
    checkpointing = not args.no_checkpointing
    config = model_config(args)
    rows = timed_rows(args)
    budget = args.micro_batch_tokens
    micro_batches = pack_by_tokens(rows.budget_lengths(args.packed), budget, packed=args.packed)
    valued: list[list[int]] = []  # the no-grad pass's groups (train/update.py backward_minibatch)
    if args.gradless_pass and len(micro_batches) > 1:
        forward = args.forward_tokens or budget
        valued = pack_by_tokens(rows.budget_lengths(args.packed), forward, packed=args.packed)
    rows_per_micro_batch = max(len(b) for b in micro_batches)

    # 1. the plan for these shapes: fake tensors, a fake process group of one rank, no device
    spec = TraceSpec(
        config,
        layers=args.layers,
        seq_len=rows.prompt_width + max(rows.responses),
        response_tokens=max(rows.responses),
        update_rows=rows_per_micro_batch,
        forward_rows=rows_per_micro_batch,
        precision="bf16-mixed",
        world_size=1,
        sharded=not args.lora_rank,  # the trainer trains LoRA in one process
        checkpointing=checkpointing,
        chunk_size=args.chunk_size,
        micro_batches=min(2, len(micro_batches)),
        lora=lora_spec(args),
        packed=args.packed,
        varlen=args.attention in FLASH,  # as memory/check.py plans model.attention
        # unequal rows: every micro-batch traced as it runs (equal ones: two, as the trainer's plan)
        rows=None if args.equal_rows else tuple(rows.lengths(b) for b in micro_batches),
    )
    started = time.perf_counter()
    if args.layers > TRACED_DEPTH + 1:  # as `python -m quadrants.plan` plans a deep model
        shallow = [replace(spec, layers=n) for n in (TRACED_DEPTH, TRACED_DEPTH + 1)]
        planned = extrapolate(*map(trace_step, shallow), args.layers, TRACED_DEPTH)
    else:
        planned = trace_step(spec)
    plan_seconds = time.perf_counter() - started
    plan_peak = max(planned.update.total, planned.optimizer.total)
    figures = batch_figures(args, rows, micro_batches, valued, spec)
    figures.update(
        layers=args.layers,
        planned_parameters=planned.parameters,
        plan_peak_gib=plan_peak / GiB,
        plan_update_gib=planned.update.total / GiB,
        plan_optimizer_gib=planned.optimizer.total / GiB,
        plan_seconds=plan_seconds,
    )
    if args.plan_only:  # the batch's arithmetic and the plan: no model, no device
        print(report(args, figures))
        write(args.out, figures)
        return 0

    # 2. the real thing
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        figures.update(run(args, config, device, checkpointing, rows, micro_batches, valued, spec))
    finally:
        dist.destroy_process_group()
    figures["plan_over_measured"] = plan_peak / max(figures["measured_peak_bytes"], 1)
    figures["plan_ok"] = abs(figures["plan_over_measured"] - 1) <= args.tolerance
    figures["weights_ok"] = figures["weights_changed"] >= 0.99
    figures["passed"] = figures["plan_ok"] and figures["weights_ok"]
    print(report(args, figures))
    write(args.out, figures)
    return 0 if figures["passed"] else 1


def write(out: Path | None, figures: dict) -> None:
    """Every figure as JSON at `out` (nothing when None)."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(figures, indent=2, default=str) + "\n")


def step_flops(
    config, layers: int, parameters: int, widths: list[int], adapters: int | None = None
) -> float:
    """Training FLOPs of rows of `widths` tokens each: sum of width x `flops_per_token` at that
    width (each token's attention term reads its own row's length)."""
    return sum(w * flops_per_token(config, layers, w, parameters, adapters) for w in widths)


def batch_figures(args, rows: Rows, micro_batches: list[list[int]], valued, spec) -> dict:
    """What the timed mini-batch is, before anything runs: its rows, the tokens it computes and
    its padding in both layouts, and the no-grad pass."""
    computed = rows.computed(micro_batches, args.packed)
    return dict(
        rows=len(rows.prompts),
        row_source=rows.source,
        equal_rows=args.equal_rows,
        prompt_lengths=rows.prompts,
        response_lengths=rows.responses,
        prompt_width=rows.prompt_width,
        seq_len=spec.seq_len,
        packed=args.packed,
        attention=args.attention,
        micro_batch_tokens=args.micro_batch_tokens,
        micro_batches=len(micro_batches),
        gradless_pass=args.gradless_pass,
        gradless_forwards=len(valued),
        gradless_tokens=rows.computed(valued, args.packed) if valued else 0,
        useful_tokens=rows.useful,
        computed_tokens=computed,
        padding_fraction=1 - rows.useful / computed,
        **layout_figures(rows, args.micro_batch_tokens),
    )


def layout_figures(rows: Rows, budget: int) -> dict:
    """Tokens computed and the padding fraction of the rows in each layout under `budget`."""
    out = {}
    for name, packed in (("padded", False), ("packed", True)):
        groups = pack_by_tokens(rows.budget_lengths(packed), budget, packed=packed)
        computed = rows.computed(groups, packed)
        out[f"{name}_micro_batches"] = len(groups)
        out[f"{name}_computed_tokens"] = computed
        out[f"{name}_padding_fraction"] = 1 - rows.useful / computed
    return out


def run(args, config, device, checkpointing, rows, micro_batches, valued, spec) -> dict:
    torch.manual_seed(0)
    with torch.device(device):
        model = build_model(config, args.layers, torch.float32)
    if args.attention != "sdpa":  # as models/loading.py switches a loaded model's kernel
        model.set_attn_implementation(args.attention)
    parameters = sum(p.numel() for p in model.parameters())
    adapters = None
    if args.lora_rank:
        model, optimizer = with_lora(model, lora_spec(args), device, checkpointing, args.lr)
        adapters = sum(p.numel() for p in trainable_parameters(model))
        watched = next(
            p for n, p in model.named_parameters() if "layers.0.self_attn.q_proj.lora_B" in n
        )
    else:
        model = shard(model, device, checkpointing)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)  # foreach over DTensors
        watched = model.model.layers[0].self_attn.q_proj.weight
    model.train()
    vocab = int(config.vocab_size)
    width = spec.seq_len  # P + the longest response
    generator = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, vocab, (len(rows.prompts), width), generator=generator).to(device)
    mask = lengths_mask(rows.prompts, rows.responses, rows.prompt_width, spec.response_tokens)
    mask = mask.to(device)
    responses = sum(rows.responses)

    autocast = resolve_precision("bf16-mixed", device).autocast  # as the trainer's forwards run

    def loss_of(batch: list[int]) -> torch.Tensor:
        """The micro-batch's loss, cut after its longest response, weighted by its share of the
        mini-batch's response tokens (a token mean over the mini-batch)."""
        index = torch.tensor(batch, device=device)
        cut = rows.prompt_width + max(rows.responses[i] for i in batch)
        lengths = None if args.equal_rows else rows.lengths(batch)
        with autocast(device):
            loss = policy_loss(model, ids[index, :cut], mask[index, :cut], spec, lengths)
        return loss * (sum(rows.responses[i] for i in batch) / responses)

    def step(after_micro_batch=lambda: None) -> None:
        with torch.no_grad():  # a non-decomposable objective's pass over every row
            for batch in valued:
                loss_of(batch)
                after_micro_batch()
        for batch in micro_batches:
            loss_of(batch).backward()
            after_micro_batch()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: the AdamW states now exist, as at every later step
    synchronize(device)
    before = local(watched).detach().clone()
    measured, seconds = measure(
        step, args.steps, device, model, optimizer, sharded=not args.lora_rank
    )
    after = local(watched).detach()
    changed = (after != before).float().mean().item()
    flops = partial(step_flops, config, args.layers, parameters, adapters=adapters)
    useful_flops = flops([p + r for p, r in zip(rows.prompts, rows.responses, strict=True)])
    lengths = rows.budget_lengths(args.packed)
    computed = rows.computed(micro_batches, args.packed)
    if args.packed:
        computed_flops = useful_flops  # nothing but real tokens
    else:  # every row of a micro-batch as wide as its widest
        computed_flops = flops([max(lengths[i] for i in b) for b in micro_batches for _ in b])
    peak = args.peak_tflops * 1e12 if device.type == "cuda" else math.nan
    return dict(
        device=(
            torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else f"cpu ({platform.machine()}, {os.cpu_count()} cores)"
        ),
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
        python=platform.python_version(),
        layers=args.layers,
        parameters=parameters,
        lora_rank=args.lora_rank,
        adapters=adapters,
        checkpointing=checkpointing,
        lr=args.lr,
        steps=args.steps,
        measured_peak_bytes=measured,
        measured_peak_gib=measured / GiB,
        reserved_peak_gib=(
            torch.cuda.max_memory_reserved(device) / GiB if device.type == "cuda" else math.nan
        ),
        seconds_per_step=seconds / args.steps,
        tokens_per_s=args.steps * rows.useful / seconds,  # useful tokens
        computed_tokens_per_s=args.steps * computed / seconds,
        mfu=args.steps * useful_flops / seconds / peak,  # useful tokens' FLOPs
        computed_mfu=args.steps * computed_flops / seconds / peak,
        weights_changed=changed,
    )


def with_lora(model, lora: LoraSpec, device: torch.device, checkpointing: bool, lr: float):
    """`model` with the trainer's LoRA set-up in one process: adapters in float32, the frozen base
    linears cast to bf16 in place (run/build.py `prepare_policy` via ops/precision.py), the
    trainer's checkpointing (`shard_model` without a group changes nothing else), and fused AdamW
    over the adapters (run/build.py `fused_optimizer_applies`)."""
    from quadrants.distributed.collectives import DistEnv, shard_model

    precision = resolve_precision("bf16-mixed", device)
    apply_lora(model, lora)
    store_frozen_linears(model, precision)
    one = DistEnv(rank=0, world_size=1, local_rank=0, sharded=False)
    model = shard_model(
        model, one, precision=precision, activation_checkpointing=checkpointing, device=device
    )
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=lr, fused=True)
    return model, optimizer


def local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard, or the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    step, steps: int, device: torch.device, model, optimizer, sharded: bool = True
) -> tuple[int, float]:
    """(peak bytes over `steps` steps, seconds). CUDA: the caching allocator's
    max_memory_allocated; CPU: FSDPMemTracker (sharded) or the plan's frozen-aware MemTracker
    (LoRA, one process) on the real tensors."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device), time.perf_counter() - started
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    if sharded:
        tracker = FSDPMemTracker(model, optimizer)
    else:
        tracker = frozen_aware_mem_tracker()
        tracker.track_external(model, optimizer)
    started = time.perf_counter()
    with tracker:
        for _ in range(steps):
            step(tracker.reset_mod_stats)  # per-module stats only; the peak stays
    seconds = time.perf_counter() - started
    peak = sum(
        int(v)
        for snap in tracker.get_tracker_snapshot("peak").values()
        for k, v in snap.items()
        if str(k) == "Total"
    )
    return peak, seconds


def report(args, f: dict) -> str:
    """The printed table; under `--plan-only` the lines about the batch and the plan alone."""
    ran = "measured_peak_gib" in f
    parameters = f["parameters"] if ran else f["planned_parameters"]
    rows = [
        ("device", f["device"] if ran else "none (--plan-only)"),
        (
            "torch / transformers / python",
            f"{torch.__version__} / "
            f"{__import__('transformers').__version__} / {platform.python_version()}",
        ),  # fmt: skip
        ("model", f"Qwen2.5-7B-shaped, {f['layers']} layers, {parameters / 1e9:.3f} B params"),
        ("rows", f["row_source"]),
        (
            "batch",
            f"{f['rows']} rows, {f['useful_tokens']:,} useful tokens (prompt width "
            f"{f['prompt_width']}, longest row {f['seq_len']}); "
            + ("packed" if f["packed"] else "padded")
            + f", {f['micro_batches']} micro-batches of <= {f['micro_batch_tokens']} tokens, "
            + f"attention {f['attention']}",
        ),
        (
            "padding",
            f"padded {f['padded_padding_fraction']:.1%} of {f['padded_computed_tokens']:,} tokens "
            f"({f['padded_micro_batches']} micro-batches), packed "
            f"{f['packed_padding_fraction']:.1%} of {f['packed_computed_tokens']:,} "
            f"({f['packed_micro_batches']}); timed: " + ("packed" if f["packed"] else "padded"),
        ),
        (
            "no-grad pass",
            (
                f"run: every row without grad first, {f['gradless_forwards']} forwards of "
                f"{f['gradless_tokens']:,} tokens (an objective that does not decompose)"
                if f["gradless_forwards"]
                else "skipped (a decomposable objective)"
                if not f["gradless_pass"]
                else "none: one micro-batch (the trainer runs none either)"
            ),
        ),
    ]
    if not ran:
        rows.append(("plan peak (GiB)", plan_line(f)))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
    rows += [
        (
            "precision / sharding",
            (
                f"bf16-mixed, LoRA rank {f['lora_rank']} ({f['adapters'] / 1e6:.1f} M adapters, "
                "bf16 base), one process"
                if f["lora_rank"]
                else "bf16-mixed, FSDP2 world 1"
            )
            + ", checkpointing "
            + ("on" if f["checkpointing"] else "off")
            + ", fused head",
        ),
        ("measured peak (GiB)", f"{f['measured_peak_gib']:.2f}"),
        ("plan peak (GiB)", plan_line(f)),
        (
            "plan / measured",
            f"{f['plan_over_measured']:.3f}  (tolerance {args.tolerance:.0%}): "
            + ("ok" if f["plan_ok"] else "OFF"),
        ),
        ("seconds per step", f"{f['seconds_per_step']:.3f}"),
        ("useful tokens/s", f"{f['tokens_per_s']:.0f}  (real prompt + response tokens)"),
        ("computed tokens/s", f"{f['computed_tokens_per_s']:.0f}  (padding included)"),
        (
            "useful MFU",
            "n/a (CPU)"
            if math.isnan(f["mfu"])
            else f"{f['mfu']:.1%} of {args.peak_tflops:g} TFLOP/s",
        ),
        (
            "MFU, padding credited",
            "n/a (CPU)" if math.isnan(f["computed_mfu"]) else f"{f['computed_mfu']:.1%}",
        ),
        (
            f"weights moved at lr {f['lr']:g}",
            f"{f['weights_changed']:.2%} of layer 0 q_proj"
            + (" lora_B: " if f["lora_rank"] else ": ")
            + ("ok" if f["weights_ok"] else "TOO FEW"),
        ),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append("PASS" if f["passed"] else "FAIL")
    return "\n".join(lines)


def plan_line(f: dict) -> str:
    return (
        f"{f['plan_peak_gib']:.2f}  (update {f['plan_update_gib']:.2f}, "
        f"optimizer step {f['plan_optimizer_gib']:.2f}; "
        + (
            f"traced at {TRACED_DEPTH} and {TRACED_DEPTH + 1} layers, extrapolated"
            if f["layers"] > TRACED_DEPTH + 1
            else "traced whole"
        )
        + f", in {f['plan_seconds']:.1f} s"
        + (
            ")"
            if f["attention"] in ("sdpa", *FLASH)
            else f"; traced with sdpa, not {f['attention']})"
        )
    )


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
