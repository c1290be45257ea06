"""Per-group reductions over sequences and tokens (a group = the G rollouts of one prompt).

Shape legend: **B** sequences · **T** response tokens · **K** groups.
Group ids may be any non-negative longs; they are compacted to 0..K-1 internally.
"""

from __future__ import annotations

import torch
from torch import Tensor


def compact_group_ids(group_ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary group ids to 0..K-1.

    Args:
        group_ids: [B] long.

    Returns:
        ([B] long in 0..K-1, K).
    """
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(uniq.numel())


def group_sum(values: Tensor, group_index: Tensor, num_groups: int) -> Tensor:
    """Sum of `values` [B] per group -> [K]."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, group_index, values
    )


def group_token_mean_std(
    values: Tensor, response_mask: Tensor, group_ids: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Mean and (population) std of token values over all response tokens of each group.

    Used for the paper's entropy threshold (the group mean) and HAPO's (µ_H, σ_H). The std is the
    population std (divide by the token count): the group's tokens are the whole population here.

    Args:
        values: [B, T] float.
        response_mask: [B, T] bool.
        group_ids: [B] long.

    Returns:
        (mean [B], std [B], token_count [B]) broadcast back to each sequence of the group; a group
        with no response tokens gets mean 0, std 0, count 0.
    """
    index, k = compact_group_ids(group_ids)
    mask = response_mask.to(values.dtype)
    count = group_sum(mask.sum(-1), index, k)  # [K]
    total = group_sum((values * mask).sum(-1), index, k)  # [K]
    mean = total / count.clamp_min(1)
    sq_dev = ((values - mean[index][:, None]) ** 2 * mask).sum(-1)  # [B]
    var = group_sum(sq_dev, index, k) / count.clamp_min(1)
    return mean[index], var.sqrt()[index], count[index]


def grouped_order(group_ids: Tensor, generator: torch.Generator) -> Tensor:
    """A row order that keeps each group's rows together: the K groups in a random order (one
    permutation drawn from `generator`), each group's rows in their batch order.

    Cut into mini-batches of a multiple of the group size, every mini-batch then holds whole groups
    (query-preserved mini-batching, Cheng et al., arXiv 2605.08666: a prompt's positive and negative
    responses update together).

    Args:
        group_ids: [B] long (any device; the permutation is drawn on the CPU).
        generator: a CPU generator.

    Returns:
        [B] long on the CPU, a permutation of 0..B-1.
    """
    index, num_groups = compact_group_ids(group_ids.cpu())
    position = torch.empty(num_groups, dtype=torch.long)
    position[torch.randperm(num_groups, generator=generator)] = torch.arange(num_groups)
    return torch.sort(position[index], stable=True).indices
