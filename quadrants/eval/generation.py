"""Sampling for evaluation: the training engine without behaviour log-probs.

Evaluation needs only the answers, so `TextEngine` is `HFEngine(logprobs=False)`: the same call to
`generate` (the same seed gives the same samples as in training) with no per-step log-softmax.
"""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from quadrants.rollout.hf import HFEngine

__all__ = ["TextEngine"]


class TextEngine(HFEngine):
    """A `RolloutEngine` for evaluation: texts, masks and finished flags;
    `behaviour_logp` is zeros."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        super().__init__(model, tokenizer, logprobs=False)
