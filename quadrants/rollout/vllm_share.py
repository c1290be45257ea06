"""The colocated vLLM engine's share of each GPU, from its settings (`rollout.vllm.*`) and the
device's usable memory: what `VLLMKind.memory_share` (rollout/registry.py) answers the memory
plan.

Read in vLLM's source (vllm-project/vllm; the brief targets vLLM 0.33.0, whose full snapshot is too
large to fetch here, so these were read at the indexed main branch, the lines quoted being the
ones the plan depends on):

- Weights: the model's parameters in `rollout.vllm.dtype`, split over `tensor_parallel_size`
  ranks (each rank holds 1/TP of every sharded matrix).
- Awake: `kv_cache_memory_bytes` (`rollout.vllm.kv_cache_gib`) when given; otherwise the worker
  takes `total_gpu_memory * gpu_memory_utilization`, `total_gpu_memory` being
  `torch.cuda.mem_get_info()[1]`, the device's usable total as the driver reports it
  (vllm/v1/worker/gpu_worker.py `determine_available_memory`: the KV cache gets that product
  minus the profiled peak of weights, activations and non-torch allocations; `init_device`
  refuses to start when less than it is free). So the engine's share while awake is
  `utilization x the device's usable total` (an "80 GB" H100 reports about 79.1 GiB, 84.9e9 bytes,
  not 80e9), whatever the trainer holds, and the trainer must fit in the rest.
- Asleep (`Worker.sleep`: `allocator.sleep(offload_tags=("weights",) if level == 1 else
  tuple())`; vllm/device_allocator/cumem.py `CuMemAllocator.sleep`): every allocation made inside
  the allocator's pool is unmapped, the "weights" tag first copied to pinned host memory at level
  1. Level 1: weights on the host, KV cache discarded; level 2: both discarded (the next push
  refills the weights); level 0: nothing sleeps.
- What sleep does not free (`asleep_fixed`): the CUDA-graph pool is captured outside that pool
  unless `sleep_mode_offload_cudagraph` routes it in (vllm/compilation/cudagraph_pool.py
  `use_cudagraph_pool`, only when `vllm_config.use_cumem_cudagraph_pool`; the option is opt-in,
  vllm-project/vllm#59160), and the model runner's persistent input and sampling buffers are
  allocated outside it too. Their size is not computed here: `CUDA_GRAPH_POOL_GIB` and
  `RUNNER_BUFFERS_GIB` are assumptions (vLLM logs the graph pool's size at start, "Graph
  capturing finished in ... took ... GiB"; the first GPU run should replace them). With
  `rollout.vllm.enforce_eager` there are no graphs. While awake under `gpu_memory_utilization`
  they are inside the engine's share; with a fixed `kv_cache_gib` they come on top of it.
- The push (`receive_tensors`): `reload_weights` reloads layer by layer
  (vllm/model_executor/model_loader/reload/layerwise.py): a layer's incoming tensors are loaded
  into new tensors and then copied into the engine's parameters, so besides the one gathered
  tensor the trainer hands over, one more tensor of up to the largest parameter's size exists
  while the engine receives it.
"""

from __future__ import annotations

from quadrants.config import VLLMConfig
from quadrants.rollout.engine import EngineShare

GiB = 2**30
_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "auto": 2}
# assumptions (module docstring), per engine: the CUDA-graph pool of the default capture sizes for
# a 1.5B-7B model, and the runner's persistent buffers
CUDA_GRAPH_POOL_GIB = 1.0
RUNNER_BUFFERS_GIB = 0.25


def vllm_share(settings: VLLMConfig, parameters: int, device_bytes: int) -> EngineShare:
    """The engine's share for a model of `parameters` elements on a GPU whose usable total is
    `device_bytes` (what `torch.cuda.mem_get_info()[1]` reports)."""
    if settings.dtype not in _BYTES:
        raise ValueError(
            f"rollout.vllm.dtype={settings.dtype!r}: the memory plan knows {sorted(_BYTES)}"
        )
    dtype_bytes = _BYTES[settings.dtype]
    weights = parameters * dtype_bytes // max(settings.tensor_parallel_size, 1)
    by_utilization = settings.kv_cache_gib is None
    if by_utilization:
        kv = max(int(settings.gpu_memory_utilization * device_bytes) - weights, 0)
    else:
        kv = int(settings.kv_cache_gib * GiB)
    graphs = 0 if settings.enforce_eager else CUDA_GRAPH_POOL_GIB
    fixed = int((graphs + RUNNER_BUFFERS_GIB) * GiB)
    level = settings.sleep_level
    return EngineShare(
        weights=weights,
        kv_cache=kv,
        asleep_weights=weights if level == 0 else 0,
        asleep_kv=kv if level == 0 else 0,
        host_pinned=weights if level == 1 else 0,
        dtype_bytes=dtype_bytes,
        awake_fixed=0 if by_utilization else fixed,
        asleep_fixed=fixed,
        receive_tensors=1,
    )
