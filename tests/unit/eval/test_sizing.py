"""The size of an evaluation generate call (quadrants/eval/sizing.py), by hand."""

from __future__ import annotations

from quadrants.distributed.collectives import DistEnv
from quadrants.eval.runner import generate_calls
from quadrants.eval.sizing import DEFAULT_SEQUENCES, call_size, kv_cache_tokens, sequences_per_call
from quadrants.models.tokenizer import char_tokenizer


def test_sequences_per_call_by_hand():
    # AIME24 at n = 32 over 8 ranks under vLLM: ceil(30 / 8) = 4 prompts x 32 = 128 sequences a
    # call, so the benchmark's 30 x 32 = 960 sequences go in ceil(30 / 4) = 8 calls: one per rank
    # (the last holds 30 - 7 x 4 = 2 prompts)
    assert sequences_per_call(None, True, 30, 32, 8) == 128
    calls = generate_calls(30, 32, 128)
    assert len(calls) == 8 and (calls[-1].start, calls[-1].stop) == (28, 30)
    assert all(call.samples == 32 for call in calls)
    # MATH500 at n = 4 in one process: all 500 x 4 = 2,000 sequences in one call
    assert sequences_per_call(None, True, 500, 4, 1) == 2_000
    assert len(generate_calls(500, 4, 2_000)) == 1
    # fewer problems than ranks: one problem's samples a call, ranks beyond them idle
    assert sequences_per_call(None, True, 3, 16, 8) == 16
    # an explicit eval.batch_size wins; an engine that does not schedule (HF): the default
    assert sequences_per_call(64, True, 30, 32, 8) == 64
    assert sequences_per_call(None, False, 30, 32, 8) == DEFAULT_SEQUENCES == 256


class _Engine:
    """An engine that reports a KV cache of `tokens` (as VLLMEngine.kv_cache_tokens does)."""

    def __init__(self, tokens: int | None) -> None:
        self.tokens = tokens
        self.tokenizer = char_tokenizer()

    def kv_cache_tokens(self) -> int | None:
        return self.tokens


def test_call_size_hands_a_ranks_share_to_an_engine_that_schedules():
    # two prompts, 5 samples each, one process: an engine that reports a KV cache (vLLM) gets both
    # prompts' 2 x 5 = 10 sequences in one call, whatever the cache's size
    prompts = ["1+2=", "12+345="]
    assert call_size(_Engine(1_000), prompts, None, 5, DistEnv()) == 10
    assert call_size(_Engine(10), prompts, None, 5, DistEnv()) == 10
    assert call_size(_Engine(1_000), prompts, 8, 5, DistEnv()) == 8  # eval.batch_size set
    assert call_size(_Engine(None), prompts, None, 5, DistEnv()) == 256  # reports none: HF
    assert kv_cache_tokens(object(), DistEnv()) is None  # an engine without the method (HF)
