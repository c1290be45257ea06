"""A mini-batch's update under quadrant isolation: rows without a kept token run without grad only,
against every row in one forward with grad, interleaved.

Under `quadrant=PHR` (or PLR) no row with a negative advantage holds a kept token, and under NHR (or
NLR) no row with a non-negative one: those rows add nothing to the loss or its gradient, so
train/update.py (`backward_minibatch`) computes their values (for the loss and the metrics)
in a no-grad forward and runs the forward with grad and the backward over the other rows only. This
script times that (`backward_minibatch`) against the one-call update (every row's forward with grad,
the loss, its backward), on a rollout the model samples itself with the HF engine's fast decode,
rewarded so that each group of G has G/2 positive and G/2 negative advantages (as in
benchmarks/vs_trl.py); with `--constant N` the first N groups are rewarded all 0 instead, so DAPO's
dynamic sampling drops them (their advantage 0 counts as positive in the quadrant split), and
`keep=all` is timed too. `--objective grpo` keeps those groups in the loss's denominator; their
advantage is exactly 0, so they carry no gradient there either (`zero_advantage_inert`) and run
without grad the same way.
`--model tiny` is the tiny workload's random Qwen2, `--model smollm2` SmolLM2-135M. Prints, per
kept set, the rows with gradient, each median and the ratio (rows with grad only / one call).

    python benchmarks/gradless_rows.py [--model tiny] [--rounds 6] [--threads 2] [--constant 4]
        [--objective dapo|grpo]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from common import (  # benchmarks/ is the script's directory
    add_update_arguments,
    update_context,
    update_workload,
)

from quadrants.models.policy import response_logprobs
from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.loss import compute_loss
from quadrants.train.context import StepContext
from quadrants.train.gradless_rows import rows_with_gradient
from quadrants.train.update import backward_minibatch


def one_call(ctx: StepContext, batch) -> None:
    """The update before rows without gradient were split off: every row with grad."""
    objective = ctx.objective
    logp, entropy = response_logprobs(
        ctx.model,
        batch.sequences,
        batch.attention_mask,
        batch.response_length,
        temperature=ctx.forwards.passes.temperature,
        chunk_size=ctx.forwards.passes.chunk_size,
        with_entropy=objective.spec.wants_entropy(objective.params),
        max_buckets=ctx.forwards.passes.length_buckets,
    )
    loss, _ = compute_loss(
        objective.spec, objective.params, batch, PolicyOutput(logp, entropy), objective.loss
    )
    loss.backward()


def compare(ctx: StepContext, batch, keep: str, rounds: int) -> None:
    """Time `backward_minibatch` against `one_call` under `keep`, interleaved."""
    objective = ctx.objective
    carried = rows_with_gradient(batch, objective.loss, objective.spec, objective.params)
    updates = {
        "rows with grad only": lambda: backward_minibatch(
            ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, None
        ),
        "one call": lambda: one_call(ctx, batch),
    }
    times: dict[str, list[float]] = {name: [] for name in updates}
    for update in updates.values():  # warm-up
        update()
        ctx.model.zero_grad(set_to_none=True)
    for r in range(rounds):
        for name in list(updates) if r % 2 == 0 else list(reversed(list(updates))):
            start = time.perf_counter()
            updates[name]()
            times[name].append(time.perf_counter() - start)
            ctx.model.zero_grad(set_to_none=True)
    split, whole = (statistics.median(times[name]) for name in updates)
    print(
        f"  keep={keep}: {int(carried.sum())} of {batch.batch_size} rows with gradient; "
        f"rows with grad only {split * 1000:.1f} ms, one call {whole * 1000:.1f} ms, "
        f"ratio {split / whole:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_update_arguments(parser, model="tiny", rounds=6, prompts=8, group=8, tokens=32)
    parser.add_argument(
        "--constant", type=int, default=0, help="groups rewarded all 0 (DAPO drops them)"
    )
    args = parser.parse_args()
    model, batch, header = update_workload(args, args.constant)
    print(header)
    for keep in (
        ("all", "PHR", "PLR", "NHR", "NLR") if args.constant else ("PHR", "PLR", "NHR", "NLR")
    ):
        compare(update_context(model, args.objective, keep=keep), batch, keep, args.rounds)
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
