"""DAPO's overlong reward shaping (Yu et al. 2025, arXiv 2503.14476, Eq. 13): a soft length penalty.

    R_length(y) = 0                                   |y| <= L_max - L_cache
                  ((L_max - L_cache) - |y|) / L_cache   L_max - L_cache < |y| <= L_max
                  -1                                  |y| > L_max

added to the correctness reward, L_max the response limit (rollout.max_new_tokens) and L_cache the
buffer (rollout.overlong_buffer). A response cannot exceed L_max here (generation stops there), so
the penalty runs linearly from 0 at L_max - L_cache to -1 at L_max. `penalty` scales it, as verl's
`overlong_penalty_factor` does (1 in the paper).

Shape legend: **B** sequences.
"""

from __future__ import annotations

import torch
from torch import Tensor


def overlong_penalty(
    lengths: Tensor, *, max_length: int, buffer: int, penalty: float = 1.0
) -> Tensor:
    """The soft overlong penalty per response (<= 0).

    Args:
        lengths: [B] int or float, generated tokens per response (EOS included).
        max_length: L_max, the response limit.
        buffer: L_cache, the length of the penalised stretch before L_max; 0 = no penalty.
        penalty: the penalty at L_max (and beyond) is -penalty.

    Returns:
        [B] float32, 0 for responses of at most max_length - buffer tokens.
    """
    if buffer <= 0:
        return torch.zeros(lengths.shape, dtype=torch.float32, device=lengths.device)
    exceed = lengths.float() - (max_length - buffer)  # [B]
    # as verl's DAPO reward manager: min(-exceed / buffer * penalty, 0); capped
    # at -penalty past L_max
    return torch.clamp(-exceed / buffer * penalty, min=-penalty, max=0.0)
