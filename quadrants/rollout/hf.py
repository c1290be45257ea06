"""Rollouts with Hugging Face `generate`, colocated with the trainer (same module, same weights).

Because the engine samples from the very module being trained, `sync_weights` has nothing to copy.
Behaviour log-probs come from the raw logits of each step divided by the temperature (what
`output_logits=True` returns), i.e. before top-p truncation, matching the trainer's recompute.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from quadrants.ops.entropy import logprobs_from_logits
from quadrants.rollout.engine import Rollouts, SamplingSettings


class HFEngine:
    """RolloutEngine over `model.generate`."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token before rollouts")
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"

    def sync_weights(self, model: nn.Module) -> None:
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
        prompt_mask = enc["attention_mask"].repeat_interleave(sampling.n, dim=0).bool()
        greedy = sampling.temperature == 0
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask.long(),
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        self.model.train(was_training)
        response_ids = out.sequences[:, prompt_ids.shape[1] :]  # [B, T]
        response_mask, finished = _mask_after_eos(response_ids, self.tokenizer.eos_token_id)
        logits = torch.stack(out.logits, dim=1)  # [B, T, V]
        logp = logprobs_from_logits(logits, response_ids, max(sampling.temperature, 1e-6) if not greedy else 1.0)
        response_ids = response_ids.masked_fill(~response_mask, self.tokenizer.pad_token_id)
        texts = self.tokenizer.batch_decode(response_ids, skip_special_tokens=True)
        group_ids = torch.arange(len(prompts)).repeat_interleave(sampling.n)
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=response_mask,
            behaviour_logp=logp * response_mask,
            texts=texts,
            group_ids=group_ids,
            finished=finished,
        )


def _mask_after_eos(response_ids: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Response mask keeping tokens up to and including the first EOS. Returns ([B, T] bool, [B] bool)."""
    is_eos = response_ids == eos_id  # [B, T]
    eos_before = is_eos.long().cumsum(-1) - is_eos.long()  # EOS tokens strictly before t
    return eos_before == 0, is_eos.any(-1)
