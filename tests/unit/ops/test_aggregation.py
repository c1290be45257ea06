"""Loss aggregation modes and masked_mean by hand."""

from __future__ import annotations

import pytest
import torch

from quadrants.ops.aggregation import LOSS_AGGREGATIONS, aggregate_loss, masked_mean
from quadrants.ops.quadrants import split_quadrants
from quadrants.ops.surrogate import clipped_surrogate

# seq 0: loss [1, 2, 6, 0], denominator [T, T, T, F] -> 3 tokens, sum 9
# seq 1: loss [4, 0, 0, 0], denominator [T, T, F, F] -> 2 tokens, sum 4 (token 1 counts but carries 0)
# seq 2: loss all 0,        denominator all F        -> not in S (no denominator tokens)
LOSS = torch.tensor([[1.0, 2.0, 6.0, 0.0], [4.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
DENOMINATOR = torch.tensor(
    [[True, True, True, False], [True, True, False, False], [False, False, False, False]]
)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 13 / 5),  # (9 + 4) / (3 + 2) = 2.6
        (
            "seq-mean-token-mean",
            (9 / 3 + 4 / 2) / 2,
        ),  # (3 + 2) / |S| = 2.5; seq 2 is not averaged in
        ("seq-mean-token-sum", (9 + 4) / 2),  # 6.5, not 13 / 3
        ("seq-mean-token-sum-norm", 13 / (2 * 4)),  # norm_length defaults to T = 4 -> 1.625
    ],
)
def test_aggregation_by_hand(mode, expected):
    out = aggregate_loss(LOSS, DENOMINATOR, mode)
    assert out.shape == ()
    torch.testing.assert_close(out, torch.tensor(expected), rtol=0, atol=1e-6)


def test_seq_mean_token_sum_norm_with_norm_length():
    # 13 / (|S| = 2 * norm_length = 10) = 0.65
    out = aggregate_loss(LOSS, DENOMINATOR, "seq-mean-token-sum-norm", norm_length=10)
    torch.testing.assert_close(out, torch.tensor(0.65), rtol=0, atol=1e-6)


def test_default_mode_is_token_mean():
    torch.testing.assert_close(
        aggregate_loss(LOSS, DENOMINATOR), torch.tensor(2.6), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_empty_denominator_gives_zero(mode):
    out = aggregate_loss(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), mode)
    assert torch.equal(out, torch.tensor(0.0))


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_aggregation_is_differentiable(mode):
    # d token-mean / d l_it = D_it / 5 etc.; here only check the gradient reaches the loss and is finite
    loss = LOSS.clone().requires_grad_()
    aggregate_loss(loss * DENOMINATOR, DENOMINATOR, mode).backward()
    assert torch.isfinite(loss.grad).all()
    assert torch.equal(loss.grad[~DENOMINATOR], torch.zeros(int((~DENOMINATOR).sum())))


def test_token_mean_gradient_by_hand():
    # token-mean = sum l / 5 -> gradient 1/5 on every denominator token
    loss = LOSS.clone().requires_grad_()
    aggregate_loss(loss * DENOMINATOR, DENOMINATOR, "token-mean").backward()
    torch.testing.assert_close(loss.grad, DENOMINATOR.float() / 5, rtol=0, atol=1e-7)


def test_unknown_mode_lists_the_known_ones():
    with pytest.raises(
        ValueError, match="token-mean.*seq-mean-token-mean.*seq-mean-token-sum-norm"
    ):
        aggregate_loss(LOSS, DENOMINATOR, "seq-sum")


def test_masked_mean_by_hand():
    # [[1, 2], [3, 4]] with mask [[T, F], [T, T]] -> (1 + 3 + 4) / 3 = 2.6666667
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[True, False], [True, True]])
    torch.testing.assert_close(masked_mean(values, mask), torch.tensor(8 / 3), rtol=0, atol=1e-6)
    # 1-D: [1, 2, 3, 4] with mask [T, F, T, F] -> 2
    torch.testing.assert_close(
        masked_mean(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([True, False, True, False])),
        torch.tensor(2.0),
        rtol=0,
        atol=0,
    )


def test_masked_mean_of_empty_mask_is_zero():
    assert torch.equal(
        masked_mean(torch.tensor([5.0, 6.0]), torch.tensor([False, False])), torch.tensor(0.0)
    )


# --- invariant: the four quadrant losses sum to the full loss -------------------------------------


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
@pytest.mark.parametrize(
    ("rule", "value"), [("group_mean", None), ("batch_quantile", 0.8), ("fixed", 1.0)]
)
def test_quadrant_losses_sum_to_the_full_loss(mode, rule, value):
    # every mode is linear in the per-token loss for a fixed denominator mask (the response mask), so
    # splitting the tokens into the four disjoint quadrants splits the loss
    for seed in range(10):
        gen = torch.Generator().manual_seed(seed)
        batch, length = 8, 11
        entropy = torch.rand(batch, length, generator=gen) * 2
        response_mask = torch.rand(batch, length, generator=gen) < 0.8
        response_mask[seed % batch] = False  # a sequence with no response tokens
        group_ids = torch.arange(batch) // 4
        advantages = torch.randn(batch, generator=gen)
        logp = torch.randn(batch, length, generator=gen) * 0.3 - 1.0
        old_logp = (
            logp + torch.randn(batch, length, generator=gen) * 0.3
        )  # ratios spread past the clip range
        terms = clipped_surrogate(logp, old_logp, advantages[:, None], clip_low=0.2, clip_high=0.28)
        full = aggregate_loss(
            terms.per_token_loss * response_mask, response_mask, mode, norm_length=16
        )
        masks = split_quadrants(
            entropy, advantages, response_mask, group_ids, rule=rule, value=value
        )
        parts = [
            aggregate_loss(terms.per_token_loss * masks[q], response_mask, mode, norm_length=16)
            for q in ("PHR", "PLR", "NHR", "NLR")
        ]
        # float32 sums of ~70 terms in a different order: a few ulps of values ~1
        torch.testing.assert_close(sum(parts), full, rtol=0, atol=1e-6)


def test_dr_grpo_normaliser_does_not_depend_on_the_batch_width():
    # the same two rows padded from T = 4 to T = 8: with a constant norm_length of 16 (a run's
    # rollout.max_new_tokens) both give 13 / (2 * 16) = 0.40625; with the default (T) they would
    # give 13 / 8 and 13 / 16
    wide_loss = torch.nn.functional.pad(LOSS, (0, 4))
    wide_denominator = torch.nn.functional.pad(DENOMINATOR, (0, 4))
    for loss, denominator in ((LOSS, DENOMINATOR), (wide_loss, wide_denominator)):
        out = aggregate_loss(loss, denominator, "seq-mean-token-sum-norm", norm_length=16)
        torch.testing.assert_close(out, torch.tensor(13 / 32), rtol=0, atol=1e-7)


def test_a_run_divides_by_its_max_new_tokens():
    from quadrants.config import RunConfig
    from quadrants.objectives.loss import loss_settings
    from quadrants.ops.quadrants import QuadrantSettings

    cfg = RunConfig()
    cfg.rollout.max_new_tokens = 96
    settings = loss_settings(
        cfg.objective, QuadrantSettings(), max_new_tokens=cfg.rollout.max_new_tokens
    )
    assert settings.norm_length == 96
