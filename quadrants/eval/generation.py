"""Sampling for evaluation with Hugging Face `generate`: texts only, no per-token log-probs.

The training engine (`quadrants.rollout.hf.HFEngine`) keeps every step's logits to return behaviour
log-probs, a [B, T, V] tensor: for 64 sequences x 3072 tokens x a 151,936-token vocabulary that is
about 120 GB in float32. Evaluation needs only the answers, so `TextEngine` samples the same way
(same arguments to `generate`, so the same seed gives the same samples) and returns `Rollouts`
whose ``behaviour_logp`` is zeros.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from quadrants.rollout.engine import Rollouts, SamplingSettings

__all__ = ["TextEngine"]


class TextEngine:
    """A `RolloutEngine` for evaluation: `generate` returns texts, masks and finished flags."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token before sampling")
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"

    def sync_weights(self, model: torch.nn.Module) -> None:
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())

    def close(self) -> None:
        return None

    @torch.no_grad()
    def generate(self, prompts: list[str], sampling: SamplingSettings) -> Rollouts:
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        prompt_ids = enc["input_ids"].repeat_interleave(sampling.n, dim=0)  # [B, P]
        prompt_mask = enc["attention_mask"].repeat_interleave(sampling.n, dim=0).bool()  # [B, P]
        greedy = sampling.temperature == 0
        self.model.eval()
        sequences = self.model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask.long(),
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        response_ids = sequences[:, prompt_ids.shape[1] :]  # [B, T]
        is_eos = response_ids == self.tokenizer.eos_token_id  # [B, T]
        response_mask = (is_eos.long().cumsum(-1) - is_eos.long()) == 0  # up to and including the first EOS
        response_ids = response_ids.masked_fill(~response_mask, self.tokenizer.pad_token_id)
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=response_mask,
            behaviour_logp=torch.zeros(response_ids.shape),
            texts=self.tokenizer.batch_decode(response_ids, skip_special_tokens=True),
            group_ids=torch.arange(len(prompts)).repeat_interleave(sampling.n),
            finished=is_eos.any(-1),
        )
