"""Decode replay against recomputing the update's forward, interleaved: the rollout with and without
recording its projection outputs, and the update with and without replaying them.

quadrants/models/replay.py: the fast decode can record every projection's output (q, k, v, o,
gate, up, down of every layer) while it samples; the step's first update then takes them instead of
multiplying again (`train.decode_replay_mb`). Recording costs the rollout a copy per projection per
token; replaying saves the update's forward multiplies of the model body. This script measures
both on a rollout the model samples itself (8 arithmetic prompts x G = 8, up to 32 tokens, as the
tiny workload of benchmarks/vs_trl.py), rewarded half 1 / half 0 per group, DAPO:
- rollout: `sample_fast` recording (into storage reused from the previous round, as the engine
  does) against not recording;
- update: `backward_minibatch` (forward with grad, loss, backward; no optimizer step, so the
  weights stay those the outputs were recorded with) replaying against recomputing.
Prints each median, the ratios, and the sum of the two phases.

    python benchmarks/decode_replay.py [--model smollm2 --prompts 4 --group 4 --new-tokens 64]
        [--rounds 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import (  # benchmarks/ is the script's directory
    add_update_arguments,
    half_rewarded_batch,
    sampled_rollout,
    update_context,
)
from decode_paths import load

from quadrants.models.replay import OutputStorage, Replay
from quadrants.train.accumulate import backward_minibatch

BUDGET_MB = 1 << 20  # the script records whatever the batch takes, and says how much


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_update_arguments(parser, model="tiny", rounds=8, prompts=8, group=8, tokens=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model)
    ctx = update_context(model, args.objective)
    sample = dict(prompts=args.prompts, group=args.group, new_tokens=args.new_tokens, record=True)
    times: dict[str, list[float]] = {
        "rollout, recording": [],
        "rollout": [],
        "update, replaying": [],
        "update": [],
    }
    storage, megabytes = None, 0.0
    for r in range(args.rounds + 1):  # round 0 warms up
        seed = args.seed + r
        rollouts = {}
        for recording in (True, False) if r % 2 == 0 else (False, True):
            start = time.perf_counter()
            rollouts[recording] = sampled_rollout(
                model,
                tokenizer,
                seed=seed,
                record_outputs_mb=BUDGET_MB if recording else 0.0,
                storage=storage,
                **sample,
            )
            if r:
                times["rollout, recording" if recording else "rollout"].append(
                    time.perf_counter() - start
                )
        recorded = rollouts[True]
        storage = recorded.linear_outputs.storage
        megabytes = OutputStorage.nbytes(model, storage.rows, recorded.linear_outputs.columns)
        batch = half_rewarded_batch(recorded, args.group)
        replay = Replay(recorded.linear_outputs, torch.arange(batch.batch_size))
        for replaying in (True, False) if r % 2 == 0 else (False, True):
            start = time.perf_counter()
            backward_minibatch(ctx, batch, None, replay=replay if replaying else None)
            if r:
                times["update, replaying" if replaying else "update"].append(
                    time.perf_counter() - start
                )
            model.zero_grad(set_to_none=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"{args.model}: {args.prompts} prompts x G = {args.group}, up to {args.new_tokens} tokens, "
        f"{args.objective}, {args.threads} threads, {args.rounds} rounds; recorded outputs "
        f"{megabytes / 2**20:.0f} MiB"
    )
    for name, value in medians.items():
        print(f"  {name:<20} {value * 1000:8.1f} ms")
    rollout = medians["rollout, recording"] / medians["rollout"]
    update = medians["update, replaying"] / medians["update"]
    both = (medians["rollout, recording"] + medians["update, replaying"]) / (
        medians["rollout"] + medians["update"]
    )
    print(f"  ratios: rollout {rollout:.2f}, update {update:.2f}, rollout + update {both:.2f}")


if __name__ == "__main__":
    main()
