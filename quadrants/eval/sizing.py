"""How many sequences one evaluation generate call holds (`eval.batch_size`, or sized from the
engine's KV cache when that is unset).

A colocated vLLM engine stays awake across all the generate calls of an evaluation
(quadrants/rollout/vllm.py), so what a call's size decides is how full the engine runs: a call
smaller than what the KV cache holds leaves it part empty, above all in each call's tail. With
`eval.batch_size: null` (the default) a call holds as many sequences as the engine's KV cache
holds at their longest, every sequence at the benchmark's longest prompt plus
`eval.max_new_tokens`:

    sequences = kv_cache_tokens // (longest prompt tokens + eval.max_new_tokens)

(so vLLM never has to preempt a sequence of the call). `kv_cache_tokens` is what the engine reports
after it started (vLLM: `cache_config.num_gpu_blocks x block_size`, set by the engine core once the
cache is allocated: `vllm/v1/engine/core.py`, `EngineCore._initialize_kv_caches`), the smallest over
the ranks, so every rank cuts the same calls. An engine that reports none (the HF engine, which
allocates as it goes) makes calls of `DEFAULT_SEQUENCES`. `eval.batch_size` set: exactly that.

A call's size fixes which samples share a seed stream, so the samples (not their distribution)
depend on it: compare runs made with the same sizing (the same engine settings, or an explicit
`eval.batch_size`). It does not depend on the number of ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quadrants.distributed.agreement import min_over_ranks
from quadrants.distributed.collectives import DistEnv
from quadrants.rollout.engine import encode_prompts

DEFAULT_SEQUENCES = 256  # an engine without a KV cache of fixed size (the HF engine)


def sequences_per_call(
    override: int | None, kv_cache_tokens: int | None, prompt_tokens: int, max_new_tokens: int
) -> int:
    """Sequences per generate call (module docstring): `override` when set; else the KV cache's
    tokens over one sequence's longest length (at least 1); else `DEFAULT_SEQUENCES`."""
    if override is not None:
        return override
    if kv_cache_tokens is None:
        return DEFAULT_SEQUENCES
    return max(1, kv_cache_tokens // (prompt_tokens + max_new_tokens))


def kv_cache_tokens(engine: Any, dist: DistEnv) -> int | None:
    """The tokens the engine's KV cache holds (`engine.kv_cache_tokens()`), the smallest over the
    ranks (a collective when sharded); None when an engine reports none."""
    report = getattr(engine, "kv_cache_tokens", None)
    tokens = report() if report is not None else None
    return min_over_ranks(tokens, dist)  # distributed/agreement.py; one process: `tokens`


def call_size(
    engine: Any, prompts: Sequence[str], batch_size: int | None, max_new_tokens: int, dist: DistEnv
) -> int:
    """Sequences per generate call for `prompts` on `engine` (every rank calls it)."""
    if batch_size is not None:
        return batch_size
    tokens = kv_cache_tokens(engine, dist)
    longest = 0
    if tokens is not None and prompts:
        longest = int(encode_prompts(engine.tokenizer, list(prompts))["input_ids"].shape[1])
    return sequences_per_call(None, tokens, longest, max_new_tokens)
