"""ops/attention_entropy.py on hand-checkable attention rows."""

from __future__ import annotations

import math

import torch

from quadrants.ops.attention_entropy import attention_entropy, head_mean_entropy


def test_two_heads_uniform_and_one_hot():
    # one sequence, 2 heads, 1 query over 2 keys:
    #   head 1 uniform [1/2, 1/2]: H = −2 · (1/2) ln(1/2) = ln 2 = 0.693147
    #   head 2 one-hot [1, 0]:     H = −(1 · ln 1 + 0 · ln 0) = 0 (0 ln 0 = 0)
    #   mean over the heads:       (ln 2 + 0) / 2 = 0.346574
    weights = torch.tensor([[[[0.5, 0.5]], [[1.0, 0.0]]]])  # [B=1, H=2, Q=1, K=2]
    per_head = attention_entropy(weights)
    torch.testing.assert_close(per_head, torch.tensor([[[math.log(2)], [0.0]]]))
    torch.testing.assert_close(head_mean_entropy(weights), torch.tensor([[math.log(2) / 2]]))


def test_masked_keys_add_nothing_and_a_wider_uniform_row_is_ln_n():
    # query 0 sees 1 key (the rest masked to 0): H = 0; query 1 uniform over 4 keys: ln 4 = 1.386294;
    # query 2 [0.25, 0.75, 0, 0]: −(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335
    weights = torch.tensor(
        [[[[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.25, 0.75, 0.0, 0.0]]]]
    )
    got = attention_entropy(weights)[0, 0]
    torch.testing.assert_close(got, torch.tensor([0.0, math.log(4), 0.5623351]))
    assert torch.isfinite(got).all()
