"""Forking tokens (80/20): the DAPO surrogate on the top ρ of tokens by entropy; scope and denominator."""

import pytest
import torch

from quadrants.objectives.registry import resolve_objective

from .helpers import batch, close, grad_of, logp_for_ratios, run


def forking_batch():
    """Two groups of 2 x 2 tokens. rewards [1, -1 | 2, -2] -> A = [+1, -1, +2, -2].

    entropies seq 0 [0.1, 0.9], seq 1 [0.2, 0.8], seq 2 [0.3, 0.7], seq 3 [0.4, 0.6]
    rollout-batch sorted: [.1 .2 .3 .4 .6 .7 .8 .9]; ρ = 0.25 -> 0.75-quantile at position 0.75 * 7 = 5.25
    -> 0.7 + 0.25 * (0.8 - 0.7) = 0.725: selected {0.9 (0,1), 0.8 (1,1)} = 2 of 8 tokens.
    """
    return batch(
        entropy=[[0.1, 0.9], [0.2, 0.8], [0.3, 0.7], [0.4, 0.6]],
        rewards=[1.0, -1.0, 2.0, -2.0],
        group_ids=[0, 0, 1, 1],
    )


# ratio 1.1 on (0,1), 1 elsewhere; selected terms: (0,1) -1 * 1.1 = -1.1, (1,1) +1 -> sum -0.1
RATIOS = [[1.0, 1.1], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("scope", ["rollout_batch", "mini_batch"])  # identical on the full batch
@pytest.mark.parametrize(
    "denominator, expected, expected_grad",
    [
        ("selected_tokens", -0.1 / 2, [[0.0, -1.1 / 2], [0.0, 1.0 / 2], [0.0, 0.0], [0.0, 0.0]]),
        (
            "all_response_tokens",
            -0.1 / 8,
            [[0.0, -1.1 / 8], [0.0, 1.0 / 8], [0.0, 0.0], [0.0, 0.0]],
        ),
    ],
)
def test_forking_full_batch_by_hand(scope, denominator, expected, expected_grad):
    tb = forking_batch()
    logp = logp_for_ratios(tb, RATIOS)
    loss, metrics = run("forking", tb, logp, rho=0.25, scope=scope, denominator=denominator)
    close(loss, expected)
    close(grad_of(loss, logp), expected_grad)
    close(metrics["selected_frac"], 0.25)
    close(metrics["entropy_threshold"], 0.725)
    close(metrics["denominator_tokens"], 2.0 if denominator == "selected_tokens" else 8.0)


@pytest.mark.parametrize(
    "scope, denominator, expected, frac, threshold",
    [
        # rollout_batch: threshold stays 0.725 from the whole rollout batch -> nothing in seqs 2, 3
        ("rollout_batch", "selected_tokens", 0.0, 0.0, 0.725),
        ("rollout_batch", "all_response_tokens", 0.0, 0.0, 0.725),
        # mini_batch: sorted [.3 .4 .6 .7], position 0.75 * 3 = 2.25 -> 0.6 + 0.25 * 0.1 = 0.625
        # -> selects (2,1) H = 0.7, A = +2, r = 1: term -2 -> / 1 selected or / 4 response tokens
        ("mini_batch", "selected_tokens", -2.0, 0.25, 0.625),
        ("mini_batch", "all_response_tokens", -0.5, 0.25, 0.625),
    ],
)
def test_forking_scopes_differ_on_a_mini_batch(scope, denominator, expected, frac, threshold):
    tb = forking_batch()
    index = torch.tensor([2, 3])
    mini = tb.select(index)
    logp = logp_for_ratios(tb, RATIOS)[index].detach().requires_grad_(True)
    loss, metrics = run("forking", mini, logp, rho=0.25, scope=scope, denominator=denominator)
    assert torch.isfinite(loss)
    close(loss, expected)
    close(metrics["selected_frac"], frac)
    close(metrics["entropy_threshold"], threshold)
    g = grad_of(loss, logp)
    expected_grad = torch.zeros(2, 2)
    if scope == "mini_batch":
        expected_grad[0, 1] = -2.0 / (1 if denominator == "selected_tokens" else 4)
    close(g, expected_grad)


def test_forking_current_entropy_source_on_a_mini_batch():
    # current entropy [[0.3, 0.2], [0.9, 0.4]]: sorted [.2 .3 .4 .9], threshold 0.4 + 0.25 * 0.5 = 0.525
    # -> selects (3,0) (A = -2, r = 1): loss +2 over 1 selected token; no gradient into the entropy
    mini = forking_batch().select(torch.tensor([2, 3]))
    logp = logp_for_ratios(mini)
    entropy = torch.tensor([[0.3, 0.2], [0.9, 0.4]], requires_grad=True)
    loss, metrics = run(
        "forking", mini, logp, entropy, rho=0.25, scope="mini_batch", entropy_source="current"
    )
    close(loss, 2.0)
    close(metrics["entropy_threshold"], 0.525)
    g_logp, g_entropy = torch.autograd.grad(loss, (logp, entropy), allow_unused=True)
    close(g_logp, [[0.0, 0.0], [2.0, 0.0]])
    assert g_entropy is None or torch.count_nonzero(g_entropy) == 0


@pytest.mark.parametrize(
    "params, pattern",
    [
        ({"rho": 0.0}, r"rho=0.0 is out of range; allowed: \(0, 1\]"),
        ({"rho": 1.5}, r"rho=1.5 is out of range"),
        ({"scope": "micro_batch"}, r"scope='micro_batch' is unknown"),
        ({"entropy_source": "current"}, r"entropy_source='current' needs scope='mini_batch'"),
        ({"denominator": "kept_tokens"}, r"denominator='kept_tokens' is unknown"),
    ],
)
def test_forking_validation(params, pattern):
    with pytest.raises(ValueError, match=pattern):
        resolve_objective("forking", params)


def dropped_group_batch(constant_entropy: float):
    """Group 0 mixed (rewards 1, 0 -> centred A = ±0.5), entropies 1..5 and 6..10;
    group 1 constant (rewards 1, 1), every entropy `constant_entropy`: DAPO's dynamic sampling
    drops it."""
    return batch(
        entropy=[[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [constant_entropy] * 5, [constant_entropy] * 5],
        rewards=[1.0, 0.0, 1.0, 1.0],
        group_ids=[0, 0, 1, 1],
    )


@pytest.mark.parametrize("constant_entropy", [0.1, 20.0])
@pytest.mark.parametrize("scope", ["rollout_batch", "mini_batch"])
def test_the_top_rho_is_taken_over_the_trained_groups_only(constant_entropy, scope):
    # trained tokens: group 0's ten, entropies 1..10; 0.8-quantile at 0.8 * 9 = 7.2 -> 8 + 0.2 = 8.2
    # -> tokens 9, 10 of row 1 (A = -0.5, r = 1): terms +0.5 each, over 2 selected
    # -> loss 0.5, gradient -A / 2 = 0.25 on (1, 3) and (1, 4). Counting the dropped group
    # would give 6.2 (entropies 0.1: 4 of 10 trained tokens) or 20 (none).
    tb = dropped_group_batch(constant_entropy)
    logp = logp_for_ratios(tb)
    loss, metrics = run("forking", tb, logp, rho=0.2, scope=scope)
    close(metrics["entropy_threshold"], 8.2)
    close(metrics["selected_frac"], 0.2)  # 2 of the 10 trained tokens
    close(loss, 0.5)
    expected = torch.zeros(4, 5)
    expected[1, 3:] = 0.25
    close(grad_of(loss, logp), expected)


def test_without_dynamic_sampling_every_group_is_in_the_population():
    # all 20 tokens: sorted [0.1 x 10, 1..10]; 0.8-quantile at 0.8 * 19 = 15.2 -> 6 + 0.2 = 6.2
    # -> 7, 8, 9, 10 selected (4 of 20 = 0.2); the constant group's tokens have A = 0
    tb = dropped_group_batch(0.1)
    logp = logp_for_ratios(tb)
    loss, metrics = run("forking", tb, logp, rho=0.2, dynamic_sampling=False)
    close(metrics["entropy_threshold"], 6.2)
    close(metrics["selected_frac"], 0.2)
    close(loss, 0.5)  # four terms of +0.5 over 4 selected tokens


def test_a_mini_batch_quantile_skips_its_dropped_rows():
    # rows 1 (mixed, entropies 6..10) and 2 (dropped): trained 6..10, 0.8-quantile at 3.2 ->
    # 9 + 0.2 = 9.2 -> token 10 only: loss 0.5 over 1 selected token
    mini = dropped_group_batch(0.1).select(torch.tensor([1, 2]))
    loss, metrics = run("forking", mini, logp_for_ratios(mini), rho=0.2, scope="mini_batch")
    close(metrics["entropy_threshold"], 9.2)
    close(metrics["selected_frac"], 0.2)
    close(loss, 0.5)
