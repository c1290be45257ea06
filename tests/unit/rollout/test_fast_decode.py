"""The fused Llama-family decode (quadrants/rollout/fast_decode.py) against the HF module.

Its tokens differ from `decode.sample`'s for a fixed seed (rounding, and finished rows no longer
consuming random numbers), so what is tested is the equivalence in distribution: every step's logits
equal the HF module's to float tolerance, on Qwen2 (biased QKV) and Llama (no bias, separate head)
layouts with grouped-query attention and left padding; greedy decoding gives identical tokens; and
after rows are dropped each row's recorded log-prob and entropy are those of its own context (the
trainer's recompute), so no row reads another's cache.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from quadrants.models.loading import load_policy
from quadrants.models.policy import response_logprobs
from quadrants.rollout.decode import preallocated_cache, sample
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.fast_decode import (
    COMPACT_FRACTION,
    FastDecoder,
    fast_decode_unsupported,
    rms_norm,
    rotate,
    sample_fast,
    signed_sine,
)
from quadrants.rollout.hf import HFEngine
from tests.unit.small_models import small_llama, small_qwen2


def _qwen2() -> nn.Module:
    return small_qwen2(3).eval()


def _llama() -> nn.Module:
    return small_llama(7, rope_theta=100_000.0).eval()


def test_rms_norm_and_rotation_by_hand() -> None:
    # x = [3, 4]: mean square (9 + 16) / 2 = 12.5, so x / sqrt(12.5) = [0.8485, 1.1314]; weight [1, 2]
    out = rms_norm(torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 2.0]), 0.0)
    torch.testing.assert_close(out, torch.tensor([[3 / 12.5**0.5, 8 / 12.5**0.5]]))
    # halves layout, d = 2: x = [1, 2], angle θ: [1 cos θ − 2 sin θ, 2 cos θ + 1 sin θ]; θ = π/2 -> [−2, 1]
    x = torch.tensor([[[1.0, 2.0]]])
    cos, sin = torch.zeros(1, 1, 2), torch.ones(1, 1, 2)
    assert signed_sine(sin).tolist() == [[[-1.0, 1.0]]]
    torch.testing.assert_close(rotate(x, cos, signed_sine(sin)), torch.tensor([[[-2.0, 1.0]]]))
    # d = 4, two angles: x = [1, 2, 3, 4], cos = [c1, c2, c1, c2], sin = [s1, s2, s1, s2]; HF's
    # x cos + (−x3, −x4, x1, x2) sin = [1 c1 − 3 s1, 2 c2 − 4 s2, 3 c1 + 1 s1, 4 c2 + 2 s2]
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    cos = torch.tensor([[[0.5, 0.25, 0.5, 0.25]]])
    sin = torch.tensor([[[2.0, 4.0, 2.0, 4.0]]])
    expected = [[[0.5 - 6.0, 0.5 - 16.0, 1.5 + 2.0, 1.0 + 8.0]]]
    assert rotate(x, cos, signed_sine(sin)).tolist() == expected


def _llama_linear_rope() -> nn.Module:
    rope = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10_000.0}
    return small_llama(7, rope_parameters=rope).eval()


def _llama_dynamic_rope() -> nn.Module:
    """transformers' dynamic rope recomputes its frequencies per call (the per-step path here);
    within max_position_embeddings (64) they are the default ones, so the full forward is still
    the reference."""
    rope = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10_000.0}
    return small_llama(7, rope_parameters=rope).eval()


def _llama_bf16() -> nn.Module:
    return small_llama(7).to(torch.bfloat16).eval()


@pytest.mark.parametrize(
    "build, atol",
    [
        (_qwen2, 2e-6),
        (_llama, 2e-6),
        (_llama_linear_rope, 2e-6),
        (_llama_dynamic_rope, 2e-6),
        # bfloat16 keeps 8 bits: logits of order 1 round at ~4e-3, and the step and the module
        # round in different places (observed up to 2.9e-3; the mask is in the scores' dtype)
        (_llama_bf16, 0.015),
    ],
    ids=["qwen2", "llama", "llama-linear-rope", "llama-dynamic-rope", "llama-bf16"],
)
def test_each_steps_logits_equal_the_hf_forward(build, atol) -> None:
    torch.set_num_threads(1)
    model = build()
    assert fast_decode_unsupported(model) is None
    decoder_table = "none" if model.model.rotary_emb.rope_type == "dynamic" else "table"
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(5, 40, (3, 5), generator=generator)
    prompt_mask = torch.ones(3, 5, dtype=torch.bool)
    prompt_mask[1, :2] = False  # left padding
    prompt_mask[2, :4] = False
    fed = torch.randint(5, 40, (3, 6), generator=generator)  # the tokens fed after the prompt
    mask = prompt_mask.long()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    with torch.no_grad():
        full_mask = torch.cat([mask, torch.ones(3, 6, dtype=torch.long)], dim=1)
        full_positions = (full_mask.cumsum(-1) - 1).masked_fill(full_mask == 0, 0)
        reference = model(
            input_ids=torch.cat([prompts, fed], dim=1),
            attention_mask=full_mask,
            position_ids=full_positions,
        ).logits[:, 5:]  # [3, 6, V]: the logits after each fed token
        cache = preallocated_cache(model.config, 11)
        model(input_ids=prompts, attention_mask=mask, position_ids=positions, past_key_values=cache)
        decoder = FastDecoder(model, cache.layers, prompt_mask)
        assert ("none" if decoder.rotary_table is None else "table") == decoder_table
        position = positions[:, -1]
        for t in range(6):
            position = position + 1
            logits = decoder.step(fed[:, t], position)
            assert logits.dtype == reference.dtype
            torch.testing.assert_close(logits, reference[:, t], rtol=0, atol=atol)
        # dropping row 1 keeps rows 0 and 2 on their own caches
        decoder_rows = FastDecoder(model, cache.layers, prompt_mask)
        decoder_rows.length = 10  # rewind the last fed position and feed it again for two rows
        decoder_rows.keep(torch.tensor([0, 2]))
        again = decoder_rows.step(fed[[0, 2], 5], position[[0, 2]])
        torch.testing.assert_close(again, reference[[0, 2], 5], rtol=0, atol=atol)


def _stopping_settings(model, prompts, mask):
    """A stop id that greedy decoding reaches at different steps in different rows, so that rows
    finish early and are dropped: the most common token among the rows' 3rd greedy tokens."""
    free = sample(
        model,
        prompts,
        mask,
        max_new_tokens=8,
        temperature=0.0,
        top_p=1.0,
        stop_ids=[],
        pad_id=0,
        record=False,
    ).tokens
    return int(free[:, 2].mode().values)


def test_greedy_decoding_gives_the_loops_tokens_while_rows_are_dropped() -> None:
    torch.set_num_threads(1)
    model = _qwen2()
    generator = torch.Generator().manual_seed(1)
    prompts = torch.randint(5, 90, (16, 4), generator=generator)
    mask = torch.ones(16, 4, dtype=torch.bool)
    mask[::3, :2] = False
    stop = _stopping_settings(model, prompts, mask)
    settings = dict(
        max_new_tokens=8, temperature=0.0, top_p=1.0, stop_ids=[stop], pad_id=0, record=True
    )
    loop = sample(model, prompts, mask, **settings)
    fast = sample_fast(model, prompts, mask, **settings)
    finished_early = (loop.tokens[:, :-1] == stop).any(-1).sum()
    assert finished_early * COMPACT_FRACTION >= 16  # so rows were dropped on the way
    assert torch.equal(fast.tokens, loop.tokens)
    torch.testing.assert_close(fast.logp, loop.logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(fast.entropy, loop.entropy, rtol=0, atol=1e-5)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_rows_record_their_own_contexts_numbers(temperature: float, top_p: float) -> None:
    # with rows dropped mid-decode, each row's recorded log-prob and entropy must be the trainer's
    # recompute on that row's own sequence (a row reading another's cache would differ by O(1))
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    model.eval()
    engine = HFEngine(model, tokenizer)  # decode="fast", the default
    sampling = SamplingSettings(
        n=12, temperature=temperature, top_p=top_p, max_new_tokens=16, seed=3
    )
    # stop on every digit: rows end at different steps and many early
    engine.stop_ids = sorted(
        set(engine.stop_ids) | set(tokenizer.convert_tokens_to_ids(list("0123456789")))
    )
    out = engine.generate(["1+2=", "7+8-5+9="], sampling)
    lengths = out.response_mask.sum(-1)
    assert (lengths < out.response_ids.shape[1]).sum() * COMPACT_FRACTION >= 24
    sequences = torch.cat([out.prompt_ids, out.response_ids], dim=1)
    attention = torch.cat([out.prompt_mask, out.response_mask], dim=1)
    with torch.no_grad():
        logp, entropy = response_logprobs(
            model,
            sequences,
            attention,
            out.response_ids.shape[1],
            temperature=temperature,
            chunk_size=64,
            with_entropy=True,
        )
    torch.testing.assert_close(out.behaviour_logp, logp * out.response_mask, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        out.behaviour_entropy, entropy * out.response_mask, rtol=0, atol=1e-5
    )
    assert (out.response_ids[~out.response_mask] == tokenizer.pad_token_id).all()


def test_fast_draws_the_loops_distribution() -> None:
    # one prompt, 4,000 rows, 2 tokens at T = 1: the first token's empirical distribution under the
    # fast decode and under the loop both match the model's exact probabilities (total variation
    # distance well under the ~0.05 that sampling noise over ~60 likely tokens allows)
    torch.set_num_threads(1)
    model = _qwen2()
    prompts = torch.full((4000, 3), 7)
    mask = torch.ones(4000, 3, dtype=torch.bool)
    with torch.no_grad():
        exact = torch.softmax(model(input_ids=prompts[:1]).logits[0, -1].float(), -1)
    settings = dict(
        max_new_tokens=2, temperature=1.0, top_p=1.0, stop_ids=[2], pad_id=0, record=False
    )
    torch.manual_seed(0)
    fast = sample_fast(model, prompts, mask, **settings).tokens[:, 0]
    torch.manual_seed(1)
    loop = sample(model, prompts, mask, **settings).tokens[:, 0]
    for tokens in (fast, loop):
        empirical = torch.bincount(tokens, minlength=exact.shape[0]).float() / tokens.shape[0]
        assert 0.5 * (empirical - exact).abs().sum() < 0.08


def test_unsupported_models_are_named_and_take_the_loop(caplog) -> None:
    torch.set_num_threads(1)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=30, n_embd=16, n_layer=1, n_head=2)).eval()
    assert "gpt2" in fast_decode_unsupported(gpt2)
    qwen2 = _qwen2()
    assert "training mode" in fast_decode_unsupported(qwen2.train())
    qwen2.eval()
    qwen2.model.layers[1].mlp.up_proj = nn.Sequential(qwen2.model.layers[1].mlp.up_proj)
    assert "layer 1 up_proj is a Sequential" in fast_decode_unsupported(qwen2)
    # the engine falls back to the loop, which draws the loop's exact tokens, and says so once
    _, tokenizer = load_policy("tiny-random", seed=0)
    model, _ = load_policy("tiny-random", seed=0)
    model.model.layers[0].self_attn.q_proj = nn.Sequential(model.model.layers[0].self_attn.q_proj)
    sampling = SamplingSettings(n=2, temperature=1.0, max_new_tokens=6, seed=2)
    with caplog.at_level(logging.INFO, logger="quadrants.rollout.hf"):
        engine = HFEngine(model, tokenizer)
        fast = engine.generate(["1+2="], sampling)
        engine.generate(["1+2="], sampling)
    loop = HFEngine(model, tokenizer, decode="loop").generate(["1+2="], sampling)
    assert torch.equal(fast.response_ids, loop.response_ids)
    assert [r.message for r in caplog.records].count(
        "rollout.hf_decode=fast falls back to the loop: layer 0 q_proj is a Sequential, "
        "not an nn.Linear"
    ) == 1


def test_an_unknown_decode_is_refused_with_the_choices() -> None:
    _, tokenizer = load_policy("tiny-random", seed=0)
    with pytest.raises(ValueError, match=r"rollout.hf_decode='beam' is unknown; choose one of"):
        HFEngine(_qwen2(), tokenizer, decode="beam")
