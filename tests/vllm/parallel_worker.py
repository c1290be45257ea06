"""What vLLM itself builds for each rank's engine: a worker for tests/vllm/test_parallel_config.py,
run as 2 gloo ranks under torchrun in the vLLM environment.

    python -m torch.distributed.run --standalone --nproc-per-node 2 parallel_worker.py OUT.json

Every rank starts the engine exactly as a training run does (`VLLMKind.settings`, `VLLMEngine`, on
the random tiny model's config with its weights synced in), rank 0 makes two generate calls and rank
1 one (what an evaluation with 3 calls deals), and rank 0 writes each rank's vLLM `ParallelConfig`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from quadrants.config import RunConfig
from quadrants.distributed.collectives import gather_objects, init_distributed, shutdown
from quadrants.models.loading import load_policy
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.registry import get_engine


def main(out: Path) -> None:
    torch.set_num_threads(1)
    env = init_distributed("gloo")
    cfg = RunConfig(seed=0)
    cfg.model.name_or_path = "tiny-random"
    cfg.rollout.engine = "vllm"
    cfg.rollout.vllm.kv_cache_gib, cfg.rollout.vllm.enforce_eager = 0.25, True
    cfg.rollout.vllm.dtype = "float32"
    model, tokenizer = load_policy("tiny-random", seed=0)
    engine = get_engine("vllm").start(
        cfg, model, tokenizer, replica=None, world_size=env.world_size
    )
    try:
        parallel = engine.llm.llm_engine.vllm_config.parallel_config
        sampling = SamplingSettings(n=2, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=1)
        calls = [c for c in range(3) if c % env.world_size == env.rank]
        for call in calls:  # unequal numbers of calls: with a data-parallel group this would hang
            engine.generate(["1+1="], SamplingSettings(**{**sampling.__dict__, "seed": call}))
        mine = {
            "rank": env.rank,
            "calls": len(calls),
            "data_parallel_size": parallel.data_parallel_size,
            "data_parallel_rank": parallel.data_parallel_rank,
            "distributed_executor_backend": parallel.distributed_executor_backend,
            "world_size": parallel.world_size,  # vLLM's: tensor x pipeline parallel of one engine
            "kv_cache_tokens": engine.kv_cache_tokens(),  # what sizes evaluation calls
        }
        everyone = gather_objects(mine, env)
    finally:
        engine.close()
        shutdown()
    if env.is_main:
        out.write_text(json.dumps(everyone, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
