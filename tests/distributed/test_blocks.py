"""Blocks of rollouts joined into one global batch (what every rank holds after the gather), by hand."""

from __future__ import annotations

import torch

from quadrants.distributed.collectives import DistEnv, row_share
from quadrants.rollout.engine import Rollouts
from quadrants.train.blocks import concat_rollouts

PAD = 0


def rollouts(prompt_ids, response_ids, groups) -> Rollouts:
    prompt = torch.tensor(prompt_ids)
    response = torch.tensor(response_ids)
    return Rollouts(
        prompt_ids=prompt,
        prompt_mask=prompt != PAD,
        response_ids=response,
        response_mask=response != PAD,
        behaviour_logp=-(response != PAD).float(),
        texts=[str(r) for r in response_ids],
        group_ids=torch.tensor(groups),
        finished=torch.ones(len(groups), dtype=torch.bool),
    )


def test_blocks_are_repadded_and_their_groups_offset():
    # block 0: one prompt (P = 1) x 2 samples, T = 3; block 1: one prompt (P = 2) x 2 samples, T = 1
    first = rollouts([[7], [7]], [[5, 6, 0], [5, 0, 0]], [0, 0])
    second = rollouts([[8, 9], [8, 9]], [[4], [3]], [0, 0])
    joined = concat_rollouts([first, second], PAD)
    # prompts left-padded to P = 2, responses right-padded to T = 3
    assert joined.prompt_ids.tolist() == [[0, 7], [0, 7], [8, 9], [8, 9]]
    assert joined.prompt_mask.tolist() == [[False, True], [False, True], [True, True], [True, True]]
    assert joined.response_ids.tolist() == [[5, 6, 0], [5, 0, 0], [4, 0, 0], [3, 0, 0]]
    assert joined.response_mask.sum(-1).tolist() == [2, 1, 1, 1]
    assert joined.behaviour_logp.tolist()[2] == [-1.0, 0.0, 0.0]  # padding carries 0
    assert joined.group_ids.tolist() == [0, 0, 1, 1]  # block 1's prompt 0 is the batch's prompt 1
    assert joined.texts == first.texts + second.texts


def test_one_block_is_the_single_process_batch():
    only = rollouts([[7]], [[5]], [0])
    assert concat_rollouts([only], PAD) is only


def test_row_shares_are_contiguous_and_cover_the_batch():
    # 8 rows over 2 ranks: rows 0-3 and 4-7
    shares = [row_share(8, DistEnv(rank=r, world_size=2, sharded=True)) for r in range(2)]
    assert [(s.start, s.stop) for s in shares] == [(0, 4), (4, 8)]
    assert row_share(8, DistEnv()) == slice(0, 8)
