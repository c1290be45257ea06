"""Phase 1 of the step, collect (`CollectSettings`): draw the step's prompts, generate G responses
each in blocks dealt to the ranks (train/blocks.py), grade them, optionally refill with mixed
groups (train/refill.py) and shape the rewards with DAPO's overlong penalty.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

import torch

from quadrants import seeds
from quadrants.ops.overlong import overlong_penalty
from quadrants.rewards.confound import training_rewards
from quadrants.rewards.grader import Grader, Outcome
from quadrants.rollout.engine import RolloutEngine, Rollouts, SamplingSettings
from quadrants.tasks.base import Task
from quadrants.tracking import keys
from quadrants.train.blocks import concat_rollouts
from quadrants.train.context import Collected, CollectSettings
from quadrants.train.placement import Placement
from quadrants.train.refill import collect_with_refill


def collect_rollouts(
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    placement: Placement,
    settings: CollectSettings,
    step: int,
    *,
    pad_id: int,
) -> Collected:
    """Sample the step's prompts, generate G responses each, and grade them; with
    `rollout.refill_rounds`, refill the batch with mixed groups from extra rounds
    (train/refill.py)."""

    def round_(index: int) -> Collected:
        return collect_round(engine, grader, task, placement, settings, step, index, pad_id)

    if not settings.refill_rounds:
        return round_(0)
    return collect_with_refill(
        round_,
        prompts=settings.prompts_per_step,
        max_rounds=settings.refill_rounds,
        pad_id=pad_id,
    )


def collect_round(
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    placement: Placement,
    settings: CollectSettings,
    step: int,
    round_index: int,
    pad_id: int,
) -> Collected:
    """One generation round: `prompts_per_step` prompts drawn with the round's seed (stream
    `prompts` of (step, round), quadrants/seeds.py), G responses each, graded; rewards are the
    verifier's, or a confound reward's (`reward.name`, rewards/confound.py; reward=random draws
    from stream `reward` of (step, round) over the whole gathered round), and include the overlong
    penalty when it is on. A resumed run draws the same prompts and samples as an
    uninterrupted one: every seed is a function of the run seed, the step, the round and the block.

    The prompts go in blocks (`prompts_per_generate`, default prompts_per_step / W), block b
    generated and graded by rank b % W with its own seed (stream `rollout` of (step, round, b)),
    all blocks gathered in block order on every rank: the same blocks, seeds and order for any W.
    One process without the block setting is one block, block 0."""
    problems = task.train_batch(
        settings.prompts_per_step, random.Random(seeds.prompts(settings.seed, step, round_index))
    )
    sampling = SamplingSettings(
        n=settings.group_size,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
    )
    size = settings.prompts_per_generate or settings.prompts_per_step // placement.world_size
    blocks = [problems[i : i + size] for i in range(0, len(problems), size)]
    mine: list[tuple[int, tuple[Rollouts, list[float], list[str]]]] = []
    generate_s = grade_s = 0.0
    for index in placement.deal(len(blocks)):
        block = blocks[index]
        t0 = time.perf_counter()
        block_sampling = replace(
            sampling, seed=seeds.rollout(settings.seed, step, round_index, index)
        )
        rollouts = engine.generate([p.prompt for p in block], block_sampling)
        t1 = time.perf_counter()
        graded = grader.grade(rollouts.texts, [block[int(g)].answer for g in rollouts.group_ids])
        grade_s += time.perf_counter() - t1
        generate_s += t1 - t0
        mine.append((index, (rollouts, list(graded.rewards), [o.value for o in graded.outcomes])))
    everything = placement.gather_in_order(mine)  # timings stay per rank
    rewards = torch.tensor([r for item in everything for r in item[1]], dtype=torch.float32)
    outcomes = [Outcome(o) for item in everything for o in item[2]]
    confound = None
    if settings.reward != "verifier":  # drawn from the gathered round, the same on every rank
        rng = random.Random(seeds.reward(settings.seed, step, round_index))
        confound = torch.tensor(
            training_rewards(
                settings.reward,
                outcomes,
                probability=settings.reward_probability,
                rng=rng,
                texts=[text for item in everything for text in item[0].texts],
            ),
            dtype=torch.float32,
        )
        rewards = confound
    collected = Collected(
        concat_rollouts([item[0] for item in everything], pad_id),
        rewards,
        outcomes,
        generate_s,
        grade_s,
        hits=confound,
    )
    if not settings.overlong_buffer:
        return collected
    penalty = overlong_penalty(
        collected.rollouts.response_mask.sum(-1),
        max_length=settings.max_new_tokens,
        buffer=settings.overlong_buffer,
        penalty=settings.overlong_penalty,
    )
    return replace(
        collected,
        rewards=collected.rewards + penalty.to(collected.rewards.device),
        metrics={**collected.metrics, keys.train("overlong_penalty_mean"): penalty.mean().item()},
    )
