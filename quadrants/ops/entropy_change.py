"""The entropy change of one update attributed to token sets (the quadrants): Cui et al.'s
covariance term, predicted, against the entropy change measured after the update.

Cui et al. 2025 (arXiv 2505.22617, §3) show that for a softmax policy one policy-gradient step moves
the entropy at a state s by about

    H(π_new | s) − H(π_old | s) ≈ −η · Cov_{a ~ π_old(·|s)}( log π_old(a|s), A(s, a) )

(natural policy gradient; for vanilla PG the second argument is π_old(a|s) · A(s, a)). A positive
covariance (likely tokens rewarded, unlikely ones penalised) lowers the entropy; a negative one
raises it. Their batch estimate (§4, and `compute_policy_loss_kl_cov` / `_clip_cov` in
PRIME-RL/Entropy-Mechanism-of-RL, verl/trainer/ppo/core_algos.py) is the token-wise centred product

    cov_t = (A_t − mean A)(log π_t − mean log π),   means over the batch's N tokens,

`quadrants.ops.covariance.token_covariance`. Here it is taken with π_old, the policy the batch was
sampled from (the one the update starts at), over the N tokens of the loss's denominator (the
tokens the update counts: a group DAPO's dynamic sampling dropped is not among them), centred and
divided over those same N, and split over disjoint token sets S_q (the four quadrants):

    cov_q = Σ_{t ∈ S_q} cov_t / N,        Σ_q cov_q = mean_t cov_t    (the batch covariance).

A_t is the *applied* per-token weight, w_t = −N ∂loss/∂log π_t at ratio 1
(objectives/loss.py `applied_weights`): the group advantage for GRPO/DAPO, the reshaped one for an
objective that reshapes it, 0 where the update does not train.

**The quadrant signs hold by construction.** A positive quadrant's tokens have A > 0 and a
negative one's A < 0, and high-entropy tokens are the ones sampled with low log-probs, so each
quadrant's centred products take a sign its definition fixes (PLR and NHR positive, PHR and NLR
negative, whenever the batch means sit between the quadrants), whatever the update does.
Agreement of a quadrant's sign with its measured entropy change is therefore no evidence for the
mechanism; only how the term moves with the measured change is (docs/science.md).

The batch centring compares tokens of different states. Within one state, E_{a ~ π(·|s)} log π(a|s)
= −H(s), so a one-sample estimate of the per-state covariance that needs no batch mean is

    cov_state_t = (log π_t + H_t) · A_t,      E_a[(log π(a|s) + H(s)) A(s, a)] = Cov_a(log π, A)

(exactly, whatever E_a[A]; H_t the behaviour entropy of the token's step, at the same temperature
as log π_t). It is logged beside the paper's term (`cov_state`), as a second predictor.

The sharper test is within one step, over tokens: the per-state term predicts each token's own
entropy change, ΔH_t ∝ −(log π_t + H_t) w_t, so their correlation over a step's measured tokens
(`token_correlation`) asks the mechanism about thousands of states at once, with no reliance on
the step-to-step drift of the batch.

The measured side is the change of each token's full-vocabulary entropy, the updated policy's minus
the behaviour policy's, on the same tokens: ΔH_t = H_new,t − H_old,t. Its part per set is
frac_q · mean_{t ∈ S_q} ΔH_t (frac_q = |S_q| / N), and the four parts sum to the change of the
batch's mean token entropy. The prediction says: cov_q > 0 goes with a negative part, and the
larger |cov_q|, the larger the part; the scale (η, Adam's preconditioning) is not predicted, so the
two are compared by their correlation over steps (docs/science.md).

Shape legend: **B** sequences · **T** response tokens · **Q** token sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from quadrants.ops.covariance import token_covariance


def covariance_by_set(
    advantages: Tensor, logp: Tensor, response_mask: Tensor, sets: Sequence[Tensor]
) -> Tensor:
    """cov_q = Σ_{t ∈ S_q} cov_t / N for each set: its part of the batch covariance.

    Args:
        advantages: [B, T] float, the weight each token's update applied (`applied_weights`; 0 on
            tokens the update does not train).
        logp: [B, T] float, the behaviour policy's log-probs of the sampled tokens.
        response_mask: [B, T] bool, the N tokens both means of cov_t and the division are over
            (the loss's denominator).
        sets: Q masks [B, T] bool (tokens outside `response_mask` are ignored).

    Returns:
        [Q] float32; all 0 when there are no response tokens.
    """
    cov = token_covariance(advantages.float(), logp.float(), response_mask)  # [B, T]
    total = response_mask.sum().clamp_min(1)
    return torch.stack([(cov * (s & response_mask)).sum() for s in sets]) / total


def state_covariance_by_set(
    advantages: Tensor,
    logp: Tensor,
    entropy: Tensor,
    response_mask: Tensor,
    sets: Sequence[Tensor],
) -> Tensor:
    """Σ_{t ∈ S_q} (log π_t + H_t) A_t / N for each set: the per-state covariance estimate.

    Args:
        advantages: [B, T] float, the applied advantage (as in `covariance_by_set`).
        logp: [B, T] float, behaviour log-probs of the sampled tokens.
        entropy: [B, T] float, behaviour entropy of each token's step (nats).
        response_mask: [B, T] bool, N tokens.
        sets: Q masks [B, T] bool.

    Returns:
        [Q] float32; all 0 when there are no response tokens.
    """
    cov = (logp.float() + entropy.float()) * advantages.float() * response_mask  # [B, T]
    total = response_mask.sum().clamp_min(1)
    return torch.stack([(cov * (s & response_mask)).sum() for s in sets]) / total


def signed_shares(parts: Tensor) -> Tensor:
    """parts / Σ |parts|: each set's share of the covariance, signed.

    When every part has the same sign this is the plain share (the shares sum to 1, or −1); when
    the sets pull opposite ways it stays within [−1, 1] where parts / Σ parts would blow up near a
    zero total. All 0 when every part is 0.

    Args:
        parts: [Q] float.

    Returns:
        [Q] float.
    """
    return parts / parts.abs().sum().clamp_min(torch.finfo(parts.dtype).tiny)


def entropy_change(entropy_after: Tensor, entropy_before: Tensor, mask: Tensor) -> Tensor:
    """ΔH_t = H_after,t − H_before,t on `mask`, 0 elsewhere. [n, T] float, [n, T] float,
    [n, T] bool -> [n, T] float."""
    return (entropy_after.float() - entropy_before.float()) * mask


def state_term(weights: Tensor, logp: Tensor, entropy: Tensor) -> Tensor:
    """−(log π_t + H_t) w_t: the per-state prediction of token t's own entropy change (its sign
    and relative size; the scale is the step size's). [B, T] float x3 -> [B, T] float."""
    return -(logp.float() + entropy.float()) * weights.float()


def token_correlation(predicted: Tensor, measured: Tensor, mask: Tensor) -> Tensor:
    """Pearson correlation over the tokens of `mask` of the predicted and measured per-token
    entropy change: the within-step test. [n, T] float, [n, T] float, [n, T] bool -> [] float;
    NaN with fewer than 3 tokens or a constant side."""
    x, y = predicted[mask].double(), measured[mask].double()
    if x.numel() < 3:
        return torch.tensor(float("nan"))
    x, y = x - x.mean(), y - y.mean()
    norm = (x.square().sum() * y.square().sum()).sqrt()
    if not norm > 0:
        return torch.tensor(float("nan"))
    return ((x * y).sum() / norm).float()
