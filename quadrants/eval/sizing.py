"""How many sequences one evaluation generate call holds (`eval.batch_size`, or the rank's whole
share when the engine schedules its own batches).

A colocated vLLM engine stays awake across all the generate calls of an evaluation
(quadrants/rollout/vllm.py) and schedules each call's requests itself: it runs as many sequences
as its KV cache holds at once, queues the rest and starts each as another finishes (preempting
and recomputing one only when the running ones outgrow the cache). So with `eval.batch_size: null`
(the default) and an engine that reports a KV cache, each rank hands its whole share of a
benchmark to one call:

    sequences = ceil(problems / ranks) x samples

and the benchmark's calls are one per rank (eval/runner.py deals call i to rank i % ranks). Cutting
the share into calls sized to the cache at full length, as before, left the cache part empty in
each call's tail, where the long responses finish alone, and that at every call. An engine that
reports no KV cache (the HF engine, which allocates the whole batch at once) makes calls of
`DEFAULT_SEQUENCES`. `eval.batch_size` set: exactly that.

A call's size fixes which samples share a seed stream, so the samples (not their distribution)
depend on it: with the share sizing, on the number of ranks too. Compare runs made with the same
sizing (the same engine and ranks, or an explicit `eval.batch_size`, which depends on neither).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from quadrants.distributed.agreement import min_over_ranks
from quadrants.distributed.collectives import DistEnv

DEFAULT_SEQUENCES = 256  # an engine without a KV cache of fixed size (the HF engine)


def sequences_per_call(
    override: int | None, schedules: bool, problems: int, samples: int, ranks: int
) -> int:
    """Sequences per generate call (module docstring): `override` when set; else, for an engine
    that `schedules` its own batches, a rank's share of `problems` x `samples` (at least one
    problem's samples); else `DEFAULT_SEQUENCES`."""
    if override is not None:
        return override
    if not schedules:
        return DEFAULT_SEQUENCES
    return max(1, math.ceil(problems / ranks)) * samples


def kv_cache_tokens(engine: Any, dist: DistEnv) -> int | None:
    """The tokens the engine's KV cache holds (`engine.kv_cache_tokens()`), the smallest over the
    ranks (a collective when sharded, so that every rank sizes alike); None when an engine reports
    none (it does not schedule its own batches)."""
    report = getattr(engine, "kv_cache_tokens", None)
    tokens = report() if report is not None else None
    return min_over_ranks(tokens, dist)  # distributed/agreement.py; one process: `tokens`


def call_size(
    engine: Any, prompts: Sequence[str], batch_size: int | None, samples: int, dist: DistEnv
) -> int:
    """Sequences per generate call for `prompts`, `samples` answers each, on `engine` (every rank
    calls it)."""
    if batch_size is not None:
        return batch_size
    schedules = kv_cache_tokens(engine, dist) is not None
    return sequences_per_call(None, schedules, len(prompts), samples, dist.world_size)
