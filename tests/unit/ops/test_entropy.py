"""Entropy and log-probabilities from logits: hand-computed values, chunked == direct, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.ops.entropy import (
    DEFAULT_CHUNK_SIZE,
    entropy_from_logits,
    entropy_from_logits_direct,
    logprobs_and_entropy,
    logprobs_from_logits,
)

ENTROPY_FNS = [entropy_from_logits, entropy_from_logits_direct]


def reference_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """-sum p log p in float64, the slow obvious way."""
    log_probs = torch.log_softmax(logits.double() / temperature, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


# --- hand-computed values -------------------------------------------------------------------------


@pytest.mark.parametrize("entropy_fn", ENTROPY_FNS)
@pytest.mark.parametrize("temperature", [1.0, 0.7, 3.0])
def test_uniform_logits_have_entropy_log_vocab(entropy_fn, temperature):
    # equal logits -> p = 1/V at every temperature -> H = log V; V = 4 -> log 4 = 1.3862944
    logits = torch.full((2, 3, 4), 5.0)
    out = entropy_fn(logits, temperature=temperature)
    assert out.shape == (2, 3) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((2, 3), math.log(4)), rtol=0, atol=1e-6)


@pytest.mark.parametrize("entropy_fn", ENTROPY_FNS)
def test_one_hot_like_logits_have_zero_entropy(entropy_fn):
    # logits [50, 0, 0]: p_other = e^-50 ~ 2e-22, H ~ 2 * 2e-22 * 51 ~ 2e-20 -> 0 in float32
    logits = torch.tensor([[50.0, 0.0, 0.0], [0.0, -100.0, -100.0]])
    torch.testing.assert_close(entropy_fn(logits), torch.zeros(2), rtol=0, atol=1e-6)


@pytest.mark.parametrize("entropy_fn", ENTROPY_FNS)
def test_entropy_at_temperature_by_hand(entropy_fn):
    # row 0: logits [0, 2 ln 3]
    #   T = 1: p = [1, 9] / 10              -> H = ln 10 - 0.9 ln 9          = 0.3250830
    #   T = 2: z = [0, ln 3], p = [1, 3] / 4 -> H = ln 4 - 0.75 ln 3         = 0.5623351
    # row 1: logits [0, ln 2 / 2, ln 2 / 2]
    #   T = 0.5: z = [0, ln 2, ln 2], p = [1, 2, 2] / 5 -> H = ln 5 - 0.8 ln 2 = 1.0549202
    row0 = torch.tensor([0.0, 2 * math.log(3)])
    row1 = torch.tensor([0.0, math.log(2) / 2, math.log(2) / 2])
    torch.testing.assert_close(
        entropy_fn(row0, temperature=1.0), torch.tensor(0.3250830), rtol=0, atol=1e-6
    )
    torch.testing.assert_close(
        entropy_fn(row0, temperature=2.0), torch.tensor(0.5623351), rtol=0, atol=1e-6
    )
    torch.testing.assert_close(
        entropy_fn(row1, temperature=0.5), torch.tensor(1.0549202), rtol=0, atol=1e-6
    )


def test_logprobs_at_temperature_by_hand():
    # logits [0, 2 ln 3] at T = 2 -> z = [0, ln 3], p = [1/4, 3/4] -> log p = [-1.3862944, -0.2876821]
    # at T = 1 -> p = [1/10, 9/10] -> log p = [-2.3025851, -0.1053605]
    logits = torch.tensor([[0.0, 2 * math.log(3)], [0.0, 2 * math.log(3)]])
    tokens = torch.tensor([0, 1])
    torch.testing.assert_close(
        logprobs_from_logits(logits, tokens, temperature=2.0),
        torch.tensor([-1.3862944, -0.2876821]),
        rtol=0,
        atol=1e-6,
    )
    torch.testing.assert_close(
        logprobs_from_logits(logits, tokens, temperature=1.0),
        torch.tensor([-2.3025851, -0.1053605]),
        rtol=0,
        atol=1e-6,
    )


def test_low_precision_logits_are_computed_in_float32():
    # bf16 logits [0, 2 ln 3] round to [0, 2.1972656]; the result is float32 either way
    logits = torch.tensor([0.0, 2 * math.log(3)]).to(torch.bfloat16)
    out = entropy_from_logits(logits)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference_entropy(logits.float()).float(), rtol=0, atol=1e-6)


# --- chunked == direct ----------------------------------------------------------------------------

# 21 rows (3 x 7): chunk 1 (one row at a time), 4 (ragged last chunk), 21 (exactly N), 64 (> N)
CHUNK_SIZES = [1, 4, 21, 64, DEFAULT_CHUNK_SIZE]


def _random_logits(seed: int) -> torch.Tensor:
    return torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_chunked_entropy_matches_direct(chunk_size, temperature):
    logits = _random_logits(0)
    chunked = entropy_from_logits(logits, temperature=temperature, chunk_size=chunk_size)
    direct = entropy_from_logits_direct(logits, temperature=temperature)
    # The two use different formulas (logsumexp - sum p z vs -sum p log p); at entropies ~2.4 a
    # float32 ulp is 2.4e-7 and they differ by a few ulps. Both agree with float64 to the same level.
    torch.testing.assert_close(chunked, direct, rtol=0, atol=1e-6)
    reference = reference_entropy(logits, temperature).float()
    torch.testing.assert_close(chunked, reference, rtol=0, atol=1e-6)
    torch.testing.assert_close(direct, reference, rtol=0, atol=1e-6)


def test_chunk_size_does_not_change_the_result():
    # rows are independent, so every chunking computes the same per-row numbers
    logits = _random_logits(1)
    whole = entropy_from_logits(logits, chunk_size=21)
    for chunk_size in CHUNK_SIZES:
        torch.testing.assert_close(
            entropy_from_logits(logits, chunk_size=chunk_size), whole, rtol=0, atol=0
        )


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
def test_chunked_entropy_gradient_matches_direct(chunk_size):
    logits = _random_logits(2)
    weights = torch.randn(3, 7, generator=torch.Generator().manual_seed(3))
    chunked_in = logits.clone().requires_grad_()
    direct_in = logits.clone().requires_grad_()
    (
        entropy_from_logits(chunked_in, temperature=0.8, chunk_size=chunk_size) * weights
    ).sum().backward()
    (entropy_from_logits_direct(direct_in, temperature=0.8) * weights).sum().backward()
    torch.testing.assert_close(chunked_in.grad, direct_in.grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
def test_chunked_logprobs_match_log_softmax_and_gradient(chunk_size):
    logits = _random_logits(4)
    tokens = torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(5))
    chunked_in = logits.clone().requires_grad_()
    direct_in = logits.clone().requires_grad_()
    chunked = logprobs_from_logits(chunked_in, tokens, temperature=0.6, chunk_size=chunk_size)
    direct = torch.log_softmax(direct_in / 0.6, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)
    torch.testing.assert_close(chunked, direct, rtol=0, atol=1e-6)
    chunked.sum().backward()
    direct.sum().backward()
    torch.testing.assert_close(chunked_in.grad, direct_in.grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_logprobs_and_entropy_match_the_separate_functions(chunk_size):
    logits = _random_logits(6)
    tokens = torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(7))
    logp, entropy = logprobs_and_entropy(logits, tokens, temperature=0.9, chunk_size=chunk_size)
    # same arithmetic as the separate functions -> identical numbers
    torch.testing.assert_close(
        logp, logprobs_from_logits(logits, tokens, 0.9, chunk_size), rtol=0, atol=0
    )
    torch.testing.assert_close(
        entropy, entropy_from_logits(logits, 0.9, chunk_size), rtol=0, atol=0
    )
    logp_only, none = logprobs_and_entropy(logits, tokens, 0.9, chunk_size, with_entropy=False)
    assert none is None
    torch.testing.assert_close(logp_only, logp, rtol=0, atol=0)


def test_empty_input_gives_empty_output():
    logits = torch.zeros(2, 0, 5)
    tokens = torch.zeros(2, 0, dtype=torch.long)
    assert entropy_from_logits(logits).shape == (2, 0)
    logp, entropy = logprobs_and_entropy(logits, tokens)
    assert logp.shape == (2, 0) and entropy.shape == (2, 0)


# --- argument checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan")])
def test_non_positive_temperature_raises(temperature):
    logits, tokens = torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)
    for call in (
        lambda: entropy_from_logits(logits, temperature=temperature),
        lambda: entropy_from_logits_direct(logits, temperature=temperature),
        lambda: logprobs_and_entropy(logits, tokens, temperature=temperature),
    ):
        with pytest.raises(ValueError, match="temperature must be > 0"):
            call()


def test_non_positive_chunk_size_raises():
    logits, tokens = torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="chunk_size must be > 0"):
        entropy_from_logits(logits, chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size must be > 0"):
        logprobs_from_logits(logits, tokens, chunk_size=-1)


def test_token_shape_mismatch_raises():
    with pytest.raises(ValueError, match="tokens shape"):
        logprobs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
