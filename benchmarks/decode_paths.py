"""The HF engine's three decode paths, interleaved: `generate`, the loop, the fused fast decode.

Each round times one rollout of every path on the same prompts (the order rotates per round); the
figure is the median over rounds, with each path's ratio to `generate` and to the loop measured in
the same run. The model is the tiny workload's of benchmarks/vs_trl.py (a random Qwen2, hidden 256,
MLP 688, 4 layers, 4 heads, 2 KV heads, over quadrants' character vocabulary) or, with
`--model smollm2`, SmolLM2-135M (Llama). Tokens after a sequence's stop token are not decoded by the
fast path (rows are dropped); the line "finished early" says how much of the batch that concerned.

    python benchmarks/decode_paths.py [--model tiny|smollm2] [--rounds 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from vs_trl import TINY_SHAPE  # benchmarks/ is the script's directory

from quadrants.rollout.decode import sample
from quadrants.rollout.fast_decode import sample_fast
from quadrants.rollout.hf import stop_token_ids


def load(name: str):
    if name == "tiny":
        from quadrants.models.tiny import random_tiny_policy

        return random_tiny_policy(0, **TINY_SHAPE)
    from quadrants.models.loading import load_policy
    from quadrants.models.smollm2 import NAME

    return load_policy(NAME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model)
    model.eval()
    tokenizer.padding_side = "left"
    texts = [f"{3 * i + 1}+{7 * i + 2}-{i}=" for i in range(args.prompts)]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    prompt_ids = encoded["input_ids"].repeat_interleave(args.group, dim=0)
    prompt_mask = encoded["attention_mask"].repeat_interleave(args.group, dim=0).bool()
    stops = stop_token_ids(model, tokenizer)
    settings = dict(
        max_new_tokens=args.new_tokens,
        temperature=1.0,
        top_p=1.0,
        stop_ids=stops,
        pad_id=tokenizer.pad_token_id,
        record=True,
    )

    def generate() -> None:
        model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask.long(),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=args.new_tokens,
            eos_token_id=stops,
            pad_token_id=tokenizer.pad_token_id,
        )

    paths = {
        "generate": generate,
        "loop": lambda: sample(model, prompt_ids, prompt_mask, **settings),
        "fast": lambda: sample_fast(model, prompt_ids, prompt_mask, **settings),
    }
    load_avg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"model {args.model}: {prompt_ids.shape[0]} sequences x up to {args.new_tokens} new "
        f"tokens, "
        f"prompts of {prompt_ids.shape[1]} tokens, {args.threads} threads, {args.rounds} rounds; "
        f"load average {load_avg}"
    )
    with torch.no_grad():
        for run in paths.values():  # warm-up
            run()
        times: dict[str, list[float]] = {name: [] for name in paths}
        early: list[float] = []
        names = list(paths)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                torch.manual_seed(r)
                start = time.perf_counter()
                out = paths[name]()
                times[name].append(time.perf_counter() - start)
                if name == "fast":
                    finished = torch.isin(out.tokens[:, :-1], torch.tensor(stops)).any(-1)
                    early.append(finished.float().mean().item())
    median = {name: statistics.median(values) for name, values in times.items()}
    for name in names:
        print(
            f"  {name:9s} {median[name] * 1000:8.1f} ms per rollout   "
            f"/generate {median[name] / median['generate']:.2f}   "
            f"/loop {median[name] / median['loop']:.2f}"
        )
    print(f"  finished early (fast path): {statistics.median(early):.0%} of the sequences")
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
