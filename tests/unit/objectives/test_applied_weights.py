"""applied_weights: each token's −|D| ∂loss/∂log π at ratio 1 and the loss's denominator D, by hand
(objectives/loss.py), the A_t of the entropy-change attribution (ops/entropy_change.py)."""

from __future__ import annotations

import pytest
import torch

from quadrants.objectives.loss import LossSettings, applied_weights
from quadrants.objectives.registry import resolve_objective
from quadrants.ops.quadrants import Quadrant, QuadrantSettings

from .helpers import batch, close, random_batch
from .test_loss import VARIANTS


def weights(name, tb, keep=None, loss_agg="token-mean", **params):
    spec, full = resolve_objective(name, params)
    settings = LossSettings(quadrant=QuadrantSettings(keep=keep), loss_agg=loss_agg)
    return applied_weights(spec, full, tb, settings)


# one group of 2, rows of 2 and 1 tokens; rewards [2, -2] -> advantages [+2, -2]
# entropy [[1, 0], [0, pad]]: group mean 1/3 -> (0,0) PHR, (0,1) PLR, (1,0) NLR
TB = batch(
    entropy=[[1.0, 0.0], [0.0, 0.0]], rewards=[2.0, -2.0], group_ids=[0, 0],
    response_mask=[[1, 1], [1, 0]],
)  # fmt: skip


def test_token_mean_grpo_applies_the_group_advantage():
    # loss = Σ -A_i r_t / 3; ∂/∂log π_t = -A_i / 3 at r = 1; times -|D| = 3: w = A_i
    w, denominator = weights("grpo", TB)
    close(w, [[2.0, 2.0], [-2.0, 0.0]])
    assert denominator.tolist() == [[True, True], [True, False]]


def test_isolation_zeroes_the_tokens_left_out():
    # keep PHR: only (0,0) carries -A r / 3 (the denominator stays all 3 tokens): w = [2, 0 | 0]
    w, denominator = weights("grpo", TB, keep=("PHR",))
    close(w, [[2.0, 0.0], [0.0, 0.0]])
    assert int(denominator.sum()) == 3


def test_seq_mean_token_mean_weights_each_response_by_its_length():
    # loss = (1/2) [ (-2 r00 - 2 r01) / 2 + (2 r10) / 1 ]: ∂/∂log π = -0.5 on row 0, +1 on (1,0);
    # times -|D| = -3: w = [1.5, 1.5 | -3]: the short wrong response weighs twice its advantage
    w, _ = weights("grpo", TB, loss_agg="seq-mean-token-mean")
    close(w, [[1.5, 1.5], [-3.0, 0.0]])


def test_a_reshaping_objective_applies_its_own_weight():
    # W-REINFORCE, λ = 0.1: loss_t = -λ r_t on the correct row, +r_t on the wrong one, token-mean
    # over 3: w = 3 · (λ/3, λ/3 | -1/3) = [0.1, 0.1 | -1], not the group advantage [2, 2 | -2]
    tb = batch(
        entropy=[[1.0, 0.0], [0.0, 0.0]], rewards=[1.0, 0.0], group_ids=[0, 0],
        response_mask=[[1, 1], [1, 0]],
    )  # fmt: skip
    w, _ = weights("w_reinforce", tb, lam=0.1)
    close(w, [[0.1, 0.1], [-1.0, 0.0]])


def test_a_group_dynamic_sampling_drops_is_out_of_the_denominator():
    # DAPO: group 0 [2, -2] mixed, group 1 [1, 1] constant -> dropped: D = group 0's 4 tokens,
    # loss = Σ_{group 0} -A r / 4: w = 4 · A / 4 = [2, 2 | -2, -2 | 0, 0 | 0, 0]
    tb = batch(entropy=[[1.0, 0.0]] * 4, rewards=[2.0, -2.0, 1.0, 1.0], group_ids=[0, 0, 1, 1])
    w, denominator = weights("dapo", tb)
    close(w, [[2.0, 2.0], [-2.0, -2.0], [0.0, 0.0], [0.0, 0.0]])
    assert denominator.tolist() == [[True, True], [True, True], [False, False], [False, False]]


@pytest.mark.parametrize(
    "name, params", VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)]
)
def test_every_objective_gives_finite_weights_that_split_over_quadrants(name, params):
    # the loss is linear in its per-token terms under a fixed denominator, so the weights of the
    # four single-quadrant losses add up to the full loss's weights (test_loss checks the losses)
    tb, _, _ = random_batch(0)  # seed 0 has an all-equal group (DAPO drops it)
    spec, full = resolve_objective(name, params)

    def of(keep):
        settings = LossSettings(quadrant=QuadrantSettings(keep=keep))
        # clip_cov draws from the generator it is given: the same draw every call
        return applied_weights(spec, full, tb, settings, generator=torch.Generator().manual_seed(1))

    w, denominator = of(None)
    assert bool(torch.isfinite(w).all())
    assert bool((w[~denominator] == 0).all())
    parts = sum(of((q,))[0] for q in Quadrant)
    torch.testing.assert_close(parts, w, rtol=0, atol=1e-5)
