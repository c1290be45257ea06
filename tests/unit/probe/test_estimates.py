"""Each objective's token weight w_t = −∂loss_t/∂log π(o_t) at ratio 1, read off the objective itself."""

from __future__ import annotations

import torch

from quadrants.probe.estimates import objective_token_weights
from tests.unit.objectives.helpers import batch


def test_token_weights_of_the_four_objectives_by_hand():
    # one group, 2 sequences x 2 tokens, rewards [2, -2] (no std normalisation) -> Â = [+2, -2];
    # entropy [[1, 0], [0, 0]]
    # GRPO: Â broadcast -> [[2, 2], [-2, -2]]
    # EntroAdv (α 0.4, κ 2): + min(0.4 H, |Â|/2 = 1) -> [[2.4, 2], [-2, -2]]
    # HAPO (α 0.2, φ 2): µ_H 0.25, σ_H = sqrt(0.75 / 4) = 0.4330127; z = [[1.7320508, -0.5773503], ...],
    #   clipped to ±|Â|/φ = ±1 -> [[1, -0.5773503], [-0.5773503, -0.5773503]];
    #   Â + 0.2 sign(Â) z -> [[2.2, 1.8845299], [-1.8845299, -1.8845299]]
    # Forking (ρ 0.2): threshold = 0.8-quantile of [0, 0, 0, 1] = 0 + (1 - 0) * 0.4 = 0.4 -> only token (0, 0)
    #   -> [[2, 0], [0, 0]]
    tb = batch(entropy=[[1.0, 0.0], [0.0, 0.0]], rewards=[2.0, -2.0], group_ids=[0, 0])
    weights = objective_token_weights(tb)
    z = 0.2 * 0.5773503
    expected = {
        "grpo": [[2.0, 2.0], [-2.0, -2.0]],
        "entroadv": [[2.4, 2.0], [-2.0, -2.0]],
        "hapo": [[2.2, 2.0 - z], [-2.0 + z, -2.0 + z]],
        "forking": [[2.0, 0.0], [0.0, 0.0]],
    }
    assert set(weights) == set(expected)
    for name, values in expected.items():
        torch.testing.assert_close(weights[name], torch.tensor(values), rtol=0, atol=1e-6, msg=name)


def test_token_weights_are_zero_off_the_response():
    tb = batch(
        entropy=[[0.5, 0.2], [0.1, 0.0]],
        rewards=[1.0, 0.0],
        group_ids=[0, 0],
        response_mask=[[1, 0], [1, 1]],
    )
    for name, w in objective_token_weights(tb).items():
        assert w[0, 1].item() == 0.0, name
