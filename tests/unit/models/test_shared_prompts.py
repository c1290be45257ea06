"""Rows that share a prompt share its forward (quadrants/models/policy.py: shared_prompts), and
responses run in length buckets cut after their last token (ops/length_buckets.py).

Both are the same function of the weights as one plain forward over [B, P + T], so log-probs,
entropies and the gradient of a loss over them must agree to float tolerance, on the fused-head
path and on the logits path, with left-padded prompts of different lengths and right-padded
responses.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers.integrations import sdpa_attention

from quadrants.cpu.sdpa import FORCE_GQA
from quadrants.models.policy import fused_head, response_logprobs, shared_prompts
from quadrants.ops.length_buckets import length_buckets, response_spans
from tests.unit.small_models import logits_path_llama, small_qwen2


def _qwen2() -> nn.Module:
    return small_qwen2(5)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """6 rows, 2 prompts (A: 5 tokens, B: 3 tokens left-padded to 5) x 3 responses of up to 4
    tokens, right-padded, interleaved A B A B A B as a shuffled mini-batch would hold them."""
    generator = torch.Generator().manual_seed(0)
    prompt_a = torch.randint(5, 40, (5,), generator=generator)
    prompt_b = torch.cat(
        [torch.zeros(2, dtype=torch.long), torch.randint(5, 40, (3,), generator=generator)]
    )
    prompts = torch.stack([prompt_a, prompt_b] * 3)  # [6, 5]
    prompt_mask = torch.ones(6, 5, dtype=torch.bool)
    prompt_mask[1::2, :2] = False
    responses = torch.randint(5, 40, (6, 4), generator=generator)
    response_mask = torch.ones(6, 4, dtype=torch.bool)
    response_mask[0, 2:] = False
    response_mask[3, 1:] = False
    responses = responses.masked_fill(~response_mask, 0)
    return torch.cat([prompts, responses], 1), torch.cat([prompt_mask, response_mask], 1)


def test_rows_sharing_a_prompt_are_found_by_hand() -> None:
    sequences, mask = _batch()
    model = _qwen2()
    first, copies = shared_prompts(model, sequences, mask, 4)
    # rows 0, 2, 4 hold prompt A and rows 1, 3, 5 prompt B: two distinct prompts, each row pointing
    # at its own, and each representative row holding it
    assert first.shape == (2,)
    assert torch.equal(copies[0::2], copies[0].expand(3)) and torch.equal(
        copies[1::2], copies[1].expand(3)
    )
    assert copies[0] != copies[1]
    assert torch.equal(sequences[first[copies], :5], sequences[:, :5])
    # every prompt distinct, no prompt, or checkpointed activations: the plain path
    assert shared_prompts(model, sequences[:2], mask[:2], 4) is None
    first, copies = shared_prompts(model, sequences[:2], mask[:2], 4, even_if_distinct=True)
    assert sorted(first.tolist()) == [0, 1] and torch.equal(first[copies], torch.tensor([0, 1]))
    assert shared_prompts(model, sequences, mask, 9) is None
    model.activation_checkpointing_enable()
    assert shared_prompts(model, sequences, mask, 4) is None


@pytest.mark.parametrize(
    "rows, mode",
    [(6, "auto"), (2, "always")],
    ids=["3-rows-per-prompt", "distinct-prompts-always"],  # "always": what FSDP ranks run
)
@pytest.mark.parametrize("build", [_qwen2, logits_path_llama], ids=["fused-head", "logits"])
def test_the_shared_forward_equals_the_plain_one_with_gradients(build, rows, mode) -> None:
    torch.set_num_threads(1)
    sequences, mask = _batch()
    sequences, mask = sequences[:rows], mask[:rows]
    weights = torch.linspace(-1.0, 1.0, 24).view(6, 4)[:rows]
    results = []
    for share in (mode, "never"):
        model = build()
        assert (fused_head(model) is not None) == (build is _qwen2)
        logp, entropy = response_logprobs(
            model,
            sequences,
            mask,
            4,
            temperature=0.7,
            chunk_size=5,
            with_entropy=True,
            share_prompts=share,
            max_buckets=1,
        )
        response = mask[:, 5:]
        loss = (logp * weights * response).sum() + 0.3 * (entropy * response).sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logp * response, entropy * response, grads))
    (logp, entropy, grads), (logp0, entropy0, grads0) = results
    torch.testing.assert_close(logp, logp0, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, entropy0, rtol=0, atol=1e-5)
    assert grads.keys() == grads0.keys() and len(grads) > 10
    for name, grad in grads.items():
        scale = grads0[name].abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(grad, grads0[name], rtol=0, atol=1e-5 * max(scale, 1.0))


def _logp_entropy_grads(model, sequences, mask, length, **options):
    """Masked (logp, entropy), the raw logp, and every parameter's gradient of a loss over them."""
    logp, entropy = response_logprobs(
        model, sequences, mask, length, temperature=0.7, chunk_size=5, with_entropy=True, **options
    )
    response = mask[:, -length:]
    weights = torch.linspace(-1.0, 1.0, response.numel()).view(response.shape)
    ((logp * weights * response).sum() + 0.3 * (entropy * response).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp * response, entropy * response, logp, grads


@pytest.mark.parametrize("share", ["auto", "never"])
@pytest.mark.parametrize("build", [_qwen2, logits_path_llama], ids=["fused-head", "logits"])
def test_length_buckets_equal_one_forward_with_gradients(build, share) -> None:
    torch.set_num_threads(1)
    sequences, mask = _batch()
    # spans 2, 4, 4, 1, 4, 4; sorted 1 2 4 4 4 4: one bucket is 6 x 4 = 24 positions, the split
    # [1 2] [4 4 4 4] is 2 x 2 + 4 x 4 = 20 (saves 4 >= 24 / 16), a third bucket [1] [2] [4 ...]
    # 1 + 2 + 16 = 19 saves 1 < 1.5: two buckets, rows {3, 0} cut to 2 and the rest to 4
    buckets = length_buckets(response_spans(mask[:, 5:]), max_buckets=4)
    assert [(sorted(rows.tolist()), length) for rows, length in buckets] == [
        ([0, 3], 2),
        ([1, 2, 4, 5], 4),
    ]
    logp, entropy, raw, grads = _logp_entropy_grads(
        build(), sequences, mask, 4, share_prompts=share
    )
    logp0, entropy0, _, grads0 = _logp_entropy_grads(
        build(), sequences, mask, 4, share_prompts="never", max_buckets=1
    )
    torch.testing.assert_close(logp, logp0, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, entropy0, rtol=0, atol=1e-5)
    # the positions cut hold exactly 0: rows 0 and 3 after their bucket's length 2
    assert raw[[0, 3], 2:].abs().sum() == 0 and (raw[[1, 2, 4, 5]] != 0).all()
    assert grads.keys() == grads0.keys() and len(grads) > 10
    for name, grad in grads.items():
        scale = grads0[name].abs().max().item()
        torch.testing.assert_close(grad, grads0[name], rtol=0, atol=1e-5 * max(scale, 1.0))


def test_responses_are_cut_after_the_batch_last_token() -> None:
    """One bucket still stops at the last real token: with every response done by position 2 of
    T = 4, the result is the forward over [B, P + 2], padded with zeros to 4 columns."""
    torch.set_num_threads(1)
    sequences, mask = _batch()
    mask[:, 7:] = False
    sequences = sequences.masked_fill(~mask, 0)
    logp, entropy, raw, _ = _logp_entropy_grads(_qwen2(), sequences, mask, 4, max_buckets=1)
    short, short_entropy, _, _ = _logp_entropy_grads(
        _qwen2(), sequences[:, :7], mask[:, :7], 2, share_prompts="never", max_buckets=1
    )
    assert raw.shape == (6, 4) and raw[:, 2:].abs().sum() == 0
    torch.testing.assert_close(logp[:, :2], short, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy[:, :2], short_entropy, rtol=0, atol=1e-5)


def _reference(model, sequences, mask, length, temperature):
    """logp and entropy of the last `length` tokens from HF's own full forward over every position
    (the logits of position P-1+t, at `temperature`), masked to the real response tokens."""
    positions = (mask.long().cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=sequences, attention_mask=mask.long(), position_ids=positions).logits
    start = sequences.shape[1] - length  # the first response position (T = 0: none)
    logits = logits[:, start - 1 : -1].float() / temperature
    logprobs = torch.log_softmax(logits, -1)
    logp = logprobs.gather(-1, sequences[:, start:, None]).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    response = mask[:, start:]
    return logp * response, entropy * response


def _fed_and_checked(build, sequences, mask, length, **options) -> list[tuple[int, int]]:
    """The [rows, positions] of every input_ids the model's body is fed by one `response_logprobs`
    call, after checking its logp and entropy against HF's full forward (`_reference`) on every real
    response token."""
    model = build()
    fed: list[tuple[int, int]] = []
    model.model.register_forward_pre_hook(
        lambda _, args, kwargs: fed.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    logp, entropy = response_logprobs(
        model, sequences, mask, length, temperature=0.7, chunk_size=5, with_entropy=True, **options
    )
    assert logp.shape == entropy.shape == (sequences.shape[0], length)
    seen = list(fed)  # the reference's own call below is not one of them
    with torch.no_grad():
        logp0, entropy0 = _reference(model, sequences, mask, length, 0.7)
    response = mask[:, sequences.shape[1] - length :]
    torch.testing.assert_close(logp * response, logp0, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy * response, entropy0, rtol=0, atol=1e-5)
    return seen


@pytest.mark.parametrize("share", ["auto", "never"])
@pytest.mark.parametrize("build", [_qwen2, logits_path_llama], ids=["fused-head", "logits"])
def test_no_call_feeds_the_last_response_token(build, share) -> None:
    """The batch is 6 rows x (P = 5 + T = 4); every row's last response token is a target only.
    Plain path, one bucket: one call over [6, 5 + 4 - 1 = 8]. Shared path: the 2 distinct prompts
    [2, 5], then the responses [6, 4 - 1 = 3]. With buckets {0, 3} cut to 2 and the rest to 4, the
    plain calls are [2, 5 + 1] and [4, 5 + 3], the shared ones [2, 1] and [4, 3]. The values equal
    HF's full forward over all 9 positions on every real response token."""
    torch.set_num_threads(1)
    sequences, mask = _batch()
    one = _fed_and_checked(build, sequences, mask, 4, share_prompts=share, max_buckets=1)
    split = _fed_and_checked(build, sequences, mask, 4, share_prompts=share, max_buckets=4)
    if share == "never":
        assert one == [(6, 8)] and split == [(2, 6), (4, 8)]
    else:
        assert one == [(2, 5), (6, 3)] and split == [(2, 5), (2, 1), (4, 3)]


@pytest.mark.parametrize("share", ["always", "never"])
@pytest.mark.parametrize("build", [_qwen2, logits_path_llama], ids=["fused-head", "logits"])
def test_one_token_responses_and_none(build, share) -> None:
    """T = 1: the shared path still makes its response call (one position, whose state predicts
    nothing: FSDP ranks must make the same calls), the plain path feeds the prompt only; both equal
    HF's full forward. T = 0: [B, 0] from either path."""
    torch.set_num_threads(1)
    sequences, mask = _batch()
    sequences, mask = sequences[:, :6], mask[:, :6]  # P = 5, T = 1
    fed = _fed_and_checked(build, sequences, mask, 1, share_prompts=share)
    assert fed == ([(6, 5)] if share == "never" else [(2, 5), (6, 1)])
    _fed_and_checked(build, sequences, mask, 0, share_prompts=share)


@pytest.mark.parametrize("share", ["auto", "never"])
def test_grouped_heads_in_sdpa_equal_the_repeated_ones(share, monkeypatch) -> None:
    """Qwen2 with 4 query heads on 2 key/value heads: the forward that hands the grouped heads to
    torch's kernel (TRANSFORMERS_SDPA_FORCE_GQA=1, which the CPU tuning sets: quadrants/cpu/sdpa.py)
    gives the log-probs, entropies and every gradient of the one that repeats them (transformers'
    own path, TRANSFORMERS_SDPA_FORCE_GQA=0) to 1e-6 (gradients relative to each parameter's largest
    entry: the backward sums the repeated heads in another order)."""
    sequences, mask = _batch()
    monkeypatch.setenv(FORCE_GQA, "1")
    seen = []
    real = sdpa_attention.use_gqa_in_sdpa
    monkeypatch.setattr(
        sdpa_attention,
        "use_gqa_in_sdpa",
        lambda *args: seen.append(real(*args)) or seen[-1],
    )
    grouped = _logp_entropy_grads(_qwen2(), sequences, mask, 4, share_prompts=share)
    assert seen and all(seen)
    monkeypatch.setenv(FORCE_GQA, "0")
    seen.clear()
    repeated = _logp_entropy_grads(_qwen2(), sequences, mask, 4, share_prompts=share)
    assert seen and not any(seen)
    for a, b in zip(grouped[:3], repeated[:3]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert grouped[3].keys() == repeated[3].keys()
    for name in grouped[3]:  # relative to the parameter's largest gradient entry
        scale = max(1.0, float(repeated[3][name].abs().max()))
        torch.testing.assert_close(grouped[3][name], repeated[3][name], rtol=0, atol=1e-6 * scale)
