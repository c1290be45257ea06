"""The HF engine's own decode loop: `generate`'s sampling, minus its per-token machinery.

Shape legend: **B** sequences · **P** prompt tokens · **T** new tokens · **V** vocabulary.

`transformers`' `generate` spends a fixed Python cost on every new token (input preparation and
cloning, kwargs bookkeeping, the logits-processor and stopping-criteria stacks) that dominates on
small models (docs/performance.md has the measurement). This loop makes the same model calls
(a `DynamicCache` whose layers write into one preallocated buffer, the 2-D attention mask grown by
one column per token, positions counted from the mask) and the same sampling operations in the same
order, so for a fixed seed it draws exactly the tokens `generate` draws with the HF engine's
processors:
    scores = logits.float() / τ  ->  top-p (transformers' own warper, only when top_p < 1)
    ->  softmax  ->  torch.multinomial(probs, 1);  greedy (τ = 0): argmax of the raw logits.
After a sequence's stop token (any of the engine's EOS ids) it keeps receiving the pad token, as in
`generate`; the loop stops when every sequence has finished or after `max_new_tokens`.

While it samples it records, for each step, the log-prob of the sampled token and the
full-vocabulary entropy of softmax(logits / τ) (before top-p truncation, the distribution the
trainer recomputes), holding [B, V] for the current step only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import DynamicCache, TopPLogitsWarper
from transformers.cache_utils import DynamicLayer

# the HF engine's decode paths (rollout.hf_decode; quadrants/rollout/hf.py says what each does)
HF_DECODES = ("auto", "fast", "loop", "generate")


class PreallocatedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values live in one buffer sized for the whole decode
    ([B, heads, P + T, d], allocated at the prefill): each token is written in place and the layer
    hands attention a view of the filled part, the very values `DynamicLayer` would concatenate
    (so the attention's numbers are the same) without re-copying the whole cache at every token."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def update(
        self, key_states: Tensor, value_states: Tensor, *args, **kwargs
    ) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            shape = (*key_states.shape[:2], self.capacity, key_states.shape[-1])
            self._key_buffer = key_states.new_empty(shape)
            self._value_buffer = value_states.new_empty((*shape[:3], value_states.shape[-1]))
            self.is_initialized = True
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise ValueError(
                f"the preallocated cache holds {self.capacity} positions, {end} were asked for"
            )
        self._key_buffer[:, :, self.length : end] = key_states
        self._value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._key_buffer[:, :, :end], self._value_buffer[:, :, :end]
        return self.keys, self.values


def preallocated_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache whose layers are PreallocatedLayer(capacity) (full-attention models; any other
    layer type keeps transformers' own layer)."""
    cache = DynamicCache(config=config)
    cache.layers = [
        PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer
        for layer in cache.layers
    ]
    return cache


@dataclass(frozen=True)
class Decoded:
    """Tokens and what the sampler saw. tokens [B, T] long (pad after EOS); logp, entropy [B, T]
    float32 (0 after a sequence's EOS; None when not recorded)."""

    tokens: Tensor
    logp: Tensor | None
    entropy: Tensor | None


def step_logp_entropy(logits: Tensor, tokens: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """log softmax(logits / τ) at `tokens` and the entropy of that distribution.
    [B, V], [B] -> [B], [B].

    p log p is taken as 0 where p = 0 (−inf logits), as in quadrants.ops.entropy."""
    log_probs = torch.log_softmax(logits / temperature, dim=-1)  # [B, V]
    probs = log_probs.exp()
    entropy = -torch.where(probs > 0, probs * log_probs, torch.zeros_like(probs)).sum(-1)
    return log_probs.gather(-1, tokens[:, None]).squeeze(-1), entropy


def draw(
    logits: Tensor, temperature: float, top_p_warper: TopPLogitsWarper | None, prompt_ids: Tensor
) -> Tensor:
    """One token per row from float32 `logits` [B, V] -> [B] long, as `generate` samples with the
    HF engine's processors: τ = 0 is the argmax; else softmax(logits / τ), top-p when
    `top_p_warper` is set (it ignores `prompt_ids`), one `torch.multinomial` draw per row."""
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    scores = logits / temperature
    if top_p_warper is not None:
        scores = top_p_warper(prompt_ids, scores)
    return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)


def sampling_setup(temperature: float, top_p: float) -> tuple[float, TopPLogitsWarper | None]:
    """(the temperature log-probs are recorded at, the top-p warper or None): τ = 0 (greedy)
    records at τ = 1 and never truncates."""
    greedy = temperature == 0
    warper = TopPLogitsWarper(top_p) if top_p < 1.0 and not greedy else None
    return (1.0 if greedy else temperature), warper


def prefill(model: nn.Module, prompt_ids: Tensor, mask: Tensor, capacity: int):
    """The prompts through the HF module into a `preallocated_cache(capacity)`, positions counted
    from `mask` [B, P] long as `generate` builds them. Returns (model output with the last
    position's logits, positions [B, P], cache)."""
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    cache = preallocated_cache(model.config, capacity)
    out = model(
        input_ids=prompt_ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return out, positions, cache


@torch.no_grad()
def sample(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    stop_ids: list[int],
    pad_id: int,
    record: bool,
) -> Decoded:
    """Sample up to `max_new_tokens` tokens after left-padded prompts (the model in eval mode).

    Args:
        prompt_ids: [B, P] long, left-padded, on the model's device.
        prompt_mask: [B, P] bool.
        temperature: τ > 0 samples, 0 is greedy (recorded at τ = 1).
        top_p: nucleus mass (1.0 = off).
        stop_ids: the ids that end a response (EOS and end-of-turn ids).
        record: keep the sampled tokens' log-probs and the entropies.
    """
    record_at, top_p_warper = sampling_setup(temperature, top_p)
    mask = prompt_mask.long()
    out, positions, cache = prefill(model, prompt_ids, mask, prompt_ids.shape[1] + max_new_tokens)
    position = positions[:, -1:]
    unfinished = torch.ones(prompt_ids.shape[0], dtype=torch.long, device=prompt_ids.device)
    stops = torch.tensor(stop_ids, dtype=prompt_ids.dtype, device=prompt_ids.device)
    tokens, logps, entropies = [], [], []
    for step in range(max_new_tokens):
        logits = out.logits[:, -1].float()  # [B, V]
        next_tokens = draw(logits, temperature, top_p_warper, prompt_ids)
        next_tokens = next_tokens * unfinished + pad_id * (1 - unfinished)  # [B]
        if record:
            logp, entropy = step_logp_entropy(logits, next_tokens, record_at)
            logps.append(logp * unfinished)
            entropies.append(entropy * unfinished)
        tokens.append(next_tokens)
        unfinished = unfinished & ~torch.isin(next_tokens, stops)
        if step + 1 == max_new_tokens or not bool(unfinished.any()):
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)
        position = position + 1
        out = model(
            input_ids=next_tokens[:, None],
            attention_mask=mask,
            position_ids=position,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
    stacked = (
        torch.stack(tokens, dim=1) if tokens else prompt_ids.new_zeros(prompt_ids.shape[0], 0)
    )  # [B, T]
    if not record:
        return Decoded(stacked, None, None)
    empty = torch.zeros(stacked.shape, device=stacked.device)
    return Decoded(
        stacked,
        torch.stack(logps, dim=1) if logps else empty,
        torch.stack(entropies, dim=1) if entropies else empty,
    )
