"""The colocated vLLM engine's share of each GPU, from its settings (`rollout.vllm.*`): what
`VLLMKind.memory_share` (rollout/registry.py) answers the memory plan.

Read in vLLM's source (vllm-project/vllm, the files below; the brief targets vLLM 0.33.0, whose
full snapshot was too large to fetch here, so these were read at the indexed main branch and the
lines quoted are the ones the plan depends on):

- Weights: the model's parameters in `rollout.vllm.dtype`, split over `tensor_parallel_size`
  ranks (each rank holds 1/TP of every sharded matrix).
- KV cache: `kv_cache_memory_bytes` (`rollout.vllm.kv_cache_gib`) when given; otherwise the
  worker asks for `requested_memory = total_memory * gpu_memory_utilization`
  (vllm/v1/worker/gpu_worker.py, `init_device`) and refuses to start when less than that is free,
  then gives the KV cache what is left of it after the weights and its profiled activations
  (`determine_available_memory`). So with `gpu_memory_utilization` the engine's share while awake
  is that fraction of the whole GPU, whatever the trainer holds, and the trainer's resident state
  must fit in the rest.
- Sleep (vllm/v1/worker/gpu_worker.py `Worker.sleep`):
  `allocator.sleep(offload_tags=("weights",) if level == 1 else tuple())`; the allocator
  (vllm/device_allocator/cumem.py `CuMemAllocator.sleep`) copies the offloaded tags into CPU
  tensors allocated with `pin_memory=is_pin_memory_available()` and releases the GPU memory of
  every tag. Level 1: weights in pinned host memory, KV cache discarded; level 2: both discarded
  (the next weight push refills the weights). Either way nothing of the engine stays on the GPU
  while it sleeps, apart from CUDA graphs and allocator bookkeeping (not itemised).
- Level 0 (never sleep): weights and KV cache stay on the GPU through every phase.
"""

from __future__ import annotations

from quadrants.config import VLLMConfig
from quadrants.rollout.engine import EngineShare

GiB = 2**30
_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "auto": 2}


def vllm_share(settings: VLLMConfig, parameters: int, gpu_memory_gb: float) -> EngineShare:
    """The engine's share for a model of `parameters` elements on a GPU of `gpu_memory_gb` GB."""
    if settings.dtype not in _BYTES:
        raise ValueError(
            f"rollout.vllm.dtype={settings.dtype!r}: the memory plan knows {sorted(_BYTES)}"
        )
    dtype_bytes = _BYTES[settings.dtype]
    weights = parameters * dtype_bytes // max(settings.tensor_parallel_size, 1)
    if settings.kv_cache_gib is None:
        kv = max(int(settings.gpu_memory_utilization * gpu_memory_gb * 1e9) - weights, 0)
    else:
        kv = int(settings.kv_cache_gib * GiB)
    level = settings.sleep_level
    return EngineShare(
        weights=weights,
        kv_cache=kv,
        asleep_weights=weights if level == 0 else 0,
        asleep_kv=kv if level == 0 else 0,
        host_pinned=weights if level == 1 else 0,
        dtype_bytes=dtype_bytes,
    )
