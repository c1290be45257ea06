"""The rollout-engine protocol: prompts in, G sampled responses each out, with behaviour log-probs.

Shape legend: **B** = prompts x n sequences · **P** prompt tokens · **T** response tokens.
Layout (shared by every engine): prompts left-padded to P, responses right-padded to T; sequence
b answers prompt `group_ids[b]`; the n samples of one prompt are consecutive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from quadrants.config import RolloutConfig


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample. temperature 0 means greedy; top_p 1.0 means no nucleus truncation. A value
    not given is the run configuration's default (`RolloutConfig`), stated in quadrants/config.py
    only."""

    n: int = 1
    temperature: float = RolloutConfig.temperature
    top_p: float = RolloutConfig.top_p
    max_new_tokens: int = RolloutConfig.max_new_tokens
    seed: int | None = None


@dataclass(frozen=True)
class Rollouts:
    """Sampled responses and what the engine knows about them.

    Attributes:
        prompt_ids: [B, P] long, left-padded prompt ids (each prompt repeated n times).
        prompt_mask: [B, P] bool.
        response_ids: [B, T] long, right-padded with the pad id.
        response_mask: [B, T] bool, generated tokens up to and including EOS.
        behaviour_logp: [B, T] float, the engine's log-prob of each sampled token at the sampling
            temperature; 0 on padding. The trainer recomputes its own. With top_p < 1 the HF engine
            reports it before top-p truncation, vLLM after (truncated and renormalised); the two
            agree at top_p = 1.
        texts: B decoded responses (special tokens stripped).
        group_ids: [B] long, index of the prompt in the request.
        finished: [B] bool, the response ended with EOS (False = cut at max_new_tokens).
        behaviour_entropy: [B, T] float or None, the full-vocabulary entropy of each step's sampling
            distribution at the sampling temperature (before top-p truncation), 0 on padding;
            recorded by engines that see every step's distribution (the HF engine), None otherwise
            (vLLM).
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    behaviour_logp: Tensor
    texts: list[str]
    group_ids: Tensor
    finished: Tensor
    behaviour_entropy: Tensor | None = None


def rollouts_to(rollouts: Rollouts, device: torch.device) -> Rollouts:
    """The same rollouts with every tensor on `device` (no copy when already there)."""
    return replace(
        rollouts,
        prompt_ids=rollouts.prompt_ids.to(device),
        prompt_mask=rollouts.prompt_mask.to(device),
        response_ids=rollouts.response_ids.to(device),
        response_mask=rollouts.response_mask.to(device),
        behaviour_logp=rollouts.behaviour_logp.to(device),
        group_ids=rollouts.group_ids.to(device),
        finished=rollouts.finished.to(device),
        behaviour_entropy=None
        if rollouts.behaviour_entropy is None
        else rollouts.behaviour_entropy.to(device),
    )


@dataclass(frozen=True)
class EngineShare:
    """Bytes per GPU that an engine holds beside the trainer's (the memory plan, memory/peaks.py),
    awake (generating) and asleep (the trainer's update), and per rank in host memory while
    asleep. An engine that generates with the trainer's own module holds none (its registry entry
    answers None: rollout/registry.py `EngineKind.memory_share`)."""

    weights: int
    kv_cache: int
    asleep_weights: int
    asleep_kv: int
    host_pinned: int  # per rank, while asleep
    dtype_bytes: int  # bytes per element of its weights (the weight push's gathered tensor)
    # held outside what sleeping frees (CUDA graphs, the runner's buffers): in the phases the
    # engine is awake (outside its awake share, if so) and asleep
    awake_fixed: int = 0
    asleep_fixed: int = 0
    # full tensors of the largest parameter (in `dtype_bytes`) it holds besides its weights while
    # it receives a weight push
    receive_tensors: int = 0


class RolloutEngine(Protocol):
    def generate(self, prompts: list[str], sampling: SamplingSettings) -> Rollouts:
        """Sample `sampling.n` responses for every prompt."""
        ...

    def generate_from_ids(self, prompts: list[list[int]], sampling: SamplingSettings) -> Rollouts:
        """Sample `sampling.n` continuations of every token-id prefix, as `generate` samples from a
        prompt text. Branching rollouts (quadrants.probe) pass prompt + response so far + a forced
        token, so a continuation starts right after the forced token; `Rollouts.prompt_ids` holds
        the prefixes (left-padded) and the responses are the continuations only."""
        ...

    def sync_weights(self, model: nn.Module) -> None:
        """Make the next `generate` sample from `model`'s current weights."""
        ...

    def release_memory(self) -> None:
        """The trainer's update comes next: give back the accelerator memory the engine can spare
        until the next `sync_weights` or `generate` (vLLM sleeps; engines sharing the trainer's
        module have nothing to give)."""
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...


def encode_prompts(
    tokenizer: Any, prompts: Sequence[str] | Sequence[Sequence[int]]
) -> dict[str, Tensor]:
    """Left-padded ``input_ids`` and ``attention_mask`` ([B, P] long each) of prompt texts
    (tokenized without special tokens, as every engine does) or of token-id prefixes
    (padded as they are)."""
    if not prompts or isinstance(prompts[0], str):
        return tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    if any(len(ids) == 0 for ids in prompts):
        raise ValueError("a token-id prompt is empty; every prefix needs at least one token")
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.as_tensor(list(ids), dtype=torch.long)
        attention_mask[row, width - len(ids) :] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}
