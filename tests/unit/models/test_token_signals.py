"""models/token_signals.py on the real tiny-random Qwen2: the attention-entropy pass equals the
entropy of the weights transformers returns with `output_attentions=True` under eager attention,
for any row chunking, and leaves the model's attention implementation as it found it; the adapter
residual is 0 while peft's B = 0 and otherwise equals the norm of the difference of the hidden
states transformers returns with the adapters on and off.

CPU only. What only a GPU can show: the same under bf16 autocast, and the memory bound."""

from __future__ import annotations

import pytest
import torch

from quadrants.config import LoraConfig
from quadrants.models.loading import load_policy
from quadrants.models.lora import adapters_disabled, trainable_parameters
from quadrants.models.policy import position_ids_from_mask
from quadrants.models.token_signals import (
    adapter_residual_pass,
    attention_entropy_pass,
    chosen_layers,
)

T = 4


def rows():
    gen = torch.Generator().manual_seed(0)
    sequences = torch.randint(3, 60, (3, 9), generator=gen)
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[0, :2] = False  # a left-padded prompt
    mask[2, -1] = False  # a right-padded response
    return sequences, mask


def reference_entropy(model, sequences, mask, layers):
    """Straight from transformers: eager attention, output_attentions=True, every layer's weights
    [B, H, L, L]; the rows predicting the response tokens; mean over heads, then layers."""
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(
            input_ids=sequences,
            attention_mask=mask.long(),
            position_ids=position_ids_from_mask(mask),
            output_attentions=True,
        )
    model.set_attn_implementation("sdpa")
    per_layer = []
    for i in layers:
        w = out.attentions[i][:, :, -T - 1 : -1, :]
        per_layer.append(-(torch.special.xlogy(w, w)).sum(-1).mean(1))
    return torch.stack(per_layer).mean(0)


@pytest.mark.parametrize("layers", ["all", "last", [0, -1]])
def test_attention_entropy_equals_transformers_eager_weights(layers):
    model, _ = load_policy("tiny-random", seed=0)
    sequences, mask = rows()
    before = model.config._attn_implementation
    got = attention_entropy_pass(model, sequences, mask, T, layers=layers, batch_size=2)
    assert model.config._attn_implementation == before  # switched back
    count = model.config.num_hidden_layers
    expected = reference_entropy(model, sequences, mask, chosen_layers(count, layers))
    torch.testing.assert_close(got, expected)
    # one row at a time gives the same numbers
    torch.testing.assert_close(
        attention_entropy_pass(model, sequences, mask, T, layers=layers, batch_size=1), got
    )
    # row 0's first response token is predicted at position 4, which sees keys 2..4: at most ln 3
    assert 0 < got[0, 0] <= torch.log(torch.tensor(3.0)) + 1e-6


def test_attention_layers_out_of_range_are_refused():
    with pytest.raises(ValueError, match=r"quadrant.attention_layers=\[7\]"):
        chosen_layers(4, [7])
    assert chosen_layers(4, [-1, 0]) == [0, 3]


@pytest.mark.slow
def test_adapter_residual_is_zero_at_init_and_the_hidden_state_difference_after():
    lora = LoraConfig(enabled=True, rank=4, alpha=8.0)
    model, _ = load_policy("tiny-random", seed=0, lora=lora)
    sequences, mask = rows()
    zero = adapter_residual_pass(model, sequences, mask, T, batch_size=2)
    torch.testing.assert_close(zero, torch.zeros(3, T), rtol=0, atol=0)  # peft's B = 0
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in trainable_parameters(model):
            p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    for layer in (-1, 0, 2):
        got = adapter_residual_pass(model, sequences, mask, T, layer=layer, batch_size=2)
        kwargs = dict(
            input_ids=sequences,
            attention_mask=mask.long(),
            position_ids=position_ids_from_mask(mask),
            output_hidden_states=True,
        )
        with torch.no_grad():
            adapted = model(**kwargs).hidden_states[layer][:, -T - 1 : -1]
            with adapters_disabled(model):
                base = model(**kwargs).hidden_states[layer][:, -T - 1 : -1]
        torch.testing.assert_close(got, (adapted - base).norm(dim=-1))
        # entry 0 is the embeddings, which no adapter precedes: exactly 0 there; > 0 after a layer
        assert (got > 0).all() if layer != 0 else (got == 0).all()


def test_a_residual_layer_out_of_range_names_the_key():
    model, _ = load_policy("tiny-random", seed=0, lora=LoraConfig(enabled=True, rank=4, alpha=8.0))
    sequences, mask = rows()
    with pytest.raises(ValueError, match=r"model.lora.residual_layer=9 is out of range"):
        adapter_residual_pass(model, sequences, mask, T, layer=9, batch_size=2)


@pytest.mark.slow
def test_the_packed_adapter_residual_equals_the_padded_one():
    """train.attention_layout=packed: the rows as one sequence of their real tokens
    (ops/packing.py). The adapter residual equals the padded pass's to float rounding (1e-5, the
    packed forward's tolerance: tests/unit/models/test_packed_forward.py) on every real response
    token, after the adapters are moved off peft's B = 0; packed, row 2's last position (after its
    last real token) holds 0."""
    sequences, mask = rows()
    response = mask[:, -T:]
    model, _ = load_policy("tiny-random", seed=0, lora=LoraConfig(enabled=True, rank=4, alpha=8.0))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in trainable_parameters(model):
            p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    padded = adapter_residual_pass(model, sequences, mask, T, batch_size=3)
    packed = adapter_residual_pass(model, sequences, mask, T, batch_size=3, layout="packed")
    torch.testing.assert_close(packed[response], padded[response], rtol=0, atol=1e-5)
    assert (packed[response] > 0).all() and packed[2, -1] == 0
