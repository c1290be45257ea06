"""The size of an evaluation generate call (quadrants/eval/sizing.py), by hand."""

from __future__ import annotations

from quadrants.distributed.collectives import DistEnv
from quadrants.eval.runner import generate_calls
from quadrants.eval.sizing import DEFAULT_SEQUENCES, call_size, kv_cache_tokens, sequences_per_call
from quadrants.models.tokenizer import char_tokenizer


def test_sequences_per_call_by_hand():
    # Qwen2.5-7B on vLLM at gpu_memory_utilization 0.5 of 80 GB: 40e9 - 15.24e9 weights = 24.76e9 B
    # of KV cache; a token takes 2 (K, V) x 28 layers x 4 KV heads x 128 x 2 B = 57,344 B, so the
    # cache holds 24.76e9 // 57,344 = 431,780 tokens. A sequence at its longest: 1,024 prompt +
    # 3,072 new tokens = 4,096, so 431,780 // 4,096 = 105 sequences a call (105 x 4,096 = 430,080
    # <= 431,780 < 106 x 4,096 = 434,176).
    tokens = 24_760_000_000 // 57_344
    assert tokens == 431_780
    assert sequences_per_call(None, tokens, 1_024, 3_072) == 105
    # AIME24 at n = 32 (30 x 32 = 960 sequences) then takes 10 calls of 3 prompts x 32 (96 <= 105),
    # not 15 calls of 2 x 32 as with eval.batch_size=64
    assert len(generate_calls(30, 32, 105)) == 10 and len(generate_calls(30, 32, 64)) == 15
    # an explicit eval.batch_size wins; no KV cache reported (HF engine): the default
    assert sequences_per_call(64, tokens, 1_024, 3_072) == 64
    assert sequences_per_call(None, None, 1_024, 3_072) == DEFAULT_SEQUENCES == 256
    # a cache smaller than one sequence still makes calls of one sequence
    assert sequences_per_call(None, 1_000, 1_024, 3_072) == 1


class _Engine:
    """An engine that reports a KV cache of `tokens` (as VLLMEngine.kv_cache_tokens does)."""

    def __init__(self, tokens: int | None) -> None:
        self.tokens = tokens
        self.tokenizer = char_tokenizer()

    def kv_cache_tokens(self) -> int | None:
        return self.tokens


def test_call_size_reads_the_engine_and_the_longest_prompt():
    # char tokenizer: one token per character, no special tokens added. The longest prompt "12+345="
    # is 7 tokens; 7 + 40 new tokens = 47 per sequence; a cache of 1,000 tokens holds 1000 // 47 =
    # 21 sequences (21 x 47 = 987)
    prompts = ["1+2=", "12+345="]
    assert call_size(_Engine(1_000), prompts, None, 40, DistEnv()) == 21
    assert call_size(_Engine(1_000), prompts, 8, 40, DistEnv()) == 8  # eval.batch_size set
    assert call_size(_Engine(None), prompts, None, 40, DistEnv()) == 256
    assert kv_cache_tokens(object(), DistEnv()) is None  # an engine without the method (HF)
