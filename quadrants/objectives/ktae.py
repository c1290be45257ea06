"""KTAE (Sun et al. 2025, arXiv 2505.16826, "A Model-Free Algorithm to Key-Tokens Advantage
Estimation in Mathematical Reasoning"): a token-level advantage from how much more often a token
appears in the group's correct rollouts than in its wrong ones.

For each group with both correct and wrong rollouts, and each token id v in its responses:

    contingency table   a = #correct rollouts containing v   b = #wrong containing v
                        c = #correct − a                     d = #wrong − b
    p  = two-sided Fisher exact p-value of (a, b, c, d);  F = exp(−2p), 0 when p = 1
    IG = information gain (bits) of "contains v" about correctness
    h  = asin √(a / (a + c)) − asin √(b / (b + d))                       (Cohen's h)
    tf = BM25-style term frequencies of v in the correct / wrong tokens (k1 2, b 0.5)
    x  = h + γ (tf_c / (tf_w + 1e−5) − tf_w / (tf_c + 1e−5))
    w_v = top · 2 (sigmoid((α F + β IG) x / (α + β)) − 1/2)             in (−top, top)

and the token advantage is Â_t = Â + w_{o_t} (Â the GRPO advantage), used in the clipped surrogate.
A group whose rollouts are all correct or all wrong gets w = 0. Defaults and every constant are the
authors' code (xiaolizh1/KTAE @ ea9fb77, verl/workers/actor/compute_key_tokens.py and
compute_ktae_outcome_advantage_and_keytokens in verl/trainer/ppo/core_algos.py: α = β = γ = 1,
top 1; "correct" is a reward > 0). `zero_token_ids`: ids whose weight is forced to 0; the authors
hard-code 151643, Qwen2.5's <|endoftext|> (set it to your tokenizer's end-of-text id). The surrogate
is DAPO's recipe (clip 0.2/0.28, dynamic sampling), the authors' DAPO+KTAE setting, with the dual
clip c = 10 on negative token advantages that both their scripts set
(recipe/dapo/run_dapo_qwen2.5_{1.5b,7b}.sh: actor_rollout_ref.actor.clip_ratio_c=10.0; their 7B
script also uses ε_high 0.24, their 1.5B one 0.28).

Scope: one group at a time, over its response tokens (padding excluded), on the batch the objective
is called on; a mini-batch never splits a group (TokenBatch keeps groups whole).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch, fraction
from quadrants.objectives.common import ppo_token_loss, validate_clip
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.aggregation import masked_mean

_TF_K1, _TF_B = 2.0, 0.5  # the authors' BM25 constants (compute_tf)


def _log_comb(n: Tensor, k: Tensor) -> Tensor:
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def fisher_exact_p(a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """Two-sided Fisher exact p-values of 2x2 tables [U] (the sum of the hypergeometric
    probabilities no larger than the observed one; the authors' rule, exact `<=`)."""
    row1, col1, n = a + b, a + c, a + b + c + d
    k_min = (row1 + col1 - n).clamp_min(0)
    k_max = torch.minimum(row1, col1)
    k = torch.arange(int(k_max.max().item()) + 1, dtype=a.dtype, device=a.device)[None, :]
    inside = (k >= k_min[:, None]) & (k <= k_max[:, None])
    col1_, row1_, n_ = col1[:, None], row1[:, None], n[:, None]
    p_k = torch.exp(_log_comb(col1_, k) + _log_comb(n_ - col1_, row1_ - k) - _log_comb(n_, row1_))
    p_k = p_k * inside
    p_obs = torch.exp(_log_comb(col1, a) + _log_comb(n - col1, row1 - a) - _log_comb(n, row1))
    return torch.where((p_k <= p_obs[:, None]) & inside, p_k, torch.zeros_like(p_k)).sum(-1)


def information_gain(a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """IG in bits of the presence of a token about correctness, per table [U]."""

    def h(p: Tensor) -> Tensor:
        return torch.where(p > 0, -p * torch.log2(p.clamp_min(1e-30)), torch.zeros_like(p))

    n = a + b + c + d
    h_y = h((a + c) / n) + h((b + d) / n)

    def h_cond(x1: Tensor, x2: Tensor) -> Tensor:
        total = x1 + x2
        safe = total.clamp_min(1e-30)
        return torch.where(total > 0, h(x1 / safe) + h(x2 / safe), torch.zeros_like(total))

    h_y_x = (a + b) / n * h_cond(a, b) + (c + d) / n * h_cond(c, d)
    return torch.where(n > 0, h_y - h_y_x, torch.zeros_like(n))


def key_token_weights(
    ids: Tensor,
    mask: Tensor,
    correct: Tensor,
    *,
    alpha: float,
    beta: float,
    gamma: float,
    top: float,
    zero_token_ids: Sequence[int],
) -> Tensor:
    """KTAE's weight of every response token of ONE group, [n, T] float (0 off the mask).

    Args:
        ids: [n, T] long response token ids; mask: [n, T] bool; correct: [n] bool.
    """
    weights = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    n_correct, n_wrong = int(correct.sum()), int((~correct).sum())
    if n_correct == 0 or n_wrong == 0 or not mask.any():
        return weights
    vocab, inverse = torch.unique(ids[mask], return_inverse=True)  # [U], [M]
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(ids)[mask]  # [M]
    present = torch.zeros(ids.shape[0], vocab.numel(), device=ids.device)
    present[rows, inverse] = 1.0  # [n, U]: response i contains id u
    a = present[correct].sum(0)
    b = present[~correct].sum(0)
    c, d = n_correct - a, n_wrong - b
    fisher_p = fisher_exact_p(a, b, c, d)
    fisher = torch.where(fisher_p != 1.0, torch.exp(-2 * fisher_p), torch.zeros_like(fisher_p))
    ig = information_gain(a, b, c, d) if beta else torch.zeros_like(a)
    cohen = torch.asin(torch.sqrt((a / (a + c + 1e-10)).clamp(0, 1))) - torch.asin(
        torch.sqrt((b / (b + d + 1e-10)).clamp(0, 1))
    )
    x = cohen
    if gamma:
        token_correct = correct[:, None].expand_as(ids)[mask]  # [M]
        occ_c = torch.zeros_like(a).index_add_(0, inverse, token_correct.float())
        occ_w = torch.zeros_like(a).index_add_(0, inverse, (~token_correct).float())
        total_c, total_w = token_correct.sum().float(), (~token_correct).sum().float()
        avg = (total_c + total_w) / 2
        k_c = _TF_K1 * (1 - _TF_B + _TF_B * total_c / avg)
        k_w = _TF_K1 * (1 - _TF_B + _TF_B * total_w / avg)
        f_c, f_w = occ_c / total_c, occ_w / total_w
        tf_c = f_c * (_TF_K1 + 1) / (f_c + k_c)
        tf_w = f_w * (_TF_K1 + 1) / (f_w + k_w)
        x = x + gamma * (tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5))
    score = (alpha * (fisher if alpha else torch.zeros_like(a)) + beta * ig) * x / (alpha + beta)
    per_id = (torch.sigmoid(score) - 0.5) * 2 * top  # [U]
    if zero_token_ids:
        zero = torch.isin(vocab, torch.tensor(list(zero_token_ids), device=ids.device))
        per_id = torch.where(zero, torch.zeros_like(per_id), per_id)
    weights[mask] = per_id[inverse]
    return weights


def validate_ktae(
    *,
    alpha: float,
    beta: float,
    gamma: float,
    top: float,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    for key, value in (("alpha", alpha), ("beta", beta), ("gamma", gamma), ("top", top)):
        check_range(key, value, low=0.0)
    if alpha + beta <= 0:
        raise ValueError(f"alpha + beta = {alpha + beta} must be > 0 (their weighted mean)")


@register_objective(
    "ktae",
    validate=validate_ktae,
    batch_denominator=True,
    decomposable=False,
    decomposition=(
        "key-token weights are statistics over the rows of each group present in the mini-batch"
    ),
)
def ktae(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    gamma: float = 1.0,
    top: float = 1.0,
    zero_token_ids: Sequence[int] = (151643,),
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = 10.0,
    dynamic_sampling: bool = True,
) -> ObjectiveOutput:
    mask = batch.response_mask
    ids = batch.sequences[:, -batch.response_length :]  # [B, T]
    correct = batch.rewards > 0  # the authors' split: a reward > 0 is correct
    weights = torch.zeros_like(batch.old_logp)
    for group in torch.unique(batch.group_ids).tolist():
        rows = batch.group_ids == group
        weights[rows] = key_token_weights(
            ids[rows],
            mask[rows],
            correct[rows],
            alpha=alpha,
            beta=beta,
            gamma=gamma,
            top=top,
            zero_token_ids=zero_token_ids,
        ).to(weights.dtype)
    token_adv = batch.advantages.float()[:, None] + weights
    return ppo_token_loss(
        batch,
        policy,
        token_adv,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
        dynamic_sampling=dynamic_sampling,
        metrics={
            "key_weight_abs_mean": masked_mean(weights.abs(), mask),
            "key_weight_positive_frac": fraction(weights > 0, mask),
        },
    )
