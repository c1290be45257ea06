"""The padding fraction of a DeepScaleR-shaped batch, padded against packed: the arithmetic of the
trainer's forwards, no timing, on the CPU.

Rows: `--prompts` DeepScaleR problems (the data home's `dsr_sub/dsr_sub.jsonl`, a random subset of
DeepScaleR-Preview; `python -m quadrants.data import dsr_sub PATH` brings it, or point
$QUADRANTS_DATA at a data home that has it) in the `deepscaler` prompt format, tokenized by
`--tokenizer` (default: the SmolLM2-135M tokenizer the quadrants cache holds, a stand-in for
DeepScaleR-1.5B's Qwen2 tokenizer, which is not on this machine; without any tokenizer, 4
characters per token), each with `--group`
responses whose lengths are drawn from the stated distribution: log-normal with median
`--median` tokens and log-sd `--sigma`, cut at `--max-new-tokens` (a row that reaches it is
truncated, as in DeepScaleR's 8K stage).

What each layout computes, per mini-batch of `--mini` rows in a shuffled order (the trainer's
train.mini_batch_size), with every prompt left-padded to the step's widest (train/blocks.py
`concat_rollouts`):
- padded, one call: n x (widest prompt + the mini-batch's longest response), train.length_buckets=1;
- padded, length buckets: the default train.length_buckets=4 (ops/length_buckets.py);
- padded, by tokens: micro-batches of at most `--budget` padded tokens (train.micro_batch_tokens,
  train/micro_batches.py), each n x its longest row;
- packed: micro-batches of at most `--budget` real tokens (train.attention_layout=packed), each the
  sum of its rows' real tokens (ops/packing.py): no padding; its fill of the budget is printed.

    QUADRANTS_DATA=/path/to/data python benchmarks/padding_fraction.py [--prompts 128] [--group 8]
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from quadrants.home import default_cache_root, default_data_dir
from quadrants.ops.length_buckets import length_buckets
from quadrants.ops.packing import real_lengths
from quadrants.tasks.prompts import render_prompt
from quadrants.train.micro_batches import pack_for_ranks, row_lengths

DATA = "dsr_sub/dsr_sub.jsonl"


def prompt_lengths(problems: list[str], tokenizer_dir: str | None) -> tuple[list[int], str]:
    """Token counts of the problems in the deepscaler format, and how they were counted."""
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
        texts = [render_prompt(p, format="deepscaler", tokenizer=tokenizer) for p in problems]
        counts = [len(tokenizer(text)["input_ids"]) for text in texts]
        return counts, f"tokenizer {tokenizer_dir}"
    texts = [render_prompt(p, format="plain") for p in problems]
    return [math.ceil(len(text) / 4) for text in texts], "4 characters per token (no tokenizer)"


def response_lengths(rows: int, args: argparse.Namespace, generator: torch.Generator) -> list[int]:
    """Log-normal(log median, sigma) lengths, at least 1, cut at max_new_tokens."""
    normal = torch.randn(rows, generator=generator, dtype=torch.float64)
    drawn = torch.exp(math.log(args.median) + args.sigma * normal).round().long()
    return drawn.clamp(1, args.max_new_tokens).tolist()


def masks(prompts: list[int], responses: list[int], width: int, span: int) -> torch.Tensor:
    """[B, width + span] bool: left-padded prompts, right-padded responses."""
    columns = torch.arange(width + span)
    starts = torch.tensor([width - p for p in prompts])
    ends = torch.tensor([width + r for r in responses])
    return (columns[None] >= starts[:, None]) & (columns[None] < ends[:, None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--mini", type=int, default=256, help="rows per mini-batch")
    parser.add_argument("--budget", type=int, default=32768, help="tokens per micro-batch")
    parser.add_argument("--median", type=float, default=3000.0)
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--max-new-tokens", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=None, help="a local tokenizer directory")
    args = parser.parse_args()
    path = default_data_dir() / DATA
    if not path.is_file():
        print(
            f"no DeepScaleR prompts at {path}: this machine's data home lacks {DATA}. Bring "
            "One-Shot-RLVR's dsr_sub.jsonl with `python -m quadrants.data import dsr_sub PATH`, or "
            "set QUADRANTS_DATA to a data home that has it; nothing computed."
        )
        sys.exit(0)
    tokenizer = args.tokenizer
    smollm2 = default_cache_root() / "models" / "smollm2-135m"
    if tokenizer is None and (smollm2 / "tokenizer.json").is_file():
        tokenizer = str(smollm2)
    problems = [json.loads(line)["problem"] for line in path.read_text().splitlines() if line]
    generator = torch.Generator().manual_seed(args.seed)
    chosen = torch.randperm(len(problems), generator=generator)[: args.prompts].tolist()
    lengths, counted = prompt_lengths([problems[i] for i in chosen], tokenizer)
    prompts = [length for length in lengths for _ in range(args.group)]  # G rows per prompt
    rows = len(prompts)
    responses = response_lengths(rows, args, generator)
    width, span = max(prompts), max(responses)
    mask = masks(prompts, responses, width, span)
    truncated = sum(r == args.max_new_tokens for r in responses) / rows
    print(
        f"{rows} rows ({args.prompts} DeepScaleR prompts from {path} x G = {args.group}); prompt "
        f"tokens by {counted}: median {sorted(lengths)[len(lengths) // 2]}, max {width}; responses "
        f"log-normal(median {args.median:g}, sigma {args.sigma:g}) cut at {args.max_new_tokens}: "
        f"mean {sum(responses) / rows:.0f}, {truncated:.0%} truncated; mini-batches of "
        f"{args.mini} rows, micro-batch budget {args.budget} tokens"
    )
    order = torch.randperm(rows, generator=generator)
    totals = dict.fromkeys(("real", "one call", "length buckets", "by tokens", "packed"), 0)
    micro = {"by tokens": 0, "packed": 0}
    for start in range(0, rows, args.mini):
        index = order[start : start + args.mini]
        part = mask[index]
        real = real_lengths(part, span)  # prompt tokens + response tokens, per row
        padded = row_lengths(part, span)  # widest prompt + the row's response, per row
        totals["real"] += int(real.sum())
        totals["one call"] += len(padded) * max(padded)
        spans = torch.tensor(padded) - width
        buckets = length_buckets(spans, max_buckets=4)
        totals["length buckets"] += sum(len(r) * (width + cut) for r, cut in buckets)
        groups = pack_for_ranks(padded, args.budget, 1)
        totals["by tokens"] += sum(len(g) * max(padded[i] for i in g) for g in groups)
        micro["by tokens"] += len(groups)
        real_list = real.tolist()
        groups = pack_for_ranks(real_list, args.budget, 1, packed=True)
        totals["packed"] += sum(sum(real_list[i] for i in g) for g in groups)
        micro["packed"] += len(groups)
    real = totals["real"]
    print(f"{'layout':<26}{'tokens computed':>16}{'padding':>10}{'micro-batches':>15}")
    for name in ("one call", "length buckets", "by tokens", "packed"):
        computed = totals[name]
        calls = f"{micro[name]}" if name in micro else "-"
        print(f"{'padded, ' + name if name != 'packed' else name:<26}{computed:>16,}"
              f"{1 - real / computed:>10.1%}{calls:>15}")  # fmt: skip
    fill = real / (micro["packed"] * args.budget)
    print(f"real tokens {real:,}; packed micro-batches fill {fill:.1%} of the budget on average")


if __name__ == "__main__":
    main()
