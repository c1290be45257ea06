"""ops/adapter_credit.py: ARCA's residual norm and weights, and the concentration diagnostics, by
hand."""

from __future__ import annotations

import torch

from quadrants.ops.adapter_credit import (
    arca_weights,
    effective_token_ratio,
    gini,
    residual_norm,
)


def test_residual_norm_is_the_l2_norm_of_the_difference():
    # token 0: h_a − h_b = [3, 4] -> 5; token 1: [0, 0] -> 0
    adapted = torch.tensor([[[4.0, 6.0], [1.0, 1.0]]])
    base = torch.tensor([[[1.0, 2.0], [1.0, 1.0]]])
    torch.testing.assert_close(residual_norm(adapted, base), torch.tensor([[5.0, 0.0]]))


def test_weights_are_normalised_to_mean_one_per_response():
    # row 0: r = [1, 2, 3, pad], mean over 3 tokens = 2 -> w = [0.5, 1, 1.5, 0]
    # row 1: r = [0, 0, pad, pad] (the adapter changes nothing) -> w = [1, 1, 0, 0]
    residual = torch.tensor([[1.0, 2.0, 3.0, 9.0], [0.0, 0.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(
        arca_weights(residual, mask), torch.tensor([[0.5, 1.0, 1.5, 0.0], [1.0, 1.0, 0.0, 0.0]])
    )
    # mix 0.5: 0.5 + 0.5 w = [0.75, 1, 1.25]; max_weight 1.2 caps the last to 1.2
    torch.testing.assert_close(
        arca_weights(residual, mask, mix=0.5, max_weight=1.2)[0], torch.tensor([0.75, 1, 1.2, 0])
    )
    # mix 0: plain GRPO, every response token weight 1
    torch.testing.assert_close(arca_weights(residual, mask, mix=0.0), mask.float())


def test_effective_token_ratio_and_gini():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    w = torch.tensor(
        [
            [1.0, 1.0, 1.0, 1.0],  # uniform: ratio 1, Gini 0
            [4.0, 0.0, 0.0, 0.0],  # one token: ratio 16 / (4 · 16) = 1/4, Gini (n − 1)/n = 3/4
            [1.0, 2.0, 3.0, 50.0],  # n = 3 (50 is padding): ratio 36 / (3 · 14) = 6/7;
            # Gini: sorted [1, 2, 3], Σ (2i − 4) x_i = −2·1 + 0·2 + 2·3 = 4, / (3 · 6) = 2/9
            [0.0, 0.0, 0.0, 0.0],  # empty response: 0, 0
        ]
    )
    torch.testing.assert_close(effective_token_ratio(w, mask), torch.tensor([1, 0.25, 6 / 7, 0]))
    torch.testing.assert_close(gini(w, mask), torch.tensor([0, 0.75, 2 / 9, 0]))
