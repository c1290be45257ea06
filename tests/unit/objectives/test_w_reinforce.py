"""W-REINFORCE: loss_t = -w r_t, w = λ for correct responses and -1 for wrong ones."""

import pytest

from .helpers import batch, close, grad_of, logp_for_ratios, run


def wr_batch():
    """Group 0: rewards [1, 0] (correct, wrong), 3 and 2 tokens; group 1: rewards [1, 1], 1 token each."""
    return batch(
        entropy=[[1.0, 0.0, 0.5], [1.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.3, 0.0, 0.0]],
        rewards=[1.0, 0.0, 1.0, 1.0],
        group_ids=[0, 0, 1, 1],
        response_mask=[[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]],
        normalize_std=True,
    )


# λ = 0.1; ratio 1 except (1,0) r = 2.
# per-token -w r: seq 0 [-0.1, -0.1, -0.1]; seq 1 [+2, +1]; seq 2 [-0.1]; seq 3 [-0.1]
# (the all-correct group 1 keeps its weight: no advantage normalisation)
RATIOS = [[1.0, 1.0, 1.0], [2.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]


@pytest.mark.parametrize(
    "loss_agg, expected",
    [
        ("token-mean", (-0.3 + 3.0 - 0.2) / 7),  # 2.5 / 7
        # seq means: -0.1, 1.5, -0.1, -0.1 -> 1.2 / 4 = 0.3
        ("seq-mean-token-mean", 0.3),
    ],
)
def test_w_reinforce_loss_by_hand(loss_agg, expected):
    tb = wr_batch()
    loss, metrics = run("w_reinforce", tb, logp_for_ratios(tb, RATIOS), loss_agg=loss_agg, lam=0.1)
    close(loss, expected)
    close(metrics["positive_frac"], 5 / 7)  # tokens of correct responses: 3 + 1 + 1


def test_w_reinforce_gradient_is_minus_weight_times_ratio():
    tb = wr_batch()
    logp = logp_for_ratios(tb, RATIOS)
    loss, _ = run("w_reinforce", tb, logp, lam=0.1)
    # d(-w r)/dlogp = -w r, / 7 tokens: correct -0.1/7, wrong +1/7 (and +2/7 where r = 2); no clipping
    c, w = -0.1 / 7, 1.0 / 7
    close(grad_of(loss, logp), [[c, c, c], [2 * w, w, 0.0], [c, 0.0, 0.0], [c, 0.0, 0.0]])


def test_correct_means_strictly_above_threshold():
    # reward 0.5 with correct_above 0.5 is wrong (weight -1); with 0.4 it is correct (weight λ)
    tb = batch(entropy=[[1.0]], rewards=[0.5], group_ids=[0])
    close(run("w_reinforce", tb, logp_for_ratios(tb))[0], 1.0)
    close(run("w_reinforce", tb, logp_for_ratios(tb), correct_above=0.4, lam=0.3)[0], -0.3)


def test_weights_follow_correctness_not_the_shaped_reward():
    # a correct answer near the length limit: overlong shaping takes its reward to 1 - 0.7 = 0.3,
    # a wrong one to 0 - 0.2 = -0.2; correctness [1, 0]. Weights λ = 0.1 and -1, not -1 and -1:
    # per-token -w r at r = 1: [-0.1, +1] over 2 tokens -> loss 0.45; d/dlogp [-0.05, +0.5]
    import torch

    from quadrants.objectives.batch import make_token_batch

    tb = make_token_batch(
        sequences=torch.zeros(2, 2, dtype=torch.long),
        attention_mask=torch.ones(2, 2, dtype=torch.bool),
        response_mask=torch.ones(2, 1, dtype=torch.bool),
        old_logp=torch.full((2, 1), -1.0),
        entropy=torch.ones(2, 1),
        rewards=torch.tensor([0.3, -0.2]),
        group_ids=torch.tensor([0, 0]),
        constant_by=torch.tensor([1.0, 0.0]),
    )
    logp = logp_for_ratios(tb)
    loss, metrics = run("w_reinforce", tb, logp, lam=0.1)
    close(loss, 0.45)
    close(grad_of(loss, logp), [[-0.05], [0.5]])
    close(metrics["positive_frac"], 0.5)
