"""KL-Cov (Cui et al. 2025, arXiv 2505.22617 §4): a KL penalty on the highest-covariance tokens.

    loss_t = −A_t r_t + coef · |logπ_t − logπ_old,t| · 1[t ∈ top-k by cov_t]      (no ratio clip)

k = max(floor(fraction · N), 1) over the mini-batch's N response tokens. `fraction` is a FRACTION
(default 2e-3); the reference code's `k_percent` is a percent (0.2 there means 0.2 % = 2e-3 here).
Scope: the mini-batch, as in the reference implementation.

The penalty's gradient at logπ = logπ_old (the first update of a step) is coef · sign(rounding):
old log-probs from the trainer's own forward make that sign agree with the update's forward, so this
objective keeps the behaviour pass (`recomputed_old_logp`, see quadrants/run/settings.py).
"""

from __future__ import annotations

from quadrants.objectives.batch import (
    ObjectiveOutput,
    PolicyOutput,
    TokenBatch,
    token_advantages,
    token_mean,
    token_share,
)
from quadrants.objectives.batch import fraction as token_fraction
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.covariance import selection_count, token_covariance, topk_mask
from quadrants.ops.surrogate import importance_ratio


def validate_kl_cov(*, fraction: float, coef: float, **_: object) -> None:
    check_range("fraction", fraction, low=0.0, high=1.0, low_open=True)
    check_range("coef", coef, low=0.0)


@register_objective(
    "kl_cov",
    validate=validate_kl_cov,
    recomputed_old_logp=True,
    decomposable=False,
    decomposition=(
        "the covariance is centred on the mini-batch's means, and the top k by it are taken over "
        "the whole mini-batch"
    ),
)
def kl_cov(
    batch: TokenBatch, policy: PolicyOutput, *, fraction: float = 2e-3, coef: float = 1.0
) -> ObjectiveOutput:
    mask = batch.response_mask
    adv = token_advantages(batch)
    ratio = importance_ratio(policy.logp, batch.old_logp)
    cov = token_covariance(adv, policy.logp, mask)  # [B, T]
    selected = topk_mask(cov, mask, selection_count(fraction, int(mask.sum())))  # [B, T]
    penalty = coef * (policy.logp - batch.old_logp).abs() * selected
    # k = selection_count(fraction, |mask|) tokens are selected whatever the policy: a batch metric
    metrics = {"selected_frac": token_fraction(selected, mask)}
    policy_metrics = {
        "ratio_mean": token_mean(ratio, mask),
        "kl_cov_penalty": token_mean(penalty, mask),
        # selected tokens at logπ = logπ_old exactly: penalty and gradient 0 (torch's d|x|/dx is
        # sgn(x), 0 at 0: pytorch tools/autograd/derivatives.yaml). 1 with one update per step
        "penalty_inert_frac": token_share(policy.logp.detach() == batch.old_logp, selected),
    }
    return ObjectiveOutput((-adv * ratio + penalty) * mask, metrics, policy_metrics=policy_metrics)
