"""The padding fraction of a DeepScaleR-shaped batch, padded against packed: the arithmetic of the
trainer's forwards, no timing, on the CPU.

Rows: `--prompts` DeepScaleR problems from the data home, each with `--group` responses of a
stated log-normal length distribution (benchmarks/deepscaler_lengths.py says how they are drawn,
counted and seeded; the defaults are the figures' in docs/performance.md).

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
import sys

import torch
from deepscaler_lengths import add_length_arguments, data_file, draw_rows, missing_data

from quadrants.ops.length_buckets import length_buckets
from quadrants.ops.packing import lengths_mask, real_lengths
from quadrants.train.micro_batches import pack_for_ranks, row_lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mini", type=int, default=256, help="rows per mini-batch")
    parser.add_argument("--budget", type=int, default=32768, help="tokens per micro-batch")
    add_length_arguments(parser)
    args = parser.parse_args()
    path = data_file()
    if not path.is_file():
        print(missing_data(path) + "; nothing computed.")
        sys.exit(0)
    drawn = draw_rows(args, path)
    prompts, responses = drawn.prompts, drawn.responses
    rows = len(prompts)
    width, span = max(prompts), max(responses)
    mask = lengths_mask(prompts, responses, width, span)
    print(
        f"{drawn.describe(args)}; mini-batches of {args.mini} rows, micro-batch budget "
        f"{args.budget} tokens"
    )
    order = torch.tensor(drawn.order)
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
