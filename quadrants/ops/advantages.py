"""GRPO group-relative advantages.

A_i = (r_i - mean_g r) / (std_g r + eps) over the G rollouts of the same prompt (Shao et al. 2024),
or r_i - mean_g r with `normalize_std=False` (Dr. GRPO, Liu et al. 2025). The std is the sample std
(Bessel-corrected, as torch.std in TRL and verl). A group whose rewards are all equal, and a
singleton group, carry no relative information: their advantages are exactly 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from quadrants.ops.groups import compact_group_ids, group_sum


def group_advantages(
    rewards: Tensor, group_ids: Tensor, *, normalize_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """Group-normalised advantages, one per sequence.

    Args:
        rewards: [B] float.
        group_ids: [B] long, the prompt each sequence answers.
        normalize_std: divide by the group's sample std (GRPO) or not (Dr. GRPO).
        eps: added to the std before dividing.

    Returns:
        [B] float advantages; 0 for all-equal and singleton groups.
    """
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must be [B]"
        )
    rewards = rewards.float()
    index, k = compact_group_ids(group_ids)
    ones = torch.ones_like(rewards)
    size = group_sum(ones, index, k)  # [K]
    mean = group_sum(rewards, index, k) / size
    centred = rewards - mean[index]  # [B]
    std = (group_sum(centred**2, index, k) / (size - 1).clamp_min(1)).sqrt()  # sample std, [K]
    adv = centred / (std[index] + eps) if normalize_std else centred
    # "all equal" is decided exactly (max == min), not by std > 0: the float32 mean of [0.9] * 3
    # misses 0.9 by an ulp and would otherwise turn a constant group into ±0.06 advantages.
    informative = (size[index] > 1) & ~constant_reward_groups(rewards, group_ids)  # [B]
    return torch.where(informative, adv, torch.zeros_like(adv))


def constant_reward_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """[B] bool: True for sequences whose group has all-equal rewards (DAPO's
    dynamic-sampling drop)."""
    index, k = compact_group_ids(group_ids)
    rewards = rewards.float()
    big = torch.finfo(rewards.dtype).max
    gmax = torch.full((k,), -big, dtype=rewards.dtype, device=rewards.device).scatter_reduce(
        0, index, rewards, "amax"
    )
    gmin = torch.full((k,), big, dtype=rewards.dtype, device=rewards.device).scatter_reduce(
        0, index, rewards, "amin"
    )
    return (gmax == gmin)[index]
