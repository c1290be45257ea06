"""The update's forward + backward, packed rows against padded ones, on the CPU, interleaved.

`response_logprobs(..., layout="packed")` (train.attention_layout=packed: one sequence of the rows'
real tokens) against `layout="padded"` with the default 4 length buckets, over one rollout the tiny
model samples itself (benchmarks/common.py), its prompts left-padded to the widest. Prints the
tokens each computes and the median time of each over `--rounds` interleaved rounds, and the ratio.

    python benchmarks/packed_update.py [--prompts 8] [--group 8] [--new-tokens 32] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from common import sampled_rollout  # benchmarks/ is the script's directory
from decode_paths import load

from quadrants.models.policy import response_logprobs
from quadrants.ops.packing import pack_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model)
    rollout = sampled_rollout(
        model,
        tokenizer,
        prompts=args.prompts,
        group=args.group,
        new_tokens=args.new_tokens,
        seed=args.seed,
    )
    sequences = torch.cat([rollout.prompt_ids, rollout.tokens], dim=1)
    mask = torch.cat([rollout.prompt_mask, rollout.response_mask], dim=1)
    length = rollout.tokens.shape[1]
    packed_tokens = pack_rows(sequences, mask, length).input_ids.shape[1]
    print(
        f"{args.model}: {sequences.shape[0]} rows of [{sequences.shape[1]}] padded, "
        f"{packed_tokens} tokens packed; {args.threads} threads; load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )

    def update(layout: str) -> float:
        start = time.perf_counter()
        logp, entropy = response_logprobs(
            model, sequences, mask, length, temperature=1.0, chunk_size=256,
            with_entropy=True, layout=layout,
        )  # fmt: skip
        response = rollout.response_mask
        (-(logp * response).sum() - 0.01 * (entropy * response).sum()).backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    update("packed"), update("padded")  # warm-up
    times: dict[str, list[float]] = {"packed": [], "padded": []}
    for _ in range(args.rounds):
        for layout in times:
            times[layout].append(update(layout))
    packed, padded = (statistics.median(times[k]) * 1e3 for k in ("packed", "padded"))
    print(f"packed {packed:.1f} ms, padded (4 buckets) {padded:.1f} ms: {packed / padded:.2f}")


if __name__ == "__main__":
    main()
