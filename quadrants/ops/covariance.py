"""Token covariance and token selection for Clip-Cov / KL-Cov (Cui et al. 2025, arXiv 2505.22617).

cov_t = (A_t − mean A)(logπ_t − mean logπ), means over the response tokens given (the paper's
reference code takes them over the micro-batch it is called on).

Shape legend: **B** sequences · **T** response tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from quadrants.ops.aggregation import masked_mean


def token_covariance(advantages: Tensor, logp: Tensor, response_mask: Tensor) -> Tensor:
    """Centred product of token advantage and log-prob; 0 outside the mask.

    Args:
        advantages: [B, T] float token advantages.
        logp: [B, T] float current log-probs (detached here: selection carries no gradient).
        response_mask: [B, T] bool.

    Returns:
        [B, T] float cov_t.
    """
    logp = logp.detach()
    centred_adv = advantages - masked_mean(advantages, response_mask)
    centred_logp = logp - masked_mean(logp, response_mask)
    return centred_adv * centred_logp * response_mask


def selection_count(fraction: float, num_tokens: int) -> int:
    """Tokens to select: max(floor(fraction * num_tokens), 1), or 0 when there are no tokens.

    The floor-with-a-minimum-of-one rule is the reference code's; it means a tiny batch always
    touches one token, which the effective fraction metric makes visible.
    """
    if num_tokens <= 0 or fraction <= 0:
        return 0
    return max(int(fraction * num_tokens), 1)


def topk_mask(scores: Tensor, candidates: Tensor, k: int) -> Tensor:
    """[B, T] bool with the k highest-scoring candidate tokens (fewer if there
    are fewer candidates)."""
    flat = torch.where(candidates, scores, torch.full_like(scores, -torch.inf)).reshape(-1)
    k = min(k, int(candidates.sum()))
    out = torch.zeros(flat.shape, dtype=torch.bool, device=scores.device)
    if k > 0:
        out[torch.topk(flat, k).indices] = True
    return out.reshape(scores.shape)


def random_subset_mask(candidates: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """[B, T] bool with k candidate tokens drawn uniformly without replacement (all if fewer), by
    one `randperm` of the candidates from `generator` (on the candidates' device); torch's default
    generators are not touched."""
    idx = candidates.reshape(-1).nonzero().squeeze(-1)
    out = torch.zeros(candidates.numel(), dtype=torch.bool, device=candidates.device)
    if idx.numel() > 0 and k > 0:
        perm = torch.randperm(idx.numel(), generator=generator, device=candidates.device)
        out[idx[perm[:k]]] = True
    return out.reshape(candidates.shape)
