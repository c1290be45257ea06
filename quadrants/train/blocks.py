"""Prompts in blocks: a step's prompts are generated in blocks (one generate call each), dealt to
ranks and gathered in block order (train/collect.py `collect_rollouts`); refill rounds add more
blocks (train/refill.py). Block b keeps a seed of its own (quadrants/seeds.py `rollout`), so the
same blocks, seeds and global order come out for any number of ranks; `concat_rollouts` joins the
blocks' rollouts.

Pure torch: no config, no model. Shape legend: **B** sequences · **P** prompt tokens · **T**
response tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from quadrants.rollout.engine import Rollouts


def _pad(tensor: Tensor, width: int, value: float | int | bool, *, left: bool) -> Tensor:
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    fill = torch.full((tensor.shape[0], missing), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([fill, tensor] if left else [tensor, fill], dim=1)


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """One Rollouts from blocks in order: prompts re-left-padded to the largest P, responses
    re-right-padded to the largest T, group ids offset so they stay unique.
    [sum B, max P / max T]."""
    if len(parts) == 1:
        return parts[0]
    width_p = max(p.prompt_ids.shape[1] for p in parts)
    width_t = max(p.response_ids.shape[1] for p in parts)
    offsets, total = [], 0
    for p in parts:
        offsets.append(total)
        total += int(p.group_ids.max()) + 1 if p.group_ids.numel() else 0
    return Rollouts(
        prompt_ids=torch.cat([_pad(p.prompt_ids, width_p, pad_id, left=True) for p in parts]),
        prompt_mask=torch.cat([_pad(p.prompt_mask, width_p, False, left=True) for p in parts]),
        response_ids=torch.cat([_pad(p.response_ids, width_t, pad_id, left=False) for p in parts]),
        response_mask=torch.cat([_pad(p.response_mask, width_t, False, left=False) for p in parts]),
        behaviour_logp=torch.cat([_pad(p.behaviour_logp, width_t, 0.0, left=False) for p in parts]),
        texts=[t for p in parts for t in p.texts],
        group_ids=torch.cat([p.group_ids + o for p, o in zip(parts, offsets)]),
        finished=torch.cat([p.finished for p in parts]),
        behaviour_entropy=None
        if any(p.behaviour_entropy is None for p in parts)
        else torch.cat([_pad(p.behaviour_entropy, width_t, 0.0, left=False) for p in parts]),
    )
