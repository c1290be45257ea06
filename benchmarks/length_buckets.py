"""The update's forward + backward with responses in length buckets, against one call over the
padded batch, interleaved.

`response_logprobs(..., max_buckets=4)` (the default `train.length_buckets`: rows sorted by
response length and split where that saves at least 1/16 of the padded positions, each bucket cut
after its longest row's last token) against `max_buckets=1` (one call, cut after the batch's last
token). The responses are sampled by the HF engine's decode from the model itself, so their
lengths are those of a real rollout of it: `--model tiny` is the tiny workload's random Qwen2 of
benchmarks/vs_trl.py, `--model smollm2` SmolLM2-135M. Prints the buckets, the share of positions
computed, each median and the ratio (buckets / one call). With `--micro M`, also the update as
micro-batches of M rows (`train.micro_batch_size`, each micro-batch's forward with buckets), the
rows dealt by response length (what quadrants/train/update.py `backward_minibatch` does) against
dealt in row order.

    python benchmarks/length_buckets.py [--model tiny] [--rounds 6] [--threads 2] [--micro 8]
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
from quadrants.ops.length_buckets import length_buckets, response_spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--micro", type=int, default=0, help="micro-batch rows (0: skip)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model)
    load_now = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{args.model}: {args.prompts} prompts x G = {args.group}, up to {args.new_tokens} tokens; "
        f"{args.threads} threads, {args.rounds} rounds per rollout; load average {load_now}"
    )
    for seed in args.seeds:  # one rollout per seed: the length spread is the rollout's own
        rollout = sampled_rollout(
            model,
            tokenizer,
            prompts=args.prompts,
            group=args.group,
            new_tokens=args.new_tokens,
            seed=seed,
        )
        prompt_ids, prompt_mask = rollout.prompt_ids, rollout.prompt_mask
        tokens, response_mask = rollout.tokens, rollout.response_mask
        compare(model, prompt_ids, prompt_mask, tokens, response_mask, seed, args.rounds)
        if args.micro:
            compare_micro(model, prompt_ids, prompt_mask, tokens, response_mask, args)
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def compare(model, prompt_ids, prompt_mask, tokens, response_mask, seed: int, rounds: int) -> None:
    """Time forward + backward over one rollout, buckets (4) against one call, interleaved."""
    sequences = torch.cat([prompt_ids, tokens], dim=1)
    mask = torch.cat([prompt_mask, response_mask], dim=1)
    length = tokens.shape[1]
    buckets = length_buckets(response_spans(response_mask), max_buckets=4)
    computed = sum(len(rows) * cut for rows, cut in buckets) / (sequences.shape[0] * length)

    def update(max_buckets: int) -> None:
        logp, entropy = response_logprobs(
            model,
            sequences,
            mask,
            length,
            temperature=1.0,
            chunk_size=4096,
            with_entropy=True,
            max_buckets=max_buckets,
        )
        response = mask[:, -length:]
        ((logp * response).sum() + 0.1 * (entropy * response).sum()).backward()
        model.zero_grad(set_to_none=True)

    times: dict[int, list[float]] = {4: [], 1: []}
    for option in times:  # warm-up
        update(option)
    for r in range(rounds):
        for option in (4, 1) if r % 2 == 0 else (1, 4):
            start = time.perf_counter()
            update(option)
            times[option].append(time.perf_counter() - start)
    bucketed, single = statistics.median(times[4]), statistics.median(times[1])
    print(
        f"  rollout {seed}: real tokens {response_mask.float().mean():.2f} of B x T; buckets "
        f"(rows, length) {[(len(rows), cut) for rows, cut in buckets]}: {computed:.2f} of the "
        f"positions; buckets {bucketed * 1000:.1f} ms, one call {single * 1000:.1f} ms, "
        f"buckets/one {bucketed / single:.2f}"
    )


def compare_micro(model, prompt_ids, prompt_mask, tokens, response_mask, args) -> None:
    """Forward + backward of every micro-batch of `args.micro` rows, dealt by length against in
    row order (the rollout's order: a group's G rows side by side), interleaved."""
    sequences = torch.cat([prompt_ids, tokens], dim=1)
    mask = torch.cat([prompt_mask, response_mask], dim=1)
    length, rows = tokens.shape[1], sequences.shape[0]
    orders = {
        "by length": torch.argsort(response_spans(response_mask), stable=True),
        "row order": torch.arange(rows),
    }

    def update(order: torch.Tensor) -> None:
        for start in range(0, rows, args.micro):
            index = order[start : start + args.micro]
            logp, _ = response_logprobs(
                model,
                sequences[index],
                mask[index],
                length,
                temperature=1.0,
                chunk_size=4096,
                with_entropy=False,
            )
            (logp * mask[index, -length:]).sum().backward()
        model.zero_grad(set_to_none=True)

    times: dict[str, list[float]] = {name: [] for name in orders}
    for name in orders:  # warm-up
        update(orders[name])
    for r in range(args.rounds):
        for name in orders if r % 2 == 0 else reversed(list(orders)):
            start = time.perf_counter()
            update(orders[name])
            times[name].append(time.perf_counter() - start)
    by_length, in_order = (statistics.median(times[name]) for name in orders)
    print(
        f"    micro-batches of {args.micro}: by length {by_length * 1000:.1f} ms, row order "
        f"{in_order * 1000:.1f} ms, by length/row order {by_length / in_order:.2f}"
    )


if __name__ == "__main__":
    main()
