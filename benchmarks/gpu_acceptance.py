"""GPU acceptance: the trainer's cluster path on one GPU, against the memory plan.

    PYTHONPATH=. python benchmarks/gpu_acceptance.py --out gpu_acceptance.json        # one GPU
    PYTHONPATH=. python benchmarks/gpu_acceptance.py --device cpu --smoke             # CI smoke
    PYTHONPATH=. python benchmarks/gpu_acceptance.py --layers 28 --lora-rank 16       # LoRA

What it builds and runs (on the GPU machine: one H100 80 GB, torch + CUDA, transformers, nothing
downloadable; it needs torch and transformers only, no Hydra, OmegaConf, MLflow or math-verify):

- a Qwen2.5-7B-shaped model (the shipped config.json of Qwen2.5-Math-7B: hidden 3584, MLP 18944,
  28 query / 4 key-value heads, vocabulary 152,064, untied head) cut to `--layers` (2) decoder
  layers, random weights built on the device;
- bf16-mixed: fp32 parameters and AdamW states, bf16 compute (FSDP2 `MixedPrecisionPolicy(
  param_dtype=bfloat16, reduce_dtype=float32)`), FSDP2 over one rank (nccl, world 1; gloo on CPU);
- activation checkpointing (HF's non-reentrant), the fused LM head (ops/fused_head.py, through the
  library's policy forward in models/policy.py);
- micro-batches by token budget: `--rows` rows of `--seq-len` tokens packed into micro-batches of
  at most `--micro-batch-tokens` tokens (padding counted), gradients accumulated;
- one warm-up step (allocates the AdamW states), then `--steps` timed steps at lr 1e-6.

With `--lora-rank R` the step is the trainer's LoRA step instead (models/lora.py, the 1-GPU
presets): peft adapters of rank R (alpha 2R) on every linear layer but the head, the frozen base
linears stored in bf16 and the adapters in float32 (ops/precision.py `store_frozen_linears`, as
the trainer stores them), one process without FSDP (the trainer trains LoRA unsharded), fused AdamW
over the adapters only; the plan traces the same (TraceSpec.lora), and the watched weight is layer
0's q_proj `lora_B`. It needs peft.

It prints one table: the measured peak (`torch.cuda.max_memory_allocated` over the timed steps;
on the CPU, torch's MemTracker on the real tensors) against the memory plan for the same shapes
(quadrants/memory: the same step traced on fake tensors, no GPU involved; deeper than 3 layers,
traced at 2 and 3 layers and extrapolated, as `python -m quadrants.plan` plans a full model),
tokens/s and MFU (6 x parameters x tokens plus attention, against `--peak-tflops`; the
checkpointing recompute and the fused head's recompute are not credited), and the fraction of one
weight matrix that the lr 1e-6 update changed. The last line is PASS or FAIL: PASS when the plan is
within `--tolerance` of the measured peak and the update moved at least 99 % of the weights. `--out`
writes every figure as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from quadrants.memory.architecture import shipped_config
from quadrants.memory.plan import TRACED_DEPTH, extrapolate
from quadrants.memory.trace import (
    GiB,
    LoraSpec,
    TraceSpec,
    build_model,
    frozen_aware_mem_tracker,
    policy_loss,
    trace_step,
)
from quadrants.models.lora import apply_lora, trainable_parameters
from quadrants.ops.precision import resolve_precision, store_frozen_linears
from quadrants.train.micro_batches import pack_by_tokens as library_packing

# bf16 dense tensor-core peak of an H100 SXM (NVIDIA's datasheet, without sparsity)
H100_BF16_TFLOPS = 989.0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--smoke", action="store_true", help="a narrow model and short rows (CI)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--rows", type=int, default=8, help="rows per mini-batch")
    p.add_argument("--seq-len", type=int, default=4096, help="tokens per row (prompt + response)")
    p.add_argument("--response", type=int, default=3072, help="response tokens per row")
    p.add_argument("--micro-batch-tokens", type=int, default=16384)
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
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.smoke:  # a model of the same structure, narrow enough for a CI CPU in seconds
        args.rows, args.seq_len, args.response = 6, 96, 64
        args.micro_batch_tokens, args.chunk_size, args.steps = 200, 32, 1
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
    micro-batch costs rows x its longest row; `packed`: the sum of its rows), rows sorted by
    length, longest first; a row longer than the budget goes alone."""
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


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(
            "gpu_acceptance: --device cuda but CUDA is not available (use --device cpu --smoke)"
        )
    checkpointing = not args.no_checkpointing
    config = model_config(args)
    lengths = [args.seq_len] * args.rows
    micro_batches = pack_by_tokens(lengths, args.micro_batch_tokens, packed=args.packed)
    rows_per_micro_batch = max(len(b) for b in micro_batches)

    # 1. the plan for these shapes: fake tensors, a fake process group of one rank, no device
    spec = TraceSpec(
        config,
        layers=args.layers,
        seq_len=args.seq_len,
        response_tokens=args.response,
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
    )
    started = time.perf_counter()
    if args.layers > TRACED_DEPTH + 1:  # as `python -m quadrants.plan` plans a deep model
        shallow = [replace(spec, layers=n) for n in (TRACED_DEPTH, TRACED_DEPTH + 1)]
        planned = extrapolate(*map(trace_step, shallow), args.layers, TRACED_DEPTH)
    else:
        planned = trace_step(spec)
    plan_seconds = time.perf_counter() - started
    plan_peak = max(planned.update.total, planned.optimizer.total)

    # 2. the real thing
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        figures = run(args, config, device, checkpointing, micro_batches, spec)
    finally:
        dist.destroy_process_group()
    figures.update(
        plan_peak_gib=plan_peak / GiB,
        plan_update_gib=planned.update.total / GiB,
        plan_optimizer_gib=planned.optimizer.total / GiB,
        plan_seconds=plan_seconds,
    )
    figures["plan_over_measured"] = plan_peak / max(figures["measured_peak_bytes"], 1)
    figures["plan_ok"] = abs(figures["plan_over_measured"] - 1) <= args.tolerance
    figures["weights_ok"] = figures["weights_changed"] >= 0.99
    figures["passed"] = figures["plan_ok"] and figures["weights_ok"]
    print(report(args, figures))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0 if figures["passed"] else 1


def run(args, config, device, checkpointing, micro_batches, spec) -> dict:
    torch.manual_seed(0)
    with torch.device(device):
        model = build_model(config, args.layers, torch.float32)
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
    generator = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, vocab, (args.rows, args.seq_len), generator=generator).to(device)
    mask = torch.ones(args.rows, args.seq_len, dtype=torch.bool, device=device)

    autocast = resolve_precision("bf16-mixed", device).autocast  # as the trainer's forwards run

    def step(after_micro_batch=lambda: None) -> None:
        for batch in micro_batches:
            rows = torch.tensor(batch, device=device)
            with autocast(device):
                loss = policy_loss(model, ids[rows], mask[rows], spec) * (len(batch) / args.rows)
            loss.backward()
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
    tokens = args.steps * args.rows * args.seq_len
    tokens_per_s = tokens / seconds
    achieved = tokens_per_s * flops_per_token(
        config, args.layers, args.seq_len, parameters, adapters
    )
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
        rows=args.rows,
        seq_len=args.seq_len,
        response_tokens=args.response,
        micro_batch_tokens=args.micro_batch_tokens,
        micro_batches=len(micro_batches),
        checkpointing=checkpointing,
        lr=args.lr,
        steps=args.steps,
        measured_peak_bytes=measured,
        measured_peak_gib=measured / GiB,
        reserved_peak_gib=(
            torch.cuda.max_memory_reserved(device) / GiB if device.type == "cuda" else math.nan
        ),
        seconds_per_step=seconds / args.steps,
        tokens_per_s=tokens_per_s,
        mfu=achieved / (args.peak_tflops * 1e12) if device.type == "cuda" else math.nan,
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
    rows = [
        ("device", f["device"]),
        ("torch / transformers / python", f"{f['torch']} / {f['transformers']} / {f['python']}"),
        ("model", f"Qwen2.5-7B-shaped, {f['layers']} layers, {f['parameters'] / 1e9:.3f} B params"),
        (
            "batch",
            f"{f['rows']} rows x {f['seq_len']} tokens, {f['micro_batches']} micro-batches "
            f"of <= {f['micro_batch_tokens']} tokens",
        ),
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
        (
            "plan peak (GiB)",
            f"{f['plan_peak_gib']:.2f}  (update {f['plan_update_gib']:.2f}, "
            f"optimizer step {f['plan_optimizer_gib']:.2f}; "
            + (
                f"traced at {TRACED_DEPTH} and {TRACED_DEPTH + 1} layers, extrapolated"
                if f["layers"] > TRACED_DEPTH + 1
                else "traced whole"
            )
            + f", in {f['plan_seconds']:.1f} s)",
        ),
        (
            "plan / measured",
            f"{f['plan_over_measured']:.3f}  (tolerance {args.tolerance:.0%}): "
            + ("ok" if f["plan_ok"] else "OFF"),
        ),
        ("seconds per step", f"{f['seconds_per_step']:.3f}"),
        ("tokens/s", f"{f['tokens_per_s']:.0f}"),
        (
            "MFU",
            "n/a (CPU)"
            if math.isnan(f["mfu"])
            else f"{f['mfu']:.1%} of {args.peak_tflops:g} TFLOP/s",
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


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
