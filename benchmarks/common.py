"""Pieces several benchmark scripts share: a rollout the model samples itself, and the context of an
update without a rollout engine. (Scripts import it as `common`: benchmarks/ is their directory.)"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from quadrants.run_plan import RunPlan


@dataclass(frozen=True)
class SampledRollout:
    """G samples of each arithmetic prompt, left-padded prompts and right-padded responses.

    Attributes:
        prompt_ids, prompt_mask: [B, P] long / bool.
        tokens: [B, T] long, the sampled responses.
        response_mask: [B, T] bool, up to and including each row's first stop token.
        logp, entropy: [B, T] float, the sampler's (with `record`), else None.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    tokens: Tensor
    response_mask: Tensor
    logp: Tensor | None
    entropy: Tensor | None


def sampled_rollout(
    model,
    tokenizer,
    *,
    prompts: int,
    group: int,
    new_tokens: int,
    seed: int,
    record: bool = False,
) -> SampledRollout:
    """One rollout of `prompts` arithmetic prompts x `group` samples with the HF engine's fast
    decode at temperature 1 (seeded), so its response lengths are the model's own."""
    from quadrants.rollout.fast_decode import sample_fast
    from quadrants.rollout.hf import stop_token_ids

    tokenizer.padding_side = "left"
    texts = [f"{3 * i + 1}+{7 * i + 2}-{i}=" for i in range(prompts)]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    prompt_ids = encoded["input_ids"].repeat_interleave(group, dim=0)
    prompt_mask = encoded["attention_mask"].repeat_interleave(group, dim=0).bool()
    stops = torch.tensor(stop_token_ids(model, tokenizer))
    torch.manual_seed(seed)
    model.eval()
    decoded = sample_fast(
        model,
        prompt_ids,
        prompt_mask,
        max_new_tokens=new_tokens,
        temperature=1.0,
        top_p=1.0,
        stop_ids=stops.tolist(),
        pad_id=tokenizer.pad_token_id,
        record=record,
    )
    model.train()
    stop = torch.isin(decoded.tokens, stops).long()
    response_mask = (stop.cumsum(1) - stop) == 0
    return SampledRollout(
        prompt_ids,
        prompt_mask,
        decoded.tokens,
        response_mask,
        decoded.logp,
        decoded.entropy,
    )


def update_context(model, objective: str = "dapo", *, keep="all", micro: int = 0):
    """A StepContext with what an update needs (objective, loss settings, passes) and no rollout
    engine, grader, task or optimizer; every other setting is the default."""
    from quadrants.config import RunConfig
    from quadrants.run.settings import build_step

    cfg = RunConfig()
    cfg.objective.name = objective
    cfg.quadrant.keep = keep
    cfg.train.micro_batch_size = micro
    return build_step(RunPlan.unchecked(cfg), model)


def half_rewarded_batch(rollout: SampledRollout, group: int, constant: int = 0):
    """The rollout as a TokenBatch whose every group of `group` rows has its first half rewarded 1
    and the rest 0 (as in benchmarks/vs_trl.py: G/2 positive and G/2 negative advantages), except
    the first `constant` groups, rewarded all 0."""
    from quadrants.objectives.batch import make_token_batch

    rows = rollout.prompt_ids.shape[0]
    rewards = (torch.arange(rows) % group < group // 2).float()
    rewards[: constant * group] = 0.0
    mask = rollout.response_mask
    return make_token_batch(
        sequences=torch.cat([rollout.prompt_ids, rollout.tokens], dim=1),
        attention_mask=torch.cat([rollout.prompt_mask, mask], dim=1),
        response_mask=mask,
        old_logp=rollout.logp * mask,
        entropy=rollout.entropy * mask,
        rewards=rewards,
        group_ids=torch.arange(rows) // group,
    )


def add_update_arguments(parser, *, model: str, rounds: int, prompts: int, group: int, tokens: int):
    """The options of a script that times updates on a sampled, half-rewarded rollout."""
    parser.add_argument("--model", choices=("tiny", "smollm2"), default=model)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=prompts)
    parser.add_argument("--group", type=int, default=group)
    parser.add_argument("--new-tokens", type=int, default=tokens)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--objective", choices=("dapo", "grpo"), default="dapo")


def update_workload(args, constant: int = 0):
    """(model, batch, header line) from `add_update_arguments`' options: the model samples its own
    rollout (fast decode, seeded), rewarded by `half_rewarded_batch`; torch runs `args.threads`
    threads."""
    import os

    from decode_paths import load  # benchmarks/ is the script's directory

    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model)
    rollout = sampled_rollout(
        model,
        tokenizer,
        prompts=args.prompts,
        group=args.group,
        new_tokens=args.new_tokens,
        seed=args.seed,
        record=True,
    )
    header = (
        f"{args.model}: {args.prompts} prompts x G = {args.group}, up to "
        f"{rollout.tokens.shape[1]} tokens (real tokens {rollout.response_mask.float().mean():.2f}"
        f" of B x T); {args.objective}, {constant} constant groups; {args.threads} threads, "
        f"{args.rounds} rounds; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    return model, half_rewarded_batch(rollout, args.group, constant), header
