"""The rollout-engine protocol: prompts in, G sampled responses each out, with behaviour log-probs.

Shape legend: **B** = prompts x n sequences · **P** prompt tokens · **T** response tokens.
Layout (shared by every engine): prompts left-padded to P, responses right-padded to T; sequence
b answers prompt `group_ids[b]`; the n samples of one prompt are consecutive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor, nn


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample. temperature 0 means greedy; top_p 1.0 means no nucleus truncation."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
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
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    behaviour_logp: Tensor
    texts: list[str]
    group_ids: Tensor
    finished: Tensor


class RolloutEngine(Protocol):
    def generate(self, prompts: list[str], sampling: SamplingSettings) -> Rollouts:
        """Sample `sampling.n` responses for every prompt."""
        ...

    def sync_weights(self, model: nn.Module) -> None:
        """Make the next `generate` sample from `model`'s current weights."""
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...
