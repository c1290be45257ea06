"""HFEngine: behaviour log-probs recorded step by step (no [B, T, V] logits kept) and the layout."""

from __future__ import annotations

import math

import torch

from quadrants.models.loading import load_policy
from quadrants.models.policy import response_logprobs
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.hf import HFEngine, SampledLogprobs


def test_the_recorder_gathers_each_sampled_token_at_the_temperature() -> None:
    # V = 2, T = 2 (temperature). Step 0 logits [0, 2 ln 3] / 2 = [0, ln 3] -> p = [1/4, 3/4];
    # token 1 is sampled. Step 1 logits [0, 0] -> p = [1/2, 1/2]; token 0 is sampled.
    recorder = SampledLogprobs(temperature=2.0)
    prompt = torch.tensor([[5]])
    scores0 = torch.tensor([[0.0, 2 * math.log(3)]])
    assert recorder(prompt, scores0) is scores0  # scores pass through untouched
    recorder(torch.tensor([[5, 1]]), torch.tensor([[0.0, 0.0]]))
    logp = recorder.result(torch.tensor([[1, 0]]))  # the last step's token is gathered at the end
    torch.testing.assert_close(
        logp, torch.tensor([[math.log(3 / 4), math.log(1 / 2)]]), rtol=0, atol=1e-6
    )


def test_engine_logprobs_match_the_trainers_recompute() -> None:
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    sampling = SamplingSettings(n=2, temperature=0.7, top_p=0.9, max_new_tokens=10, seed=5)
    out = HFEngine(model, tokenizer).generate(["1+2=", "7+8-5+9="], sampling)  # left padding
    sequences = torch.cat([out.prompt_ids, out.response_ids], dim=1)
    attention = torch.cat([out.prompt_mask, out.response_mask], dim=1)
    with torch.no_grad():
        trainer, _ = response_logprobs(
            model,
            sequences,
            attention,
            out.response_ids.shape[1],
            temperature=0.7,
            chunk_size=64,
            with_entropy=False,
        )
    assert out.response_mask.any()
    # same model, same inputs; the engine's KV-cache decoding and the trainer's full forward differ only
    # in float32 summation order
    torch.testing.assert_close(out.behaviour_logp, trainer * out.response_mask, rtol=0, atol=1e-5)
    assert (out.behaviour_logp[~out.response_mask] == 0).all()


def test_logprobs_false_returns_zeros_and_the_same_samples() -> None:
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    sampling = SamplingSettings(n=2, temperature=1.0, max_new_tokens=8, seed=1)
    with_logp = HFEngine(model, tokenizer).generate(["3+4="], sampling)
    without = HFEngine(model, tokenizer, logprobs=False).generate(["3+4="], sampling)
    assert torch.equal(with_logp.response_ids, without.response_ids)
    assert (
        not without.behaviour_logp.any()
        and with_logp.behaviour_logp[with_logp.response_mask].lt(0).all()
    )


def test_generate_from_ids_samples_as_generate_and_continues_a_forced_prefix() -> None:
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    engine = HFEngine(model, tokenizer)
    sampling = SamplingSettings(n=2, temperature=1.0, max_new_tokens=8, seed=4)
    prompts = ["1+2=", "7+8-5+9="]
    from_text = engine.generate(prompts, sampling)
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    from_ids = engine.generate_from_ids(ids, sampling)
    # the same left-padded prompt ids, so the same seed draws the same tokens
    assert torch.equal(from_text.prompt_ids, from_ids.prompt_ids)
    assert torch.equal(from_text.response_ids, from_ids.response_ids)
    # a prefix = prompt + two response tokens: the continuation's log-probs are the trainer's on the
    # whole sequence (positions counted from the first real token, whatever the padding)
    forced = [ids[0] + from_text.response_ids[0, :2].tolist(), ids[1]]
    out = engine.generate_from_ids(
        forced, SamplingSettings(n=1, temperature=0.7, max_new_tokens=6, seed=5)
    )
    assert out.prompt_ids[0, -len(forced[0]) :].tolist() == forced[0]
    sequences = torch.cat([out.prompt_ids, out.response_ids], dim=1)
    attention = torch.cat([out.prompt_mask, out.response_mask], dim=1)
    with torch.no_grad():
        trainer, _ = response_logprobs(
            model,
            sequences,
            attention,
            out.response_ids.shape[1],
            temperature=0.7,
            chunk_size=64,
            with_entropy=False,
        )
    torch.testing.assert_close(out.behaviour_logp, trainer * out.response_mask, rtol=0, atol=1e-5)


def test_lean_decode_draws_the_same_tokens_and_logprobs_as_generate() -> None:
    # the engine's own loop against transformers' generate with the same processors, same seed:
    # sampling at T = 1, T = 0.7 with top-p 0.9, and greedy
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    for settings in (
        dict(temperature=1.0),
        dict(temperature=0.7, top_p=0.9),
        dict(temperature=0.0),
    ):
        sampling = SamplingSettings(n=3, max_new_tokens=12, seed=4, **settings)
        lean = HFEngine(model, tokenizer, decode="loop").generate(["1+2=", "7+8-5+9="], sampling)
        reference = HFEngine(model, tokenizer, decode="generate").generate(
            ["1+2=", "7+8-5+9="], sampling
        )
        assert torch.equal(lean.response_ids, reference.response_ids), settings
        assert (
            torch.equal(lean.response_mask, reference.response_mask)
            and lean.texts == reference.texts
        )
        assert torch.equal(lean.behaviour_logp, reference.behaviour_logp), settings
        assert lean.behaviour_entropy is not None and reference.behaviour_entropy is None


def test_engine_entropy_matches_the_trainers_recompute() -> None:
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    sampling = SamplingSettings(n=2, temperature=0.7, top_p=0.9, max_new_tokens=10, seed=5)
    out = HFEngine(model, tokenizer).generate(["1+2=", "7+8-5+9="], sampling)
    sequences = torch.cat([out.prompt_ids, out.response_ids], dim=1)
    attention = torch.cat([out.prompt_mask, out.response_mask], dim=1)
    with torch.no_grad():
        _, entropy = response_logprobs(
            model,
            sequences,
            attention,
            out.response_ids.shape[1],
            temperature=0.7,
            chunk_size=64,
            with_entropy=True,
        )
    # at the sampling temperature and before top-p truncation, like the trainer's; 0 on padding
    torch.testing.assert_close(
        out.behaviour_entropy, entropy * out.response_mask, rtol=0, atol=1e-5
    )
    assert (
        out.behaviour_entropy[out.response_mask].gt(0).all()
        and (out.behaviour_entropy[~out.response_mask] == 0).all()
    )
