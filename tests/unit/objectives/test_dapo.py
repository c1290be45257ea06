"""DAPO: clip-higher and dynamic sampling (constant-reward groups leave the denominator)."""

import pytest
import torch

from .helpers import GRPO_RATIOS, batch, close, grad_of, logp_for_ratios, run


def dapo_batch():
    """grpo_batch (group 0) plus group 1 with equal rewards [1, 1] (advantage 0), 2 tokens each."""
    return batch(
        entropy=[[1.0, 0.0, 0.5], [1.0, 0.0, 9.0], [0.3, 0.6, 9.0], [0.4, 0.2, 9.0]],
        rewards=[2.0, -2.0, 1.0, 1.0],
        group_ids=[0, 0, 1, 1],
        response_mask=[[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0]],
        old_logp=[[-1.0, -0.5, -2.0], [-0.3, -1.5, 0.0], [-1.0, -1.0, 0.0], [-2.0, -0.1, 0.0]],
    )


# group 0 as in GRPO_RATIOS but ε_high = 0.28: (0,0) A=+2 r=1.5 -> max(-3, -2*1.28) = -2.56 (clipped);
# the rest -1, -2 | 2.2, 1.6 -> group-0 sum -1.76; group 1 has A = 0 -> 0 whatever its ratios.
RATIOS = GRPO_RATIOS + [[1.3, 0.6, 1.0], [0.9, 1.05, 1.0]]


@pytest.mark.parametrize(
    "dynamic_sampling, loss_agg, expected",
    [
        (True, "token-mean", -1.76 / 5),  # group 1's 4 tokens dropped from the denominator: -0.352
        (False, "token-mean", -1.76 / 9),  # -0.195556
        # seq 0: (-2.56 - 1 - 2) / 3 = -1.853333, seq 1: (2.2 + 1.6) / 2 = 1.9
        (
            True,
            "seq-mean-token-mean",
            (-5.56 / 3 + 1.9) / 2,
        ),  # group 1's sequences not counted: 0.023333
        (False, "seq-mean-token-mean", (-5.56 / 3 + 1.9) / 4),  # 0.011667
    ],
)
def test_dapo_loss_by_hand(dynamic_sampling, loss_agg, expected):
    tb = dapo_batch()
    loss, metrics = run(
        "dapo",
        tb,
        logp_for_ratios(tb, RATIOS),
        loss_agg=loss_agg,
        dynamic_sampling=dynamic_sampling,
    )
    close(loss, expected)
    close(metrics["denominator_tokens"], 5.0 if dynamic_sampling else 9.0)


def test_dapo_metrics_and_gradient():
    tb = dapo_batch()
    logp = logp_for_ratios(tb, RATIOS)
    loss, metrics = run("dapo", tb, logp)
    close(metrics["kept_group_frac"], 0.5)  # 2 of 4 sequences
    close(metrics["dynamic_sampling_token_frac"], 5 / 9)  # 5 of 9 response tokens count
    close(metrics["clip_frac_high"], 1 / 9)
    # -A r / 5 on unclipped group-0 tokens; zero on clipped, zero-advantage and padded tokens
    expected = torch.zeros(4, 3)
    expected[0, 1], expected[0, 2], expected[1, 0] = -1.0 / 5, -2.0 / 5, 2.2 / 5
    close(grad_of(loss, logp), expected)


def test_dapo_clip_high_keeps_gradient_between_1_2_and_1_28():
    # A = +2, r = 1.25: GRPO (ε_high 0.2) clips it, DAPO (0.28) does not.
    # one group of 2 x 1 token; ratios [1.25, 1]: DAPO loss (-2*1.25 + 2) / 2 = -0.25, grad -2.5/2 on token 0
    tb = batch(entropy=[[1.0], [0.0]], rewards=[2.0, -2.0], group_ids=[0, 0])
    logp = logp_for_ratios(tb, [[1.25], [1.0]])
    loss, _ = run("dapo", tb, logp)
    close(loss, -0.25)
    close(grad_of(loss, logp), [[-1.25], [1.0]])
    logp = logp_for_ratios(tb, [[1.25], [1.0]])
    loss, _ = run("grpo", tb, logp)  # -2 * 1.2 + 2 = -0.4 -> -0.2, no gradient on token 0
    close(loss, -0.2)
    close(grad_of(loss, logp), [[0.0], [1.0]])


def test_dapo_all_constant_groups_give_finite_zero():
    tb = batch(
        entropy=[[1.0, 0.5], [0.2, 0.1], [0.3, 0.3], [0.9, 0.4]],
        rewards=[1.0, 1.0, 0.0, 0.0],
        group_ids=[0, 0, 1, 1],
    )
    logp = logp_for_ratios(tb, [[1.5, 0.5], [1.1, 0.9], [2.0, 1.0], [0.3, 1.0]])
    loss, metrics = run("dapo", tb, logp)
    assert torch.isfinite(loss)
    close(loss, 0.0)
    close(metrics["denominator_tokens"], 0.0)
    close(metrics["kept_group_frac"], 0.0)
    close(grad_of(loss, logp), torch.zeros(4, 2))


def test_dynamic_sampling_equals_dropping_the_groups_with_a_reference_kl():
    # group 0 rewards [2, -2], group 1 rewards [1, 1] (constant); 1 token each, ratio 1, logp = -1.
    # ref_logp [-1, -1, -2, -2] -> k1 = logp - ref = [0, 0, 1, 1]: the KL lives only on group 1.
    # The docstring: removing group 1 from the denominator is "equivalent to dropping them from the
    # batch" -> loss (-2 + 2 + 0.1 * 0) / 2 = 0, which seq-mean-token-mean also gives.
    # token-mean currently gives (0 + 0.1 * (1 + 1)) / 2 = 0.1.
    tb = batch(
        entropy=[[1.0], [0.0], [0.5], [0.2]],
        rewards=[2.0, -2.0, 1.0, 1.0],
        group_ids=[0, 0, 1, 1],
        old_logp=[[-1.0]] * 4,
        ref_logp=[[-1.0], [-1.0], [-2.0], [-2.0]],
    )
    dropped = tb.select(torch.tensor([0, 1]))
    expected, _ = run("dapo", dropped, logp_for_ratios(dropped), kl_coef=0.1, kl_estimator="k1")
    close(expected, 0.0)
    seq_mean, _ = run(
        "dapo",
        tb,
        logp_for_ratios(tb),
        kl_coef=0.1,
        kl_estimator="k1",
        loss_agg="seq-mean-token-mean",
    )
    close(seq_mean, 0.0)
    loss, _ = run("dapo", tb, logp_for_ratios(tb), kl_coef=0.1, kl_estimator="k1")
    close(loss, 0.0)
