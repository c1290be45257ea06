"""Micro-batches by token budget (`train.micro_batch_tokens`, `train.forward_tokens`).

A mini-batch's rows, sorted by length, are packed into micro-batches of at most `budget` tokens,
padding counted: a micro-batch of n rows whose longest row has L tokens costs n x L (its forward
runs n rows of L positions; models/policy.py cuts each call after its longest row). This is the
role of verl's `ppo_max_token_len_per_gpu` (volcengine/verl, verl/utils/seqlen_balancing.py,
`rearrange_micro_batches`: it counts the unpadded tokens, as verl runs padding-free, takes
ceil(total / budget) micro-batches, all-reduces that count with MAX over the data-parallel group
so that every rank runs equally many, and asserts the budget is at least the longest sequence).
Here every rank holds the whole mini-batch
(distributed/collectives.py), so the packing is computed from the same global lengths on every rank
and is the same everywhere: no all-reduce is needed. Sharded, a micro-batch is a multiple of the
world size W of rows and each rank runs its contiguous 1/W of them (`row_share`): the budget is per
rank, as verl's is per GPU, and `pack_for_ranks` packs units of W consecutive rows by length.

Under `train.attention_layout=packed` (models/policy.py `packed_logprobs`) a micro-batch's rows run
as one sequence of their real tokens, so the budget counts those: a micro-batch costs the sum of
its rows' real lengths (each rank's share: the sum over the rows it runs), as verl's
`rearrange_micro_batches` counts them.

A row longer than the budget runs alone (its own micro-batch; with W ranks, its unit of W rows):
the packing never fails. the run plan refuses a budget below `rollout.max_new_tokens`, where
even a response alone would not fit.

Pure python/torch: no config, no model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from quadrants.ops.length_buckets import response_spans
from quadrants.ops.packing import real_lengths


def pack_by_tokens(lengths: Sequence[int], budget: int, *, packed: bool = False) -> list[list[int]]:
    """Row indices grouped into micro-batches of at most `budget` padded tokens (`packed`: real
    tokens, a group costing the sum of its lengths).

    Rows are taken in order of length (ascending, ties by index) and appended to the current group
    while len(group) x its longest row <= budget; a row that would break that starts a new group. A
    row longer than `budget` is alone in its group. Deterministic: a function of `lengths` alone.

    >>> pack_by_tokens([5, 3, 8, 3, 2], 10)
    [[4, 1, 3], [0], [2]]
    >>> pack_by_tokens([5, 3, 8, 3, 2], 10, packed=True)
    [[4, 1, 3], [0], [2]]
    >>> pack_by_tokens([5, 3, 1, 3, 2], 10, packed=True)
    [[2, 4, 1, 3], [0]]
    """
    return pack_for_ranks(lengths, budget, 1, packed=packed)


def pack_for_ranks(
    lengths: Sequence[int], budget: int, world_size: int, *, packed: bool = False
) -> list[list[int]]:
    """`pack_by_tokens` for W = `world_size` ranks that split each micro-batch into W contiguous
    equal shares: rows sorted by length are cut into units of W consecutive rows (len(lengths) must
    be a multiple of W), and units are packed so that each rank's share costs at most `budget`:
    (rows / W) x the group's longest row <= budget. Every rank computes the same groups from the
    same lengths, so all run equally many micro-batches (FSDP's collectives need that).

    `packed`: a rank's share costs the sum of its rows' lengths; rank r runs the r-th contiguous
    1/W of the group's rows (distributed/collectives.py `row_share`), so with rows ascending the
    last share costs the most, and that is what must fit.

    >>> pack_for_ranks([5, 3, 8, 3, 2, 1], 10, 2)
    [[5, 4, 1, 3], [0, 2]]
    >>> pack_for_ranks([5, 3, 8, 3, 2, 1], 10, 2, packed=True)
    [[5, 4, 1, 3], [0, 2]]
    """
    if budget <= 0:
        raise ValueError(f"a token budget must be > 0, got {budget}")
    if world_size < 1 or len(lengths) % world_size:
        raise ValueError(f"{len(lengths)} rows do not split into {world_size} equal shares")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    for start in range(0, len(order), world_size):
        unit = order[start : start + world_size]
        longest = lengths[unit[-1]]  # ascending: the unit's last row is the longest so far
        if packed:
            widened = current + unit
            share = len(widened) // world_size
            too_big = sum(lengths[i] for i in widened[-share:]) > budget  # the last share
        else:
            too_big = (len(current) // world_size + 1) * longest > budget
        if current and too_big:
            groups.append(current)
            current = []
        current = current + unit
    if current:
        groups.append(current)
    return groups


def row_lengths(attention_mask: Tensor, response_length: int, *, packed: bool = False) -> list[int]:
    """Each row's padded forward length: the batch's prompt width plus 1 + the index of the row's
    last real response token (the positions a call cut after that row's response would run).
    `packed`: its real tokens up to that token instead (ops/packing.py `real_lengths`)."""
    if packed:
        return real_lengths(attention_mask, response_length).tolist()
    prompt_width = attention_mask.shape[1] - response_length
    if response_length < 1:
        return [prompt_width] * attention_mask.shape[0]
    spans = response_spans(attention_mask[:, prompt_width:])
    return [prompt_width + int(span) for span in spans.tolist()]


def token_groups(
    lengths: Sequence[int], rows: Tensor, budget: int, world_size: int = 1, *, packed: bool = False
) -> list[Tensor]:
    """`rows` ([n] long, n a multiple of `world_size`) grouped by `pack_for_ranks` on their
    `lengths` (indexed by row), as index tensors of rows on `rows`' device."""
    chosen = rows.tolist()
    groups = pack_for_ranks([lengths[r] for r in chosen], budget, world_size, packed=packed)
    return [rows[torch.tensor(group, dtype=torch.long, device=rows.device)] for group in groups]
