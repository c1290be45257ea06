"""The fused LM head's backward on the rows that carry gradient only, against recomputing every row,
in a real update under each quadrant, interleaved.

quadrants/ops/fused_head.py recomputes each chunk's logits in backward to form the hidden-state and
head gradients. A position whose incoming gradients (log-prob and entropy) are both exactly 0, as
the loss's mask makes every token outside the kept quadrant, gets a zero hidden-state gradient and
adds nothing to the head's, so backward skips it. This script times `backward_minibatch` (forward
with grad, loss, backward) with the skip against the same update with `skip_gradless=False` (every
row recomputed), on a rollout the model samples itself with the HF engine's fast decode, rewarded
as in benchmarks/gradless_rows.py (half of each group 1, half 0). The head's share of the model is
what the skip can save: large for SmolLM2-135M (vocabulary 49,152 x hidden 576 against 30 layers of
hidden 576), small for the tiny workload's character vocabulary. Prints, per kept set, the head rows
with gradient out of those in the forward, each median and the ratio (skip / every row).

    python benchmarks/head_backward.py [--model smollm2] [--rounds 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

from common import (  # benchmarks/ is the script's directory
    add_update_arguments,
    update_context,
    update_workload,
)

import quadrants.models.policy as policy
import quadrants.ops.fused_head as fused
from quadrants.train.update import backward_minibatch


def head_rows(ctx, batch) -> tuple[int, int]:
    """(rows the head's backward recomputes, rows its forward saw) in one update."""
    counts = []
    real = fused._rows_with_gradient

    def counting(grad_logp, grad_entropy):
        rows = real(grad_logp, grad_entropy)
        counts.append((grad_logp.shape[0] if rows is None else rows.shape[0], grad_logp.shape[0]))
        return rows

    fused._rows_with_gradient = counting
    try:
        backward_minibatch(ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, None)
    finally:
        fused._rows_with_gradient = real
        ctx.model.zero_grad(set_to_none=True)
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def compare(ctx, batch, keep: str, rounds: int) -> None:
    """Time the update with the skip against every row recomputed, interleaved."""
    skipping = policy.head_logprobs_and_entropy
    every_row = functools.partial(fused.head_logprobs_and_entropy, skip_gradless=False)
    heads = {"skip": skipping, "every row": every_row}
    live, seen = head_rows(ctx, batch)
    times: dict[str, list[float]] = {name: [] for name in heads}
    try:
        for r in range(rounds + 1):  # round 0 warms up
            for name in list(heads) if r % 2 == 0 else list(reversed(list(heads))):
                policy.head_logprobs_and_entropy = heads[name]
                start = time.perf_counter()
                backward_minibatch(ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, None)
                if r:
                    times[name].append(time.perf_counter() - start)
                ctx.model.zero_grad(set_to_none=True)
    finally:
        policy.head_logprobs_and_entropy = skipping
    skip, whole = (statistics.median(times[name]) for name in heads)
    print(
        f"  keep={keep}: head backward on {live} of {seen} rows; update with the skip "
        f"{skip * 1000:.1f} ms, every row {whole * 1000:.1f} ms, ratio {skip / whole:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_update_arguments(parser, model="smollm2", rounds=4, prompts=4, group=4, tokens=64)
    args = parser.parse_args()
    model, batch, header = update_workload(args)
    print(header)
    for keep in ("all", "PHR", "PLR", "NHR", "NLR"):
        compare(update_context(model, args.objective, keep=keep), batch, keep, args.rounds)
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
