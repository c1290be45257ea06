"""STEER: the clipped surrogate reweighted per token by |Ω_t|, its estimated entropy change,
Ω_t = (Â / π_old) p (1 − p)(log p + H_t), mapped onto [w_min, w_max]; and the authors' own
compute_policy_loss_with_entropy on the same tensors."""

import math

import pytest
import torch

from quadrants.objectives.batch import token_advantages
from quadrants.objectives.registry import resolve_objective
from quadrants.objectives.steer import entropy_change_weights

from .helpers import batch, close, grad_of, random_batch, run
from .upstream import steer_functions

# One group, rewards [2, -2] -> A = [+2, -2]; ratio 1 (π_old = p), so Ω = A (1 − p)(log p + H):
#   p [[0.5, 0.8], [0.5, 0.2]], H [[0.5, 0.1], [1.0, 0.3]]
#   |Ω| (0,0) 2·0.5·|−0.693147 + 0.5|  = 0.1931472   (0,1) 2·0.2·|−0.223144 + 0.1| = 0.0492574
#       (1,0) 2·0.5·|−0.693147 + 1.0|  = 0.3068528   (1,1) 2·0.8·|−1.609438 + 0.3| = 2.0951007
# linear onto [0.8, 1.2]: w = 1.2 − (|Ω| − 0.0492574) · 0.4 / 2.0458433
#   w = [[1.1718669, 1.2], [1.1496354, 0.8]]
#   loss (−2·1.1718669 − 2·1.2 + 2·1.1496354 + 2·0.8) / 4 = −0.8444631 / 4 = −0.2111158
# exponential: k = −ln 0.8 / 2.0951007 = 0.1065072; w = exp(−k|Ω|) in [0.8, 1]
#   w = [[0.9796386, 0.9947675], [0.9678462, 0.8]] -> loss −0.4131196 / 4 = −0.1032799
P = [[0.5, 0.8], [0.5, 0.2]]
ENTROPY = [[0.5, 0.1], [1.0, 0.3]]


def _batch():
    logp = [[math.log(p) for p in row] for row in P]
    tb = batch(entropy=ENTROPY, rewards=[2.0, -2.0], group_ids=[0, 0], old_logp=logp)
    return tb, tb.old_logp.clone().requires_grad_(True)


@pytest.mark.parametrize(
    "mapping, weights",
    [
        ("linear", [[1.1718669, 1.2], [1.1496354, 0.8]]),
        ("exponential", [[0.9796386, 0.9947675], [0.9678462, 0.8]]),
    ],
)
def test_token_weights_by_hand(mapping, weights):
    tb, logp = _batch()
    loss, metrics = run("steer", tb, logp, mapping=mapping)
    w = torch.tensor(weights)
    sign = torch.tensor([[-2.0, -2.0], [2.0, 2.0]])  # −Â at ratio 1
    close(loss, (sign * w).sum() / 4)
    close(grad_of(loss, logp), sign * w / 4)  # the weights carry no gradient
    close(metrics["token_weight_mean"], w.mean())


def test_the_range_is_per_block_of_rows_by_hand():
    # weight_rows 1: each response its own min/max of |Ω| (the numbers above)
    #   row 0 |Ω| [0.1931472, 0.0492574]: max -> 0.8, min -> 1.2
    #   row 1 |Ω| [0.3068528, 2.0951007]: min -> 1.2, max -> 0.8
    #   loss (−2·0.8 − 2·1.2 + 2·1.2 + 2·0.8) / 4 = 0
    tb, logp = _batch()
    loss, metrics = run("steer", tb, logp, weight_rows=1)
    w = torch.tensor([[0.8, 1.2], [1.2, 0.8]])
    sign = torch.tensor([[-2.0, -2.0], [2.0, 2.0]])
    close(loss, 0.0)
    close(grad_of(loss, logp), sign * w / 4)
    close(metrics["token_weight_mean"], 1.0)
    # 2 rows per block (the batch) and no blocks (null) both give the whole batch's range
    for rows in (2, None):
        _, metrics = run("steer", tb, logp.detach(), weight_rows=rows)
        close(metrics["token_weight_mean"], (1.1718669 + 1.2 + 1.1496354 + 0.8) / 4)


def test_all_equal_omega_gives_the_middle_weight():
    # one token per response and the same |Ω| on both: linear weight (0.8 + 1.2) / 2 = 1
    tb = batch(entropy=[[0.5], [0.5]], rewards=[2.0, -2.0], group_ids=[0, 0], old_logp=[[-1.0]] * 2)
    loss, metrics = run("steer", tb, tb.old_logp.clone().requires_grad_(True))
    close(metrics["token_weight_mean"], 1.0)
    close(loss, 0.0)  # (−2 + 2) / 2


def test_validation_names_the_key():
    for params, pattern in (
        ({"mapping": "log"}, r"^mapping='log' is unknown"),
        ({"weight_min": 1.3}, r"^weight_min=1.3 must be <= weight_max=1.2"),
        ({"weight_min": 0.0}, r"^weight_min=0.0 is out of range"),
        ({"mapping": "exponential", "weight_min": 1.1}, r"^weight_min=1.1 is out of range"),
        ({"clip_ratio_c": 0.5}, r"^clip_ratio_c=0.5 is out of range"),
        ({"weight_rows": 0}, r"^weight_rows=0 must be a whole number >= 1"),
    ):
        with pytest.raises(ValueError, match=pattern):
            resolve_objective("steer", params)


@pytest.mark.parametrize("mapping", ["linear", "exponential"])
def test_matches_the_authors_loss_on_the_same_tensors(mapping):
    """zz-haooo/STEER verl/trainer/ppo/core_algos.py compute_policy_loss_with_entropy (with its
    compute_token_weights and agg_loss), called as their dp_actor.py calls it, with the behaviour
    entropy as `entropys`; log-probs spread so that some ratios clip."""
    fns = steer_functions("compute_token_weights", "agg_loss", "compute_policy_loss_with_entropy")
    worst = 0.0
    for seed in range(4):
        tb, logp, _ = random_batch(seed, length=9)
        logp_a = logp.detach().clone().requires_grad_(True)
        w_max = 1.2 if mapping == "linear" else 1.0
        ours, _ = run("steer", tb, logp, mapping=mapping, weight_max=w_max)
        theirs, *_ = fns["compute_policy_loss_with_entropy"](
            old_log_prob=tb.old_logp,
            log_prob=logp_a,
            advantages=token_advantages(tb),
            response_mask=tb.response_mask.float(),
            entropys=tb.entropy,
            cliprange=0.2,
            cliprange_low=0.2,
            cliprange_high=0.28,
            clip_ratio_c=10.0,
            loss_agg_mode="token-mean",
            token_weight_min=0.8,
            token_weight_max=w_max,
            linear=mapping == "linear",
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        g_ours, g_theirs = grad_of(ours, logp), grad_of(theirs, logp_a)
        torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-7)
        assert g_ours.abs().sum() > 0
        worst = max(worst, (ours - theirs).abs().item(), (g_ours - g_theirs).abs().max().item())
    print(f"steer ({mapping}) vs STEER: largest difference {worst:.3g}")


@pytest.mark.parametrize("mapping", ["linear", "exponential"])
def test_matches_the_authors_weights_per_micro_batch_of_8(mapping):
    """The recipe's range: run/run_linear.sh sets ppo_micro_batch_size_per_gpu=8 (use_dynamic_bsz
    false), and their dp_actor.py calls compute_policy_loss_with_entropy once per micro-batch of 8
    consecutive rows, so compute_token_weights (run here) takes min and max of |Ω| over those 8
    rows. On 24 rows (3 micro-batches) our weights with weight_rows 8 (the default) are theirs;
    one range over the 24 rows (weight_rows null) is not."""
    fns = steer_functions("compute_token_weights")
    worst = 0.0
    for seed in range(4):
        tb, logp, _ = random_batch(seed, groups=6, group_size=4, length=9)
        w_max = 1.2 if mapping == "linear" else 1.0
        kwargs = dict(weight_min=0.8, weight_max=w_max, mapping=mapping)
        adv, mask = token_advantages(tb), tb.response_mask
        args = (adv, tb.entropy, tb.old_logp, logp.detach())
        ours = entropy_change_weights(*args, mask, **kwargs, weight_rows=8)
        theirs = torch.cat(
            [
                fns["compute_token_weights"](
                    *(a[rows] for a in args),
                    mask[rows].float(),
                    token_weight_min=0.8,
                    token_weight_max=w_max,
                    linear=mapping == "linear",
                )
                * mask[rows]
                for rows in (slice(0, 8), slice(8, 16), slice(16, 24))
            ]
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        whole = entropy_change_weights(*args, mask, **kwargs, weight_rows=None)
        assert (whole - theirs).abs().max() > 1e-3
        worst = max(worst, (ours - theirs).abs().max().item())
    print(f"steer ({mapping}) weights per 8 rows vs STEER: largest difference {worst:.3g}")
