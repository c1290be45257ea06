"""Attention entropy per query token: how diffuse a token's contextual support is.

For one head, the attention row of query position i is a distribution a_i over the keys it may see
(softmax over the causal window, padding masked to probability 0). Its entropy, in nats,

    H_i = − Σ_j a_ij · ln a_ij          (0 · ln 0 = 0)

is 0 for a one-hot row and ln n for a row uniform over n keys. "Not All Tokens Learn Alike:
Attention Entropy Reveals Heterogeneous Signals in RL Reasoning" (Li, Wu, Bao, Wu; arXiv
2605.07660) splits response tokens by this quantity (low: "anchors", high: "explorers"). Which
layers and heads it averages over is not pinned by the material we could read (the abstract and
the summaries), so the average is a setting: `quadrant.attention_layers` chooses the layers, and
every head of a chosen layer counts equally (docs/science.md).

Pure tensor math; the pass that feeds it attention weights is quadrants/models/token_signals.py.
"""

from __future__ import annotations

import torch
from torch import Tensor


def attention_entropy(weights: Tensor) -> Tensor:
    """Entropy (nats) of each attention row: [..., Q, K] probabilities -> [..., Q] float32.

    `torch.special.xlogy(a, a)` is a·ln a with 0 where a = 0, so masked keys add nothing."""
    w = weights.float()
    return -torch.special.xlogy(w, w).sum(-1)


def head_mean_entropy(weights: Tensor) -> Tensor:
    """The mean over heads of each head's row entropy: [B, H, Q, K] -> [B, Q] float32."""
    return attention_entropy(weights).mean(1)
