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

A row longer than the budget runs alone (its own micro-batch; with W ranks, its unit of W rows):
the packing never fails. validate_config refuses a budget below `rollout.max_new_tokens`, where
even a response alone would not fit.

Pure python/torch: no config, no model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from quadrants.ops.length_buckets import response_spans


def pack_by_tokens(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Row indices grouped into micro-batches of at most `budget` padded tokens.

    Rows are taken in order of length (ascending, ties by index) and appended to the current group
    while len(group) x its longest row <= budget; a row that would break that starts a new group. A
    row longer than `budget` is alone in its group. Deterministic: a function of `lengths` alone.

    >>> pack_by_tokens([5, 3, 8, 3, 2], 10)
    [[4, 1, 3], [0], [2]]
    """
    return pack_for_ranks(lengths, budget, 1)


def pack_for_ranks(lengths: Sequence[int], budget: int, world_size: int) -> list[list[int]]:
    """`pack_by_tokens` for W = `world_size` ranks that split each micro-batch into W contiguous
    equal shares: rows sorted by length are cut into units of W consecutive rows (len(lengths) must
    be a multiple of W), and units are packed so that each rank's share costs at most `budget`:
    (rows / W) x the group's longest row <= budget. Every rank computes the same groups from the
    same lengths, so all run equally many micro-batches (FSDP's collectives need that).

    >>> pack_for_ranks([5, 3, 8, 3, 2, 1], 10, 2)
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
        if current and (len(current) // world_size + 1) * longest > budget:
            groups.append(current)
            current = []
        current = current + unit
    if current:
        groups.append(current)
    return groups


def row_lengths(attention_mask: Tensor, response_length: int) -> list[int]:
    """Each row's padded forward length: the batch's prompt width plus 1 + the index of the row's
    last real response token (the positions a call cut after that row's response would run)."""
    prompt_width = attention_mask.shape[1] - response_length
    if response_length < 1:
        return [prompt_width] * attention_mask.shape[0]
    spans = response_spans(attention_mask[:, prompt_width:])
    return [prompt_width + int(span) for span in spans.tolist()]


def token_groups(
    lengths: Sequence[int], rows: Tensor, budget: int, world_size: int = 1
) -> list[Tensor]:
    """`rows` ([n] long, n a multiple of `world_size`) packed by `pack_for_ranks` on their
    `lengths` (indexed by row), as index tensors of rows on `rows`' device."""
    chosen = rows.tolist()
    packed = pack_for_ranks([lengths[r] for r in chosen], budget, world_size)
    return [rows[torch.tensor(group, dtype=torch.long, device=rows.device)] for group in packed]
