"""compute_loss with truncated importance weights for the train–inference mismatch (ops.mismatch)."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.ops.mismatch import truncated_is_weights
from quadrants.ops.quadrants import Quadrant

from .helpers import GRPO_RATIOS, close, grad_of, grpo_batch, logp_for_ratios, random_batch
from .test_loss import VARIANTS, _loss


def _weighted(name, params, tb, logp, entropy, keep, weights, kl_coef=0.0, loss_agg="token-mean"):
    from quadrants.objectives.batch import PolicyOutput
    from quadrants.objectives.loss import LossSettings, compute_loss
    from quadrants.objectives.registry import resolve_objective
    from quadrants.ops.quadrants import QuadrantSettings

    spec, full = resolve_objective(name, params)
    policy = PolicyOutput(logp=logp, entropy=entropy if spec.wants_entropy(full) else None)
    settings = LossSettings(
        quadrant=QuadrantSettings(keep=keep), loss_agg=loss_agg, kl_coef=kl_coef
    )
    draws = torch.Generator().manual_seed(1234)  # clip_cov's draw, as in test_loss._loss
    return compute_loss(spec, full, tb, policy, settings, is_weights=weights, generator=draws)


def test_token_weights_multiply_the_per_token_loss_by_hand():
    # grpo_batch + GRPO_RATIOS: per-token loss [[-2.4, -1, -2], [2.2, 1.6, pad]], 5 response tokens.
    # engine log-probs put π_old/μ at [[1, 4 -> cap 2, 0.5], [1, 0.5, pad]]:
    #   weighted [[-2.4, -2, -1], [2.2, 0.8]] -> sum -2.4 -> token-mean -2.4 / 5 = -0.48
    tb = grpo_batch()
    engine_logp = tb.old_logp - torch.log(torch.tensor([[1.0, 4.0, 0.5], [1.0, 0.5, 1.0]]))
    weights = truncated_is_weights(
        tb.old_logp, engine_logp, tb.response_mask, level="token", cap=2.0
    )
    close(weights, [[1.0, 2.0, 0.5], [1.0, 0.5, 1.0]])
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    loss, _ = _weighted("grpo", {}, tb, logp, None, None, weights)
    close(loss, -0.48)
    # the gradient scales with the weight token by token: unweighted d/dlogp = -A r / 5 on unclipped
    # tokens, i.e. [[0 (clipped), -0.2, -0.4], [0.44, 0 (clipped)]]; weighted [[0, -0.4, -0.2], [0.44, 0]]
    close(grad_of(loss, logp), [[0.0, -0.4, -0.2], [0.44, 0.0, 0.0]])


def test_sequence_weights_by_hand():
    # same batch; sequence 0 has π_old/μ 1 * 4 * 0.5 = 2 (cap 3 leaves it), sequence 1 has 1 * 0.5 = 0.5
    #   weighted [[-4.8, -2, -4], [1.1, 0.8]] -> sum -8.9 -> -1.78
    tb = grpo_batch()
    engine_logp = tb.old_logp - torch.log(torch.tensor([[1.0, 4.0, 0.5], [1.0, 0.5, 1.0]]))
    weights = truncated_is_weights(
        tb.old_logp, engine_logp, tb.response_mask, level="sequence", cap=3.0
    )
    close(weights, [[2.0, 2.0, 2.0], [0.5, 0.5, 1.0]])
    loss, _ = _weighted("grpo", {}, tb, logp_for_ratios(tb, GRPO_RATIOS), None, None, weights)
    close(loss, -1.78)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize(
    "name, params", VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)]
)
def test_identical_logprobs_leave_every_loss_unchanged(name, params, level):
    # engine log-probs == trainer's: weights are exactly 1, so the loss is bit-for-bit the same
    tb, logp, entropy = random_batch(1)
    weights = truncated_is_weights(
        tb.old_logp, tb.old_logp.clone(), tb.response_mask, level=level, cap=2.0
    )
    plain, _ = _loss(name, params, tb, logp, entropy, None, "token-mean", 0.05)
    weighted, _ = _weighted(name, params, tb, logp, entropy, None, weights, kl_coef=0.05)
    assert torch.equal(plain, weighted)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize(
    "name, params", VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)]
)
def test_four_quadrant_losses_still_sum_to_the_full_loss(name, params, level):
    tb, logp, entropy = random_batch(2)
    generator = torch.Generator().manual_seed(7)
    engine_logp = tb.old_logp + 0.2 * torch.randn(tb.old_logp.shape, generator=generator)
    weights = truncated_is_weights(tb.old_logp, engine_logp, tb.response_mask, level=level, cap=1.5)
    assert (weights[tb.response_mask] != 1).any()  # the invariant is exercised with real weights
    full, _ = _weighted(name, params, tb, logp, entropy, None, weights, kl_coef=0.05)
    parts = [
        _weighted(name, params, tb, logp, entropy, (q,), weights, kl_coef=0.05)[0] for q in Quadrant
    ]
    torch.testing.assert_close(
        sum(parts), full, rtol=0, atol=1e-5
    )  # a few float32 sums of O(1) terms
    assert math.isfinite(float(full.detach()))
