"""Small Llama-family models for the forward-pass tests (fast decode, shared prompts, buckets):
a few thousand parameters, random weights from a fixed seed."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from quadrants.models.tiny import random_tiny_policy


def small_qwen2(seed: int) -> nn.Module:
    """quadrants' character-vocabulary Qwen2 (biased QKV, tied embeddings), hidden 64, 2 KV
    heads."""
    model, _ = random_tiny_policy(
        seed, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96
    )
    return model


def small_llama(seed: int, **config: Any) -> nn.Module:
    """A Llama (no QKV bias, untied head, 1 KV head), vocabulary 50, hidden 64, 2 layers;
    `config` overrides LlamaConfig fields."""
    torch.manual_seed(seed)
    settings: dict[str, Any] = dict(
        vocab_size=50,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(LlamaConfig(**{**settings, **config}))


def logits_path_llama(seed: int = 11) -> nn.Module:
    """`small_llama` whose head is not an nn.Linear, so the policy's forwards take the logits
    path instead of the fused head."""
    model = small_llama(seed)
    model.lm_head = nn.Sequential(model.lm_head)
    return model
