"""DAPO's dynamic sampling with refill: generate more prompts until the batch
holds enough mixed groups.

DAPO (Yu et al. 2025, §3.2) over-samples: groups whose G responses are all right or all wrong carry
no advantage, so it keeps generating batches of fresh prompts until `prompts_per_step` groups with
mixed correctness are collected, and trains on those. Here:

- Round 0 is the step's ordinary batch (same prompts and seeds as without refill). While fewer than
  `prompts_per_step` of the groups generated so far are mixed and fewer than `rollout.refill_rounds`
  extra rounds have run, round r draws `prompts_per_step` fresh prompts with its own seed
  (quadrants/seeds.py `prompts` and `rollout` of (step, r)), so a resumed run regenerates exactly
  the same rounds.
- The batch keeps the first `prompts_per_step` mixed groups in round order. When the cap is reached
  first, it is topped up with round 0's constant groups (in order), so every step trains on
  `prompts_per_step` x G sequences (mini-batches and the ranks' row shares stay the same); the DAPO
  objectives' `dynamic_sampling` drops those from the loss as before.
- "Mixed" means mixed correctness (some responses graded correct, some not; under a confound
  reward, reward=random or format_only, mixed in that 0/1 reward instead), as DAPO filters and
  verl's DAPO recipe does (`filter_groups.metric=acc`). It is the same test the objectives' dynamic
  sampling uses to drop a group (train/collect.py hands it the correctness when the overlong penalty
  is on; without it the rewards are the correctness), so the top-up groups are exactly the ones the
  loss drops, and a length penalty alone never makes a group mixed.
- Each round is collected by the caller's `collect_round`, which with several ranks deals its
  prompts in blocks to the ranks and gathers them (train/collect.py `collect_round`): every rank
  sees the same rounds and keeps the same groups.

verl raises an error when its cap is reached without a full batch; we train on the shorter batch and
log how full it was (`train/refill/groups_kept`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from quadrants.ops.advantages import constant_reward_groups
from quadrants.rewards.grader import Outcome
from quadrants.rollout.engine import Rollouts
from quadrants.tracking import keys
from quadrants.train.blocks import concat_rollouts

if TYPE_CHECKING:
    from quadrants.train.context import Collected


def mixed_groups(group_ids: Tensor, correct: Tensor) -> list[bool]:
    """Per group (0..max id): True when its `correct` values
    ([B] float, 1 = correct) are not all equal."""
    groups = group_ids.cpu()
    constant = constant_reward_groups(correct.cpu().float(), groups)  # [B], per sequence
    count = int(groups.max()) + 1 if groups.numel() else 0
    mixed = [False] * count
    for group, is_constant in zip(groups.tolist(), constant.tolist()):
        mixed[group] = not is_constant
    return mixed


def correctness(outcomes: list[Outcome], device: torch.device | None = None) -> Tensor:
    """[B] float, 1.0 where the grader said correct (the reward without any shaping term)."""
    return torch.tensor(
        [float(o is Outcome.correct) for o in outcomes], dtype=torch.float32, device=device
    )


def hits(collected: Collected, device: torch.device | None = None) -> Tensor:
    """[B] float, the 0/1 reward the run trains on before any shaping term: the grader's
    correctness, or under a confound reward (reward=random, format_only) its own draw. Dynamic
    sampling judges a group mixed or constant by it, as the loss's advantages see it."""
    if collected.hits is None:
        return correctness(collected.outcomes, device)
    return collected.hits.to(device) if device is not None else collected.hits


def _trim(rollouts: Rollouts) -> Rollouts:
    """Drop prompt columns that are padding on every row (left) and response
    columns likewise (right)."""
    prompt_used = rollouts.prompt_mask.any(0).nonzero()
    start = int(prompt_used.min()) if prompt_used.numel() else rollouts.prompt_mask.shape[1]
    response_used = rollouts.response_mask.any(0).nonzero()
    end = int(response_used.max()) + 1 if response_used.numel() else 0
    return replace(
        rollouts,
        prompt_ids=rollouts.prompt_ids[:, start:],
        prompt_mask=rollouts.prompt_mask[:, start:],
        response_ids=rollouts.response_ids[:, :end],
        response_mask=rollouts.response_mask[:, :end],
        behaviour_logp=rollouts.behaviour_logp[:, :end],
        behaviour_entropy=None
        if rollouts.behaviour_entropy is None
        else rollouts.behaviour_entropy[:, :end],
    )


def select_groups(collected: Collected, groups: list[int]) -> Collected:
    """The sequences of `groups` (ascending), in their original order,
    renumbered 0..len(groups)-1."""
    rollouts = collected.rollouts
    new_id = {g: i for i, g in enumerate(sorted(groups))}
    rows = [i for i, g in enumerate(rollouts.group_ids.tolist()) if g in new_id]
    index = torch.tensor(rows, dtype=torch.long, device=rollouts.group_ids.device)
    selected = Rollouts(
        prompt_ids=rollouts.prompt_ids[index],
        prompt_mask=rollouts.prompt_mask[index],
        response_ids=rollouts.response_ids[index],
        response_mask=rollouts.response_mask[index],
        behaviour_logp=rollouts.behaviour_logp[index],
        texts=[rollouts.texts[i] for i in rows],
        group_ids=torch.tensor(
            [new_id[int(rollouts.group_ids[i])] for i in rows],
            dtype=torch.long,
            device=rollouts.group_ids.device,
        ),
        finished=rollouts.finished[index],
        behaviour_entropy=None
        if rollouts.behaviour_entropy is None
        else rollouts.behaviour_entropy[index],
    )
    return replace(
        collected,
        rollouts=_trim(selected),
        rewards=collected.rewards[index.to(collected.rewards.device)],
        outcomes=[collected.outcomes[i] for i in rows],
        hits=None if collected.hits is None else collected.hits[index.to(collected.hits.device)],
    )


def collect_with_refill(
    collect_round: Callable[[int], Collected], *, prompts: int, max_rounds: int, pad_id: int
) -> Collected:
    """Rounds 0, 1, ... of `collect_round` until `prompts` mixed groups are in hand or `max_rounds`
    extra rounds have run; the assembled batch of exactly `prompts` groups
    (see the module docstring).

    Returns:
        A Collected whose `metrics` carry train/refill/{rounds, groups_kept, groups_generated}, and
        whose timings are summed over the rounds.
    """
    rounds = [collect_round(0)]
    mixed = [mixed_groups(rounds[0].rollouts.group_ids, hits(rounds[0]))]
    while sum(sum(m) for m in mixed) < prompts and len(rounds) <= max_rounds:
        rounds.append(collect_round(len(rounds)))
        mixed.append(mixed_groups(rounds[-1].rollouts.group_ids, hits(rounds[-1])))
    chosen: list[list[int]] = []
    room = prompts
    for flags in mixed:  # the first `prompts` mixed groups, in round order
        picked = [g for g, is_mixed in enumerate(flags) if is_mixed][:room]
        chosen.append(picked)
        room -= len(picked)
    kept = prompts - room
    # top up with round 0's constant groups (the objective's dynamic sampling
    # drops them from the loss)
    chosen[0] += [g for g, is_mixed in enumerate(mixed[0]) if not is_mixed][:room]
    parts = [select_groups(part, groups) for part, groups in zip(rounds, chosen) if groups]
    batch = concat_rollouts([p.rollouts for p in parts], pad_id)
    first = rounds[0]
    return replace(
        first,
        rollouts=batch,
        rewards=torch.cat([p.rewards for p in parts]),
        outcomes=[o for p in parts for o in p.outcomes],
        hits=None if first.hits is None else torch.cat([p.hits for p in parts]),  # type: ignore[misc]
        generate_s=sum(r.generate_s for r in rounds),
        grade_s=sum(r.grade_s for r in rounds),
        metrics={
            **first.metrics,
            keys.train("refill/rounds"): float(len(rounds) - 1),
            keys.train("refill/groups_kept"): float(kept),
            keys.train("refill/groups_generated"): float(sum(len(m) for m in mixed)),
        },
    )
