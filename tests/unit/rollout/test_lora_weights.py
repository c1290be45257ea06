"""The weights a LoRA policy hands to an engine: merged, under the base model's names."""

from __future__ import annotations

import torch

from quadrants.config import LoraConfig
from quadrants.models.lora import adapters_disabled, apply_lora
from quadrants.models.tiny import random_tiny_policy
from quadrants.rollout.weights import copy_weights, full_weights, merged_lora_weights


def adapted_tiny() -> tuple[torch.nn.Module, torch.nn.Module]:
    """(plain tiny-random, the same with rank-4 adapters whose B matrices are non-zero)."""
    plain, _ = random_tiny_policy(0)
    adapted, _ = random_tiny_policy(0)
    apply_lora(adapted, LoraConfig(enabled=True, rank=4, alpha=8.0))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
    return plain.eval(), adapted.eval()


def test_merged_weights_load_into_the_base_architecture_and_give_the_adapted_forward():
    plain, adapted = adapted_tiny()
    merged = dict(merged_lora_weights(adapted))
    assert set(merged) == set(plain.state_dict())  # base names, no lora_A / lora_B entries
    copy_weights(plain, adapted)  # through full_weights, as the vLLM push streams them
    ids = torch.randint(
        0, plain.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        want, got = adapted(ids).logits, plain(ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    with torch.no_grad(), adapters_disabled(adapted):
        base = adapted(ids).logits
    assert (want - base).abs().max() > 1e-3  # the adapters do change the policy


def test_merged_weight_by_hand():
    """One projection: W + (alpha / r) B A, with alpha / r = 8 / 4 = 2."""
    _, adapted = adapted_tiny()
    layer = adapted.model.layers[0].self_attn.q_proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    want = layer.base_layer.weight + 2.0 * b @ a
    merged = dict(full_weights(adapted))["model.layers.0.self_attn.q_proj.weight"]
    torch.testing.assert_close(merged, want, rtol=0, atol=1e-6)
    # the trainer's own weights are untouched (no merge in place)
    assert not torch.equal(layer.base_layer.weight, want)
    # adapters switched off: the base weight as it is
    with adapters_disabled(adapted):
        off = dict(full_weights(adapted))["model.layers.0.self_attn.q_proj.weight"]
    assert torch.equal(off, layer.base_layer.weight)


def test_merged_weight_over_a_bf16_base_is_summed_in_float32():
    """Under bf16-mixed the frozen base is stored in bf16 (ops/precision.py `store_parameters`);
    the push widens it to float32 exactly and adds the float32 delta there: W_bf16.float() +
    2 B A, bit for bit what the float32 arithmetic gives, in float32 for the float32 engine.
    Added in bf16 instead, a delta of 0.1 x 0.1-sized entries (~1e-2) on weights ~0.02-0.1 keeps
    only 8 bits of the sum, so most entries would differ."""
    from quadrants.ops.precision import resolve_precision, store_parameters

    _, adapted = adapted_tiny()
    store_parameters(adapted, resolve_precision("bf16-mixed", torch.device("cpu")))
    layer = adapted.model.layers[0].self_attn.q_proj
    assert layer.base_layer.weight.dtype == torch.bfloat16
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert a.dtype == b.dtype == torch.float32
    want = layer.base_layer.weight.float() + (b @ a) * 2.0
    merged = dict(full_weights(adapted))["model.layers.0.self_attn.q_proj.weight"]
    assert merged.dtype == torch.float32
    torch.testing.assert_close(merged, want, rtol=0, atol=1e-7)
    in_bf16 = layer.base_layer.weight + (2.0 * b @ a).to(torch.bfloat16)
    assert (in_bf16.float() != merged).float().mean() > 0.5
