"""EntroAdv: A' = A + min(α stopgrad(H), |A|/κ), then the clipped surrogate."""

import pytest
import torch

from .helpers import batch, close, grad_of, logp_for_ratios, run


def entroadv_batch():
    """One group, 2 x 3 tokens (last padded); rewards [2, -2] -> A = [+2, -2]; |A|/κ = 1 at κ = 2.

    entropy [[3, 0, 0.5], [1, 0, pad]]; α = 0.4: α H = [[1.2, 0, 0.2], [0.4, 0]]
    bonus = min(α H, 1) = [[1.0 (capped), 0, 0.2], [0.4, 0]]
    A' = [[3.0, 2.0, 2.2], [-1.6, -2.0]]
    """
    return batch(
        entropy=[[3.0, 0.0, 0.5], [1.0, 0.0, 7.0]],
        rewards=[2.0, -2.0],
        group_ids=[0, 0],
        response_mask=[[1, 1, 1], [1, 1, 0]],
    )


# (0,0) r = 1.5 > 1 + 0.28 with A' = 3 > 0: clipped to -3 * 1.28 = -3.84, no gradient; the rest r = 1:
# per-token [[-3.84, -2.0, -2.2], [1.6, 2.0]]; seq sums -8.04 and 3.6; total -4.44
RATIOS = [[1.5, 1.0, 1.0], [1.0, 1.0, 1.0]]


@pytest.mark.parametrize(
    "loss_agg, expected",
    [("token-mean", -4.44 / 5), ("seq-mean-token-sum", (-8.04 + 3.6) / 2)],  # -0.888, -2.22
)
def test_entroadv_loss_by_hand(loss_agg, expected):
    tb = entroadv_batch()
    loss, metrics = run("entroadv", tb, logp_for_ratios(tb, RATIOS), loss_agg=loss_agg)
    close(loss, expected)
    close(metrics["bonus_mean"], (1.0 + 0.0 + 0.2 + 0.4 + 0.0) / 5)


def test_entroadv_gradient():
    tb = entroadv_batch()
    logp = logp_for_ratios(tb, RATIOS)
    loss, _ = run("entroadv", tb, logp)
    # -A' r / 5 where unclipped; 0 on the clipped (0,0) and on padding
    close(grad_of(loss, logp), [[0.0, -2.0 / 5, -2.2 / 5], [1.6 / 5, 2.0 / 5, 0.0]])


def test_entroadv_never_reverses_a_negative_advantage():
    # huge entropy: bonus capped at |A|/κ, so A' = -2 + 1 = -1 stays negative (κ = 2)
    tb = batch(entropy=[[100.0], [100.0]], rewards=[2.0, -2.0], group_ids=[0, 0])
    logp = logp_for_ratios(tb)
    loss, _ = run("entroadv", tb, logp)
    close(loss, (-3.0 + 1.0) / 2)
    close(grad_of(loss, logp), [[-1.5], [0.5]])
    assert torch.all(tb.entropy >= 0)
