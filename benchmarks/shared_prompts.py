"""The update's forward + backward with a group's prompt computed once, against every row's prompt,
interleaved.

`response_logprobs(..., share_prompts="auto")` (the default: each distinct prompt through the model
once, its cache copied to its G rows) against `share_prompts="never"` (the plain forward over every
row's prompt + response), on the tiny workload's model of benchmarks/vs_trl.py (a random Qwen2,
hidden 256, MLP 688, 4 layers) with 8 prompts x G = 8 x 32 response tokens, for prompts of
`--prompt-lengths` tokens. Prints each median and the ratio (shared / plain).

    python benchmarks/shared_prompts.py [--prompt-lengths 8 64 256] [--rounds 6] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from vs_trl import TINY_SHAPE as VS_TRL_TINY_SHAPE  # benchmarks/ is the script's directory

from quadrants.models.policy import response_logprobs
from quadrants.models.tiny import random_tiny_policy

TINY_SHAPE = dict(VS_TRL_TINY_SHAPE, max_position_embeddings=512)  # prompts up to 256 tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-lengths", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = random_tiny_policy(0, **TINY_SHAPE)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{args.prompts} prompts x G = {args.group} x {args.response_tokens} response tokens, "
        f"{args.threads} threads, {args.rounds} rounds; load average {load}"
    )
    generator = torch.Generator().manual_seed(0)
    for length in args.prompt_lengths:
        prompts = torch.randint(5, 90, (args.prompts, length), generator=generator)
        responses = torch.randint(5, 90, (args.prompts * args.group, args.response_tokens))
        sequences = torch.cat([prompts.repeat_interleave(args.group, 0), responses], dim=1)
        mask = torch.ones_like(sequences, dtype=torch.bool)

        def update(mode: str, sequences=sequences, mask=mask) -> None:
            logp, entropy = response_logprobs(
                model,
                sequences,
                mask,
                args.response_tokens,
                temperature=1.0,
                chunk_size=4096,
                with_entropy=True,
                share_prompts=mode,
            )
            (logp.sum() + 0.1 * entropy.sum()).backward()
            model.zero_grad(set_to_none=True)

        times: dict[str, list[float]] = {"auto": [], "never": []}
        for mode in times:  # warm-up
            update(mode)
        for r in range(args.rounds):
            for mode in ("auto", "never") if r % 2 == 0 else ("never", "auto"):
                start = time.perf_counter()
                update(mode)
                times[mode].append(time.perf_counter() - start)
        shared, plain = statistics.median(times["auto"]), statistics.median(times["never"])
        print(
            f"  prompt {length:4d} tokens: shared {shared * 1000:7.1f} ms   plain "
            f"{plain * 1000:7.1f} ms   shared/plain {shared / plain:.2f}"
        )
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
