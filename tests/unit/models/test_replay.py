"""Decode replay (quadrants/models/replay.py): the fast decode records every projection's output,
and the update's forward over those outputs gives the plain forward's log-probs, entropies and
gradients to float tolerance.

A random tiny Qwen2 (biases on q, k, v; 2 KV heads for 4 query heads)
samples 5 prompts x 4 at temperature 1 with three frequent characters as extra stop tokens, so that
about half the rows stop early and the decode drops finished rows from its batch (the recorded row
of each decode row then follows the compaction). Tolerances: log-probs and entropies atol 1e-5
(float32 rounding between one row per sequence at a time and all rows at once; observed ~1e-6),
gradients 1e-5 relative to each parameter's largest entry (observed ~1e-6)."""

from __future__ import annotations

import pytest
import torch

from quadrants.models.policy import response_logprobs
from quadrants.models.replay import OutputStorage, Replay, projections, replay_unsupported
from quadrants.models.tiny import random_tiny_policy
from quadrants.rollout.fast_decode import sample_fast
from quadrants.rollout.hf import stop_token_ids

NEW_TOKENS = 16


@pytest.fixture(scope="module")
def recorded():
    """(model, sequences [B, P + T], attention mask, T, recorded outputs, the decode's logp)."""
    model, tokenizer = random_tiny_policy(3, num_key_value_heads=2)
    tokenizer.padding_side = "left"
    texts = ["12+7=", "3*4-1=", "5=", "100-99=", "8/2+1="]  # unequal lengths: left padding
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    prompt_ids = encoded["input_ids"].repeat_interleave(4, 0)
    prompt_mask = encoded["attention_mask"].repeat_interleave(4, 0).bool()
    stops = stop_token_ids(model, tokenizer) + tokenizer.convert_tokens_to_ids(["1", "2", "+"])
    model.eval()
    torch.manual_seed(0)
    decoded = sample_fast(
        model,
        prompt_ids,
        prompt_mask,
        max_new_tokens=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        stop_ids=stops,
        pad_id=tokenizer.pad_token_id,
        record=True,
        record_outputs_mb=64,
    )
    model.train()
    stop = torch.isin(decoded.tokens, torch.tensor(stops)).long()
    response_mask = (stop.cumsum(1) - stop) == 0
    sequences = torch.cat([prompt_ids, decoded.tokens], 1)
    mask = torch.cat([prompt_mask, response_mask], 1)
    return model, sequences, mask, decoded.tokens.shape[1], decoded.linear_outputs, decoded.logp


def logprobs(model, sequences, mask, length, replay, **kwargs):
    """`response_logprobs` at temperature 1 with entropy, replaying `replay` (None: plain)."""
    return response_logprobs(
        model,
        sequences,
        mask,
        length,
        temperature=1.0,
        chunk_size=64,
        with_entropy=True,
        replay=replay,
        **kwargs,
    )


def forward_and_grads(model, sequences, mask, length, replay, **kwargs):
    """(logp, entropy) on response tokens, and every parameter's gradient of a fixed weighted sum
    of both."""
    model.zero_grad(set_to_none=True)
    logp, entropy = logprobs(model, sequences, mask, length, replay, **kwargs)
    response = mask[:, -length:]
    weights = torch.randn(logp.shape, generator=torch.Generator().manual_seed(1)) * response
    ((logp * weights).sum() + (entropy * weights).sum()).backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return logp.detach() * response, entropy.detach() * response, grads


def assert_same(plain, replayed):
    torch.testing.assert_close(replayed[0], plain[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(replayed[1], plain[1], rtol=0, atol=1e-5)
    for name, grad in plain[2].items():
        scale = float(grad.abs().max()) or 1.0
        torch.testing.assert_close(replayed[2][name], grad, rtol=0, atol=1e-5 * scale), name


def test_the_rollout_exercises_early_stops(recorded):
    """The fixture is what the docstring says: rows that stop at different steps, enough of them
    (>= 1/8 of 20) for the decode to drop finished rows."""
    _, _, mask, length, outputs, _ = recorded
    lengths = mask[:, -length:].sum(1)
    assert outputs is not None
    assert int((lengths < length).sum()) >= 3 and len(set(lengths.tolist())) >= 4


@pytest.mark.parametrize(
    "share_prompts, buckets", [("auto", 4), ("auto", 1), ("never", 4), ("never", 1)]
)
def test_replay_gives_the_plain_forward(recorded, share_prompts, buckets):
    """Shared prompt pass or every row's prompt, length buckets or one call: the same log-probs,
    entropies and gradients as the plain forward, and the decode's own log-probs."""
    model, sequences, mask, length, outputs, decode_logp = recorded
    rows = torch.arange(sequences.shape[0])
    kwargs = dict(share_prompts=share_prompts, max_buckets=buckets)
    plain = forward_and_grads(model, sequences, mask, length, None, **kwargs)
    replayed = forward_and_grads(model, sequences, mask, length, Replay(outputs, rows), **kwargs)
    assert_same(plain, replayed)
    torch.testing.assert_close(replayed[0], decode_logp * mask[:, -length:], rtol=0, atol=1e-5)


def test_a_subset_of_rows_replays_its_own(recorded):
    """Rows 17, 2, 9, 4 (out of order, two groups' worth): `Replay.select` maps each to its recorded
    row."""
    model, sequences, mask, length, outputs, _ = recorded
    rows = torch.tensor([17, 2, 9, 4])
    plain = forward_and_grads(model, sequences[rows], mask[rows], length, None)
    replay = Replay(outputs, torch.arange(sequences.shape[0])).select(rows)
    assert_same(plain, forward_and_grads(model, sequences[rows], mask[rows], length, replay))


def logp_without_grad(recorded, replay, **kwargs):
    model, sequences, mask, length, _, _ = recorded
    with torch.no_grad():
        logp, _ = logprobs(model, sequences, mask, length, replay, **kwargs)
    return logp * mask[:, -length:]


def test_the_forward_reads_the_recorded_outputs(recorded):
    """Adding 0.5 to layer 0's recorded MLP output at every response column moves the replayed
    log-probs (by more than 1e-3), so the forward takes the record and does not recompute it; the
    plain forward is unaffected."""
    model, sequences, _, length, outputs, _ = recorded
    prompt = sequences.shape[1] - length
    replay = Replay(outputs, torch.arange(sequences.shape[0]))
    before, plain = logp_without_grad(recorded, replay), logp_without_grad(recorded, None)
    outputs.down[0][prompt:] += 0.5  # [C, B, hidden]: every row of the response columns
    try:
        after, plain_after = logp_without_grad(recorded, replay), logp_without_grad(recorded, None)
    finally:
        outputs.down[0][prompt:] -= 0.5
    assert float((after - before).abs().max()) > 1e-3
    assert torch.equal(plain_after, plain)
    for module in projections(model)[0].values():
        assert "forward" not in vars(module)  # the projections are plain again afterwards


def test_the_record_has_the_batch_layout(recorded):
    """q_proj's recorded output, read through the slots, equals q_proj of that position's input in
    the plain forward (captured by a hook), on every row that fed the position: at the last prompt
    column (every row), at the second response column (rows with 3 tokens or more), and at the
    last response column that 3 rows or more fed, after the decode had dropped finished rows (so
    that those rows' outputs sit in other rows of the column's block than their own)."""
    model, sequences, mask, length, outputs, _ = recorded
    seen = {}
    q_proj = projections(model)[1]["q_proj"]
    handle = q_proj.register_forward_hook(lambda m, i, o: seen.setdefault("q", o.detach()))
    try:
        logp_without_grad(recorded, None, share_prompts="never", max_buckets=1)
    finally:
        handle.remove()
    lengths = mask[:, -length:].sum(1)
    prompt = sequences.shape[1] - length
    late = max(j for j in range(length) if int((lengths >= j + 2).sum()) >= 3)
    moved = outputs.slots[prompt + late] != torch.arange(sequences.shape[0])
    assert bool(moved[lengths >= late + 2].any())  # some fed row is not in its own row there
    for column, fed in (
        (prompt - 1, torch.ones_like(lengths, dtype=torch.bool)),
        (prompt + 1, lengths >= 3),
        (prompt + late, lengths >= late + 2),
    ):
        rows = fed.nonzero().squeeze(1)
        assert rows.numel() >= 3
        recorded_q = outputs.read(1, "q_proj", outputs.positions(rows, column, column + 1))
        torch.testing.assert_close(recorded_q[:, 0], seen["q"][rows, column], rtol=0, atol=1e-5)


def test_the_budget_and_its_arithmetic():
    """Default tiny shape: q, k, v 128 features each, hidden 128, MLP 512, so per position per
    layer 3 x 128 + 2 x 128 + 2 x 512 = 1,664 floats; columns are allocated in steps of 32; 4
    layers of float32: 2 rows x 3 columns take 2 x 32 x 1,664 x 4 x 4 = 1,703,936 bytes, as do
    2 x 32. A budget below the batch's storage records nothing."""
    model, _ = random_tiny_policy(0)
    assert OutputStorage.nbytes(model, 2, 3) == 1_703_936
    assert OutputStorage.nbytes(model, 2, 32) == 1_703_936
    assert OutputStorage.nbytes(model, 2, 33) == 2 * 1_703_936
    model.eval()
    small = sample(model, OutputStorage.nbytes(model, 2, 7) / 2**20 * 0.99)
    assert small.linear_outputs is None
    enough = sample(model, OutputStorage.nbytes(model, 2, 7) / 2**20)
    assert enough.linear_outputs is not None and enough.linear_outputs.columns == 7
    assert enough.linear_outputs.matches(IDS, 7)
    assert not enough.linear_outputs.matches(IDS + 1, 7)
    assert not enough.linear_outputs.matches(IDS, 8)


IDS = torch.tensor([[5, 6, 7]] * 2)


def sample(model, budget_mb, storage=None, seed=0):
    torch.manual_seed(seed)
    return sample_fast(
        model,
        IDS,
        torch.ones_like(IDS, dtype=torch.bool),
        max_new_tokens=4,
        temperature=1.0,
        top_p=1.0,
        stop_ids=[],
        pad_id=0,
        record=True,
        record_outputs_mb=budget_mb,
        storage=storage,
    )


def test_storage_is_reused_and_an_earlier_loan_expires():
    """A second rollout that records into the first one's storage gets the same buffers, and the
    first rollout's outputs stop being valid (`matches` is False: a replay would read the second
    rollout's values); the second's outputs are those of a rollout into fresh storage."""
    model, _ = random_tiny_policy(0)
    model.eval()
    first = sample(model, 64).linear_outputs
    second = sample(model, 64, storage=first.storage, seed=1).linear_outputs
    assert second.storage is first.storage
    assert second.qkv[0].data_ptr() == first.qkv[0].data_ptr()
    assert not first.current and not first.matches(IDS, 7)
    assert second.current and second.matches(IDS, 7)
    fresh = sample(model, 64, seed=1).linear_outputs
    assert fresh.storage is not first.storage
    for name in ("qkv", "o", "gate_up", "down"):
        for a, b in zip(getattr(fresh, name), getattr(second, name)):
            assert torch.equal(a, b), name


def test_what_the_module_must_be():
    model, _ = random_tiny_policy(0)
    assert replay_unsupported(model) is None
    model.config.attention_dropout = 0.1
    assert "dropout" in replay_unsupported(model)
    model.config.attention_dropout = 0.0
    model.model.layers[0].mlp.up_proj = torch.nn.Identity()
    assert "up_proj is not a plain nn.Linear" in replay_unsupported(model)
