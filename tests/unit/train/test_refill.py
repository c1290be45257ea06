"""DAPO dynamic sampling with refill: which groups a step keeps, by hand, and its seeds."""

from __future__ import annotations

import dataclasses

import torch

from quadrants.rewards.grader import Outcome
from quadrants.rollout.engine import Rollouts
from quadrants.train.context import Collected
from quadrants.train.refill import collect_with_refill, mixed_groups

C, W = Outcome.correct, Outcome.wrong
PAD = 0


def round_of(
    tag: int, outcomes: list[Outcome], lengths: list[int], group_size: int = 2
) -> Collected:
    """A graded round: response i has `lengths[i]` tokens, all token ids 100 * tag + i (to trace rows)."""
    rows = len(outcomes)
    width = max(lengths)
    ids = torch.full((rows, width), PAD, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for i, n in enumerate(lengths):
        ids[i, :n] = 100 * tag + i
        mask[i, :n] = True
    rollouts = Rollouts(
        prompt_ids=torch.full((rows, 2), 7, dtype=torch.long),
        prompt_mask=torch.ones(rows, 2, dtype=torch.bool),
        response_ids=ids,
        response_mask=mask,
        behaviour_logp=-mask.float(),
        texts=[f"r{tag}.{i}" for i in range(rows)],
        group_ids=torch.arange(rows // group_size).repeat_interleave(group_size),
        finished=torch.ones(rows, dtype=torch.bool),
    )
    rewards = torch.tensor([float(o is C) for o in outcomes])
    return Collected(rollouts, rewards, outcomes, generate_s=1.0, grade_s=0.5)


def test_mixed_groups():
    # groups of 2, correct [1 1] constant, [1 0] mixed, [0 0] constant
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    assert mixed_groups(groups, torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])) == [
        False,
        True,
        False,
    ]


def test_a_length_penalty_alone_does_not_make_a_group_mixed():
    # Round 0: group 0 [W W] with shaped rewards [0, -0.25] (the overlong penalty), group 1 [C W].
    # Mixedness is correctness (as DAPO): group 0 is constant, so round 1 is needed; its group 0 [W C] fills.
    first = round_of(0, [W, W, C, W], [1, 3, 1, 1])
    first = Collected(
        first.rollouts, torch.tensor([0.0, -0.25, 1.0, 0.0]), first.outcomes, 1.0, 0.5
    )
    rounds = {0: first, 1: round_of(1, [W, C, W, W], [1, 1, 1, 1])}
    out = collect_with_refill(rounds.__getitem__, prompts=2, max_rounds=2, pad_id=PAD)
    assert out.rollouts.texts == ["r0.2", "r0.3", "r1.0", "r1.1"]
    assert (
        out.metrics["train/refill/rounds"] == 1.0 and out.metrics["train/refill/groups_kept"] == 2.0
    )


def test_refill_takes_mixed_groups_from_later_rounds():
    # 2 prompts x G = 2 per round. Round 0: group 0 [C C] constant, group 1 [W C] mixed -> 1 of 2.
    # Round 1: group 0 [C W] mixed (taken, the batch is full), group 1 [W C] mixed (not needed).
    rounds = {
        0: round_of(0, [C, C, W, C], [1, 2, 3, 1]),
        1: round_of(1, [C, W, W, C], [2, 2, 1, 1]),
    }
    calls = []

    def collect(r):
        calls.append(r)
        return rounds[r]

    out = collect_with_refill(collect, prompts=2, max_rounds=3, pad_id=PAD)
    assert calls == [0, 1]  # stopped as soon as 2 mixed groups were in hand
    assert out.rollouts.texts == ["r0.2", "r0.3", "r1.0", "r1.1"]
    assert out.rollouts.group_ids.tolist() == [0, 0, 1, 1]
    assert out.outcomes == [W, C, C, W]
    assert out.rewards.tolist() == [0.0, 1.0, 1.0, 0.0]
    # responses right-padded to the longest kept one (3 tokens), token ids trace the rows
    assert out.rollouts.response_ids.tolist() == [
        [2, 2, 2],
        [3, 0, 0],
        [100, 100, 0],
        [101, 101, 0],
    ]
    assert out.rollouts.response_mask.sum(-1).tolist() == [3, 1, 2, 2]
    assert (out.generate_s, out.grade_s) == (2.0, 1.0)
    assert out.metrics == {
        "train/refill/rounds": 1.0,
        "train/refill/groups_kept": 2.0,
        "train/refill/groups_generated": 4.0,
    }


def test_refill_cap_tops_up_with_round_zero_constant_groups():
    # Round 0: [C C] [W W] -> no mixed group; round 1 (the cap): [W W] [C W] -> 1 mixed group.
    # The batch: round 1's mixed group plus round 0's first constant group, so it still holds 2 groups.
    rounds = {
        0: round_of(0, [C, C, W, W], [1, 1, 1, 1]),
        1: round_of(1, [W, W, C, W], [1, 1, 2, 2]),
    }
    out = collect_with_refill(rounds.__getitem__, prompts=2, max_rounds=1, pad_id=PAD)
    assert out.rollouts.texts == ["r0.0", "r0.1", "r1.2", "r1.3"]
    assert out.outcomes == [C, C, C, W]
    assert (
        out.metrics["train/refill/rounds"] == 1.0 and out.metrics["train/refill/groups_kept"] == 1.0
    )


def test_no_refill_needed_keeps_round_zero_as_it_is():
    first = round_of(0, [C, W, W, C], [1, 2, 3, 1])
    out = collect_with_refill(
        lambda r: first if r == 0 else None, prompts=2, max_rounds=4, pad_id=PAD
    )
    assert out.rollouts.texts == first.rollouts.texts
    assert torch.equal(out.rollouts.response_ids, first.rollouts.response_ids)
    assert torch.equal(out.rewards, first.rewards)
    assert (
        out.metrics["train/refill/rounds"] == 0.0 and out.metrics["train/refill/groups_kept"] == 2.0
    )


def test_under_a_confound_reward_mixed_means_mixed_in_that_reward():
    # Round 0, groups of 2: the verifier says [W W] [C C] (both constant), the random reward drew
    # hits [0 1] [1 1]: group 0 is mixed in the reward trained on, group 1 constant. Round 1:
    # verifier [C W] [W W], hits [0 0] [1 0]: its group 1 is the mixed one, taken to fill the batch.
    # (By the verifier's correctness it would take round 1's group 0 instead.)
    first = round_of(0, [W, W, C, C], [1, 1, 1, 1])
    first = dataclasses.replace(
        first, rewards=torch.tensor([0.0, 1.0, 1.0, 1.0]), hits=torch.tensor([0.0, 1.0, 1.0, 1.0])
    )
    second = round_of(1, [C, W, W, W], [1, 1, 1, 1])
    second = dataclasses.replace(
        second, rewards=torch.tensor([0.0, 0.0, 1.0, 0.0]), hits=torch.tensor([0.0, 0.0, 1.0, 0.0])
    )
    out = collect_with_refill(
        {0: first, 1: second}.__getitem__, prompts=2, max_rounds=1, pad_id=PAD
    )
    assert out.rollouts.texts == ["r0.0", "r0.1", "r1.2", "r1.3"]
    assert out.hits.tolist() == [0.0, 1.0, 1.0, 0.0]  # the kept rows' hits, in order
    assert out.outcomes == [W, W, W, W]  # the verifier's outcomes travel with them
