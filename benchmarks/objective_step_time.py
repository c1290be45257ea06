"""Per-step update time of every objective as a ratio to plain GRPO, on the same batch.

A "step" here is the whole update phase the objective takes part in: policy forward with grad over
the batch (with the current entropy only when the objective asks for it), the objective and the
aggregation, backward, gradient clipping and the AdamW step —
`quadrants.train.update.update_policy`, the function training runs. Rollouts and grading are the
same for every objective and left out.

The machines are noisy, so objectives are interleaved round by round and each ratio is the median of
per-round ratios against the GRPO time measured in the same round.

    python benchmarks/objective_step_time.py [--rounds 7] [--batch 128] [--length 48]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from quadrants.config import ObjectiveConfig, RunConfig
from quadrants.models.policy import behaviour_pass
from quadrants.models.tiny import random_tiny_policy
from quadrants.objectives.batch import make_token_batch
from quadrants.objectives.loss import LossSettings
from quadrants.objectives.registry import known_objectives, resolve_objective
from quadrants.run.settings import build_step
from quadrants.run_plan import RunPlan
from quadrants.train.context import Objective
from quadrants.train.update import update_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=128, help="sequences (prompts x G)")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=10)
    parser.add_argument("--length", type=int, default=48, help="response tokens")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model, tokenizer = random_tiny_policy(seed=0)
    vocab = len(tokenizer)
    b, p, t = args.batch, args.prompt_length, args.length
    sequences = torch.randint(3, vocab, (b, p + t))
    lengths = torch.randint(t // 2, t + 1, (b,))
    response_mask = torch.arange(t)[None, :] < lengths[:, None]  # [B, T]
    attention_mask = torch.cat([torch.ones(b, p, dtype=torch.bool), response_mask], dim=1)
    old_logp, entropy = behaviour_pass(
        model, sequences, attention_mask, t, temperature=1.0, chunk_size=256, batch_size=b
    )
    rewards = (torch.rand(b) < 0.4).float()
    batch = make_token_batch(
        sequences=sequences,
        attention_mask=attention_mask,
        response_mask=response_mask,
        old_logp=old_logp * response_mask,
        entropy=entropy * response_mask,
        rewards=rewards,
        group_ids=torch.arange(b) // args.group,
    )
    cfg = RunConfig(objective=ObjectiveConfig(name="grpo"))  # the baseline the ratios divide by
    cfg.train.mini_batch_size = b
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def time_one(name: str) -> float:
        model.load_state_dict(state)
        spec, params = resolve_objective(name, {})
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        ctx = build_step(
            RunPlan.unchecked(cfg),
            model,
            tokenizer=tokenizer,
            optimizer=optimizer,
            scheduler=scheduler,
        )
        objective = Objective(spec, params, LossSettings())  # each objective, default loss settings
        start = time.perf_counter()
        update_policy(
            model, optimizer, scheduler, objective, ctx.forwards, ctx.update, batch, step=0
        )
        return time.perf_counter() - start

    names = known_objectives()
    for name in names:  # warm-up: allocator, kernels
        time_one(name)
    ratios: dict[str, list[float]] = {n: [] for n in names}
    grpo_times: list[float] = []
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        times = {n: time_one(n) for n in order}
        grpo_times.append(times["grpo"])
        for n in names:
            ratios[n].append(times[n] / times["grpo"])
    print(
        f"batch {b} x {t} response tokens, tiny model, {args.threads} threads, {args.rounds} rounds"
    )
    print(f"grpo update step: median {statistics.median(grpo_times) * 1e3:.1f} ms")
    print(f"{'objective':<12} {'ratio to grpo (median)':>24} {'goal':>6}")
    for n in names:
        goal = 1.10 if n in ("clip_cov", "kl_cov") else 1.05
        med = statistics.median(ratios[n])
        print(f"{n:<12} {med:>24.3f} {goal:>6.2f} {'ok' if med <= goal else 'OVER'}")


if __name__ == "__main__":
    main()
