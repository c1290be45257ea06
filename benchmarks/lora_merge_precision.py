"""How much of a LoRA update survives when it is merged into bf16 weights for the engine.

The engine (vLLM, `rollout.vllm.dtype=bfloat16`) receives W + delta rounded to bfloat16
(rollout/weights.py `merged_lora_weights`, cast by the push); the trainer's forward under
bf16-mixed computes bf16(W) x + scale * B (A x) with the adapter kept apart, as an engine that
takes the adapters themselves would. Where delta is far below bf16's spacing at W, the merged
weight rounds it away and the engine samples from (nearly) the base while the trainer scores the
adapted policy.

Measured on SmolLM2-135M's trained weights (rounded to bf16 first, as a bf16 checkpoint is;
every q/k/v/o/gate/up/down projection of every layer), with peft's own initialisation for A
(kaiming-uniform, rank 16) and B entries of magnitude `b` with random signs (AdamW moves each
entry by about lr a step, so b ~ lr x steps), scale alpha / r = 2:

- lost: || bf16(W + delta) - bf16(W) - delta || / || delta ||, the part of the update the merged
  push does not deliver (1: all of it lost; 0: all delivered);
- separate: the same for delta computed from bf16(A) and bf16(B) and added in float32 (what an
  adapter path delivers), for comparison.

    python benchmarks/lora_merge_precision.py [--rank 16] [--seed 0]
"""

from __future__ import annotations

import argparse
import math

import torch

from quadrants.models.loading import load_policy

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model, _ = load_policy("smollm2-135m")
    # bf16-exact, as a bf16 checkpoint (Qwen2.5-Math-7B's) read into the trainer's float32 is
    weights = [
        m.weight.detach().bfloat16().float()
        for name, m in model.named_modules()
        if name.rsplit(".", 1)[-1] in PROJECTIONS
    ]
    print(f"{len(weights)} projections of SmolLM2-135M, rank {args.rank}, scale 2")
    header = ("|B| entry", "delta rms", "lost (merged bf16)", "lost (separate)")
    print("  ".join(h.rjust(w) for h, w in zip(header, (10, 10, 18, 15), strict=True)))
    for b in (1e-6, 1e-5, 1e-4, 1e-3, 1e-2):
        gen = torch.Generator().manual_seed(args.seed)
        lost_num = lost_sep = norm = squares = count = 0.0
        for w in weights:
            d_out, d_in = w.shape
            # peft: kaiming_uniform_(A, a=sqrt(5)) on [r, d_in] is U(-1/sqrt(d_in), 1/sqrt(d_in))
            bound = 1 / math.sqrt(d_in)
            a = (torch.rand(args.rank, d_in, generator=gen) * 2 - 1) * bound
            bb = b * torch.sign(torch.randn(d_out, args.rank, generator=gen))
            delta = 2.0 * bb @ a
            merged = (w + delta).bfloat16().float() - w.bfloat16().float()
            separate = 2.0 * bb.bfloat16().float() @ a.bfloat16().float()
            lost_num += (merged - delta).pow(2).sum().item()
            lost_sep += (separate - delta).pow(2).sum().item()
            norm += delta.pow(2).sum().item()
            squares += delta.pow(2).sum().item()
            count += delta.numel()
        print(
            f"{b:>10.0e}  {math.sqrt(squares / count):>10.2e}  "
            f"{math.sqrt(lost_num / norm):>18.3f}  {math.sqrt(lost_sep / norm):>15.4f}"
        )


if __name__ == "__main__":
    main()
