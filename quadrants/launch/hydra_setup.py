"""Everything Hydra needs from quadrants: the typed schema, resolvers, sweep ids
and the pre-flight check.

- `register()` puts `RunConfig` into Hydra's ConfigStore as `run_schema` (the primary config's first
  default) and registers the `quadrants.*` resolvers the YAML tree uses.
- `with_sweep_id(argv)` gives a command its sweep id: a short hash of its sorted overrides unless it
  names one (`sweep_id=NAME`), so the same command always maps to the same run directories.
- `preflight(argv)` composes every job of the command (CLI sweeps and `hydra.sweeper.params` of an
  experiment preset, expanded as Hydra's basic sweeper does) and validates each against the schema
  and the objective signatures, so a wrong value fails before any job is launched, locally or on
  SLURM.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from quadrants.config import RunConfig
from quadrants.cpu.openmp import spin_environment
from quadrants.launch.local_checks import check_launcher_jobs, check_local_job, runs_here
from quadrants.launch.slurm_host import SLURM_LAUNCHER
from quadrants.memory.check import check_memory
from quadrants.memory.peaks import HOST_MARGIN, GiB, Plan
from quadrants.rollout.registry import get_engine
from quadrants.run.resume_identity import OUTSIDE_THE_RUN, check_resume, may_change
from quadrants.run_plan import RunPlan
from quadrants.tracking.setup import tracking_uri

CONFIG_DIR = Path(__file__).resolve().parents[2] / "sweeps"  # the repository's sweeps/
_HYDRA_FLAGS_WITHOUT_JOBS = (
    "--help",
    "-h",
    "--hydra-help",
    "--cfg",
    "-c",
    "--info",
    "--shell-completion",
    "-sc",
    "--version",
)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def register() -> None:
    """Register the schema and resolvers (idempotent)."""
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
    resolvers = {
        "quadrants.abspath": lambda p: str(Path(p).expanduser().resolve()),
        "quadrants.job_name": lambda name: name or "default",
        "quadrants.parallel_jobs": lambda: max(1, min(4, _cpu_count())),
        "quadrants.threads_per_job": lambda n: max(1, _cpu_count() // max(1, int(n))),
        # GPUs one run's process needs (launcher=slurm), as the rollout engine says (vLLM: its
        # tensor-parallel size; the HF engine: none, CPU or whatever the job finds)
        "quadrants.gpus_per_run": lambda rollout: get_engine(rollout.engine).gpus_per_run(rollout),
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


# Hydra's command-line flags that take a value (`--cfg job`, `-cn config`);
# `--info` takes one optionally
_HYDRA_VALUE_FLAGS = (
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
)
_HYDRA_INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def split_hydra_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's flags with their values, the overrides) of a command line, wherever the flags stand.

    Hydra accepts `--cfg job` before or after the overrides; argparse does not once we append our
    own overrides (sweep id, run naming), so the entry points put the flags first (`hydra_argv`).
    """
    flags: list[str] = []
    overrides: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else None
        takes_value = following is not None and (
            arg in _HYDRA_VALUE_FLAGS
            or (arg in ("--info", "-i") and following in _HYDRA_INFO_CHOICES)
        )
        if not arg.startswith("-"):
            overrides.append(expand_home(arg))
        elif takes_value:
            flags += [arg, following]
            index += 1
        else:  # -m, --resolve, --help, --cfg=job, ...
            flags.append(arg)
        index += 1
    return flags, overrides


# `~` where a path starts in an override's value: the value's start, each item of a comma list or
# of a [list], after a sqlite:/// or file:// scheme; followed by `/`, the end or the next item
_HOME_IN_VALUE = re.compile(r"(^|[,\[]|sqlite:///|file://)~(?=[/,\]]|$)")


def expand_home(override: str) -> str:
    """`key=~/x` with `~` as the user's home, as the shell expands `VAR=~/x` but not after a
    dotted key (`task.params.path=~/x` reaches the command as typed), and Hydra's override
    grammar has no `~` in an unquoted value, so it would fail with a LexerNoViableAltException
    (facebookresearch/hydra hydra/grammar/OverrideLexer.g4: `UNQUOTED_CHAR` lacks it; `~` is only
    the delete prefix of a key). A quoted value is left as written (its path is expanded where
    it is read); `~user` is left to Hydra, whose refusal `_checked` explains."""
    key, sep, value = override.partition("=")
    if not sep or key.startswith("~") or "~" not in value:
        return override
    home = os.path.expanduser("~")
    return key + sep + _HOME_IN_VALUE.sub(lambda m: m.group(1) + home, value)


def prints_only(argv: list[str]) -> bool:
    """True when Hydra would only print (help, `--cfg`, `--info`, ...) and run no job."""
    flags, _ = split_hydra_argv(argv)
    return any(a in _HYDRA_FLAGS_WITHOUT_JOBS or a.startswith(("--cfg", "--info")) for a in flags)


def hydra_argv(argv: list[str]) -> list[str]:
    """`argv` with Hydra's flags (and their values) first, then the overrides, each in order."""
    flags, overrides = split_hydra_argv(argv)
    return [*flags, *overrides]


def _overrides(argv: list[str]) -> list[str]:
    return split_hydra_argv(argv)[1]


def with_sweep_id(argv: list[str]) -> list[str]:
    """`argv` plus `sweep_id=<hash of the sorted overrides>` unless it already sets sweep_id.
    Overrides of where records go and of thread counts (run/resume_identity.py `OUTSIDE_THE_RUN`:
    tracking.uri, outputs, train.threads, ...) stay out of the hash: the same runs, resumed."""
    overrides = _overrides(argv)
    if any(o.split("=", 1)[0].lstrip("+~") == "sweep_id" for o in overrides):
        return argv
    relevant = sorted(
        o
        for o in overrides
        if not o.startswith(("hydra.", "hydra/", "launcher="))
        and not may_change(o.split("=", 1)[0].lstrip("+~"), OUTSIDE_THE_RUN)
    )
    digest = hashlib.sha1("\n".join(relevant).encode()).hexdigest()[:8]
    return [*argv, f"sweep_id=s{digest}"]


DEFAULT_EXCLUDED_KEYS = (
    "sweep_id",
    "study",
    "outputs",
    "launcher",
    "tracking",
    "tracking.uri",
    "tracking.sinks",  # a list ([tensorboard,wandb]): its commas are not a sweep
    "train.threads",
    "experiment",
)


def name_runs_by_swept_keys(argv: list[str]) -> list[str]:
    """Leave the overrides every job shares out of run names and run directories.

    Jobs of a multirun are then named by what varies (`quadrant=PHR,seed=1`), a single run is named
    `default`; the shared overrides are already in the sweep id, so directories stay unique.
    """
    if any(o.startswith("hydra.job.config.override_dirname.exclude_keys") for o in argv):
        return argv
    shared = [
        o.split("=", 1)[0]
        for o in _overrides(argv)
        if "=" in o
        and "," not in o.split("=", 1)[1]
        and not o.startswith(("hydra.", "hydra/", "+", "~"))
    ]
    keys = list(dict.fromkeys([*DEFAULT_EXCLUDED_KEYS, *shared]))
    return [*argv, f"hydra.job.config.override_dirname.exclude_keys=[{','.join(keys)}]"]


def expand_jobs(
    overrides: list[str], sweeper_params: dict[str, Any] | None = None
) -> list[list[str]]:
    """The per-job override lists of a multirun, as Hydra's basic sweeper expands them."""
    merged: dict[str, str] = {str(k): str(v) for k, v in (sweeper_params or {}).items()}
    order: list[str] = []
    for item in overrides:
        key = item.split("=", 1)[0]
        merged[key] = item.split("=", 1)[1] if "=" in item else ""
        order.append(key)
    lines = [f"{k}={v}" for k, v in merged.items()]
    parsed = OverridesParser.create().parse_overrides(lines)
    batches = BasicSweeper.split_arguments(parsed, None)
    return [list(job) for batch in batches for job in batch]


def _compose_job(overrides: list[str]) -> DictConfig:
    """Compose one job as Hydra would run it (inside initialize_config_dir): the job config, with
    HydraConfig set so `${hydra:...}` interpolations (run directories) resolve."""
    cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def compose_config(overrides: list[str]) -> RunConfig:
    """Compose the tree with `overrides` (one job): the configuration, its keys checked against
    the schema, not yet parsed (a command that fits it to its target first parses it once after:
    launch/evaluate.py)."""
    check_removed_keys(overrides)  # named by their replacement, as the sweep names them
    overrides = [expand_home(o) for o in overrides]
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_config(_compose_job(overrides))


def compose_run_plan(
    overrides: list[str], *, files: bool = True, task_used: bool = True
) -> RunPlan:
    """Compose the tree with `overrides` (one job) and parse it into its `RunPlan` (raises
    ValueError naming the key); ``files=False`` (printing it) does not ask for the data files to
    exist, ``task_used`` as `RunPlan.parse` says."""
    return RunPlan.parse(compose_config(overrides), files=files, task_used=task_used)


def compose_run_config(overrides: list[str], *, files: bool = True) -> RunConfig:
    """The checked configuration of `compose_run_plan` (what a printed or exported config is)."""
    return compose_run_plan(overrides, files=files).cfg


def to_config(cfg: DictConfig) -> RunConfig:
    """A composed job config as a RunConfig instance: its keys checked against the schema, a `~`
    left in tracking.uri refused; not parsed."""
    check_known_keys(cfg, RunConfig())
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunConfig)
    check_home_in_uri(run.tracking.uri)
    return run


def to_run_plan(
    cfg: DictConfig, *, files: bool = True, world_size: int = 1, task_used: bool = True
) -> RunPlan:
    """A composed job config parsed into its `RunPlan` (quadrants/run_plan: every value checked,
    the batch's layout over `world_size` ranks, the data files unless ``files=False``); raises
    ValueError naming the key."""
    return RunPlan.parse(to_config(cfg), world_size=world_size, files=files, task_used=task_used)


def saved_config(path: Path) -> DictConfig:
    """A run's saved config (`<run_dir>/config.yaml`) over the schema's defaults, refused naming the
    key when it holds a key renamed since (`check_removed_keys_in`)."""
    loaded = OmegaConf.load(path)
    check_removed_keys_in(OmegaConf.to_container(loaded), str(path))  # a run from before a rename
    merged = OmegaConf.merge(OmegaConf.structured(RunConfig), loaded)
    assert isinstance(merged, DictConfig)
    return merged


def check_home_in_uri(uri: str | None) -> None:
    """A `~` left in tracking.uri (a quoted value: `expand_home` expands an unquoted one) would
    reach MLflow as a folder named `~` under the working directory; refused naming the fix."""
    if uri and re.match(r"(sqlite:///|file://|file:)?~", uri):
        home = os.path.expanduser("~")
        raise ValueError(
            f"tracking.uri={uri}: MLflow does not expand `~` (it would make a folder named `~` in "
            f"the working directory). Write it unquoted, tracking.uri={uri}, where the command "
            f"expands `~` to {home}, or give the full path"
        )


def check_known_keys(node: Any, schema: Any, prefix: str = "") -> None:
    """Raise ValueError naming a key of the composed config that the schema does not have.

    Hydra lets `+section.key=value` add a key to the structured config, and OmegaConf's
    `to_object` then sets it as a stray attribute of the dataclass, which nothing reads: a typo
    such as `+train.lrr=1e-5` would run with the default learning rate. Free-form mappings (an
    objective's or a task's `params`) are not dataclasses and are not walked."""
    names = {f.name for f in dataclasses.fields(schema)}
    for key in node:
        path = f"{prefix}{key}"
        if key not in names:
            raise ValueError(
                f"{path} is not a setting of quadrants (a + override of a misspelled key?); "
                f"the keys of {prefix.rstrip('.') or 'the top level'}: {', '.join(sorted(names))}"
            )
        value = getattr(schema, str(key))
        if dataclasses.is_dataclass(value) and isinstance(node[key], DictConfig):
            check_known_keys(node[key], value, f"{path}.")


# keys that were removed, and what replaces them (an override of one fails before Hydra's own
# "Could not override" message, which suggests appending the key with +)
REMOVED_KEYS = {
    "distributed.mixed_precision": (
        "train.precision=bf16-mixed (float32 parameters and optimizer states, bf16 compute; "
        "FSDP2's MixedPrecisionPolicy when sharded) or train.precision=fp32"
    ),
    "distributed.activation_checkpointing": "train.activation_checkpointing=true",
    # the CPU-only settings have their own section (quadrants/cpu)
    "train.cpu_matmul": "train.cpu.matmul (auto | torch | onednn)",
    "train.retain_freed_mb": "train.cpu.retain_freed_mb",
    # one key for the longest prompt: the plan's rows, the task's filter and vLLM's max_model_len
    "cluster.prompt_tokens": "task.max_prompt_tokens",
    # the plan's GPU size is the usable total in GiB (an 80 GB H100 offers about 79.1 GiB)
    "cluster.gpu_memory_gb": "cluster.gpu_memory_gib (usable GiB, e.g. 79.1 for an 80 GB card)",
}


def check_removed_keys(argv: list[str]) -> None:
    """Raise ValueError naming the replacement when an override sets a removed key."""
    for override in _overrides(argv):
        key = override.split("=", 1)[0].lstrip("+~")
        if key in REMOVED_KEYS:
            raise ValueError(f"{key} was removed; use {REMOVED_KEYS[key]}")


def check_removed_keys_in(tree: Any, source: str, prefix: str = "") -> None:
    """Raise ValueError naming the replacement when a config read from `source` (a run's
    config.yaml, written before a key was renamed) sets a removed key."""
    if not isinstance(tree, Mapping):
        return
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if path in REMOVED_KEYS:
            raise ValueError(
                f"{source} sets {path}, which was removed; use {REMOVED_KEYS[path]} (edit that "
                "line of the file: it was written before the key was renamed)"
            )
        check_removed_keys_in(value, source, f"{path}.")


def preflight(argv: list[str]) -> int:
    """Compose and validate every job of the command; returns the number of
    jobs. Raises ValueError."""
    check_removed_keys(argv)
    if prints_only(argv):
        return 0
    register()
    everything = _overrides(argv)
    overrides = [o for o in everything if not o.startswith(("hydra.", "hydra/"))]
    multirun = "-m" in argv or "--multirun" in argv
    ranks = per_node = 1
    uris: set[str] = set()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        fixed = [o for o in everything if "," not in o.split("=", 1)[-1]]
        base = _checked(
            fixed, lambda: compose(config_name="config", overrides=fixed, return_hydra_config=True)
        )
        if multirun:
            sweeper_params = base.hydra.sweeper.get("params")
            params = OmegaConf.to_container(sweeper_params, resolve=False) if sweeper_params else {}
            jobs = _checked(overrides, lambda: expand_jobs(overrides, params))
            ranks = launcher_ranks(base.hydra.launcher)
            per_node = launcher_ranks_per_node(base.hydra.launcher)
        else:
            check_single_run_launcher(base.hydra.launcher)
            jobs = [overrides]
        # Hydra's own overrides too: the run directory's name depends on them (exclude_keys)
        hydra_only = [o for o in everything if o.startswith(("hydra.", "hydra/"))]
        if multirun:  # hydra.launcher.n_jobs=0 (joblib refuses it only once the sweep started)
            check_launcher_jobs(base.hydra.launcher)
        here = runs_here(base.hydra.launcher, multirun)
        launcher = base.hydra.launcher
        for job in jobs:
            composed = _checked(job, lambda job=job: _compose_job([*job, *hydra_only]))
            # the values first (wrong anywhere; the batch over a multi-rank launcher's ranks), then
            # paths, device, engine and packages of a job that runs on this machine, then the data
            # files (a GPU preset on a CPU machine is refused for its device before it looks for
            # data): the plan is parsed once, its files checked the second time
            plan = _checked(
                job,
                lambda composed=composed: to_run_plan(composed, files=False, world_size=ranks),
            )
            if here:
                _checked_plain(job, lambda plan=plan: check_local_job(plan))
            plan = _checked(job, lambda plan=plan: plan.with_data_files())
            uris.add(tracking_uri(plan))
            # a run directory with a checkpoint of another config (run/resume_identity.py)
            _checked_plain(job, lambda plan=plan: check_resume(plan))
            if multirun:  # SLURM jobs on several nodes track to a server, not one SQLite file
                _checked_plain(job, lambda plan=plan: check_tracking_store(plan, launcher))
            if multirun:  # a run planned for GPUs asks SLURM for one GPU per rank
                _checked_plain(job, lambda plan=plan: check_gpu_request(plan, launcher))
            # the memory plan against cluster.gpu_memory_gib (jobs that differ only in seed,
            # objective or quadrant share one trace), its host memory against sbatch --mem
            memory = _checked_plain(job, lambda plan=plan: check_memory(plan, ranks, per_node))
            if multirun:
                _checked_plain(
                    job, lambda memory=memory: check_host_memory(memory, base.hydra.launcher)
                )
    for uri in sorted(uris):
        check_tracking_server(uri)
    return len(jobs)


def check_tracking_store(run: RunPlan, launcher: DictConfig) -> None:
    """Refuse a SLURM sweep whose runs track to a SQLite file (the default store, or a `sqlite:`
    tracking.uri). Its jobs run on whatever nodes SLURM picks, and SQLite's locking over a network
    file system is not reliable (sqlite.org/faq.html#q5; docs/slurm.md): runs would fail to log, or
    the store would be damaged, hours into the sweep. `tracking.sqlite_on_slurm=true` (the dev
    cluster's profile) says every job runs on this one machine."""
    if str(launcher.get("_target_", "")) != SLURM_LAUNCHER or run.tracking.sqlite_on_slurm:
        return
    uri = tracking_uri(run)
    if not uri.startswith("sqlite:"):
        return
    raise ValueError(
        f"tracking: a SLURM sweep runs its jobs on several nodes, and its tracking store is the "
        f"SQLite file {uri} (tracking=local"
        + (f", tracking.uri={run.tracking.uri}" if run.tracking.uri else "")
        + "): several nodes writing one SQLite file over a network file system is not safe. Fix: "
        "start an MLflow server the compute nodes can reach and add tracking=server with "
        "MLFLOW_TRACKING_URI=http://HOST:5000 (docs/slurm.md, 'Tracking on a cluster'); or, if "
        "every job runs on this one machine, tracking.sqlite_on_slurm=true"
    )


def check_gpu_request(run: RunPlan, launcher: DictConfig) -> None:
    """Refuse a SLURM job of a run planned for GPUs (`cluster.gpu_memory_gib` set) whose launcher
    does not give each of its ranks a GPU of its own.

    A rank binds `cuda:0` when its task sees one GPU, else `cuda:<local rank>` (device.py,
    `local_cuda_index`). So: `gpus_per_node` >= ranks per node with `gpus_per_task` unset (every
    task sees all of them, launcher=slurm_ddp's default: NCCL sees the NVLink between them,
    NVIDIA/nccl#1066), or `gpus_per_task=1` (each task sees its own, Slurm's per-task binding).
    Without either the job gets no GPU and `train.device=auto` trains on the node's CPUs; with
    `gpus_per_node=1` every rank of the node binds the same GPU (NCCL refuses a duplicate GPU);
    with fewer GPUs than ranks the ranks above them fail at start. `gres` (SLURM's own syntax) is
    not read."""
    if (
        str(launcher.get("_target_", "")) != SLURM_LAUNCHER
        or run.cluster.gpu_memory_gib is None
        or run.train.device == "cpu"
        or launcher.get("gres")
    ):
        return
    tasks = launcher_ranks_per_node(launcher)
    per_task, per_node = launcher.get("gpus_per_task"), launcher.get("gpus_per_node")
    fix = (
        f"ask for one GPU per rank: hydra.launcher.gpus_per_node={tasks} "
        "hydra.launcher.gpus_per_task=null (launcher=slurm_ddp's default: every rank sees all of "
        "the node's GPUs, as NCCL needs for NVLink), or hydra.launcher.gpus_per_task=1 "
        "(per-task binding; NCCL may then lose NVLink, docs/distributed.md)"
    )
    if not per_task and not per_node:
        raise ValueError(
            f"the run is planned for GPUs (cluster.gpu_memory_gib={run.cluster.gpu_memory_gib:g}) "
            "but the launcher asks SLURM for none (hydra.launcher.gpus_per_task and gpus_per_node "
            f"unset), so it would train on the node's CPUs; {fix}"
        )
    if tasks == 1:
        return
    if per_task:
        if int(per_task) != 1:
            raise ValueError(
                f"hydra.launcher.gpus_per_task={per_task} with {tasks} ranks per node: each task "
                "sees its own GPUs, and ranks whose local rank is not below that number find no "
                f"GPU to bind; {fix}"
            )
        return
    if int(per_node) < tasks:
        raise ValueError(
            f"hydra.launcher.gpus_per_node={per_node} for {tasks} ranks per node "
            f"(hydra.launcher.tasks_per_node): "
            + (
                "every rank would bind the same GPU"
                if int(per_node) == 1
                else f"ranks {per_node} to {tasks - 1} of each node would find no GPU"
            )
            + f"; {fix}"
        )


def check_host_memory(plan: Plan | None, launcher: DictConfig) -> None:
    """Refuse a SLURM job whose planned host memory per node exceeds `hydra.launcher.mem_gb`.

    submitit writes it as `--mem=<mem_gb>GB` (submitit/slurm/slurm.py `_convert_mem`), which SLURM
    reads in units of 1024 MiB, and the job's memory cgroup on the node holds every rank of it: a
    plan over it is OOM-killed on the node, after its wait in the queue. The request must cover
    the plan's figure and `HOST_MARGIN` more (its process base is an assumption). No plan (no
    cluster.gpu_memory_gib) or no mem_gb: nothing to check."""
    mem_gb = launcher.get("mem_gb")
    if plan is None or mem_gb is None or str(launcher.get("_target_", "")) != SLURM_LAUNCHER:
        return
    limit = float(mem_gb) * GiB
    needed = plan.host_per_node * (1 + HOST_MARGIN)
    if needed <= limit:
        return
    raise ValueError(
        f"memory plan: host memory {plan.host_per_node / 1e9:.0f} GB per node "
        f"({plan.inputs.gpus_per_node} rank(s)), {needed / 1e9:.0f} GB with the "
        f"{HOST_MARGIN:.0%} margin, is over hydra.launcher.mem_gb={mem_gb} "
        f"(sbatch --mem, {limit / 1e9:.1f} GB): SLURM would kill the job on its node. Fix: "
        f"hydra.launcher.mem_gb={math.ceil(needed / GiB)} or more (within the "
        "node's memory), or pin less on the host (rollout.vllm.sleep_level=2 discards the "
        "engine's weights instead of pinning them; train.offload_optimizer=false)"
    )


def check_single_run_launcher(launcher: DictConfig) -> None:
    """A SLURM launcher without -m: Hydra uses a launcher only in multirun mode, so the run would
    train on this machine, in the directory of the same command without the launcher."""
    if str(launcher.get("_target_", "")) == SLURM_LAUNCHER:
        raise ValueError(
            "launcher=slurm (a SLURM launcher profile) needs -m: Hydra uses a launcher only for a "
            "multirun, so without -m this command would train here, on this machine. Add -m "
            "(python -m quadrants.sweep -m ... launcher=slurm), or submit detached with "
            "python -m quadrants.submit ... launcher=slurm"
        )


def check_tracking_server(uri: str) -> None:
    """The tracking target must be an MLflow store this run can write before anything starts
    (tracking/reachability.py; raises ValueError naming the URI); outages that begin later are
    the tracking spool's to ride out."""
    from quadrants.tracking.reachability import URI_VARIABLE, store_message, store_problem

    problem = store_problem(uri)
    if problem is not None:
        raise ValueError(store_message(uri, *problem, os.environ.get(URI_VARIABLE)))


def launcher_target(argv: list[str]) -> str:
    """The `hydra.launcher._target_` the command composes to (which launcher Hydra would use)."""
    register()
    fixed = [o for o in _overrides(argv) if "," not in o.split("=", 1)[-1]]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        base = _checked(
            fixed, lambda: compose(config_name="config", overrides=fixed, return_hydra_config=True)
        )
    return str(base.hydra.launcher.get("_target_", ""))


def cpu_run_environment(argv: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The variables the command's process must start with to run its jobs on this machine's CPU
    as `train.cpu` says (`train.cpu.omp_spincount`, quadrants/cpu/openmp.py); {} when it only
    prints, submits to SLURM, trains on a GPU (train.device=cuda, or auto with CUDA available),
    or the environment already decides. A config that does not compose gives {} (preflight then
    names the problem)."""
    if prints_only(argv):
        return {}
    register()
    fixed = [o for o in _overrides(argv) if "," not in o.split("=", 1)[-1]]
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            base = compose(config_name="config", overrides=fixed, return_hydra_config=True)
    except Exception:  # preflight reports it
        return {}
    if str(base.hydra.launcher.get("_target_", "")) == SLURM_LAUNCHER:
        return {}  # the jobs run on the cluster's nodes, with their own environment
    device = str(base.train.device)
    if device == "cuda" or device == "auto" and torch.cuda.is_available():
        return {}
    return spin_environment(base.train.cpu.omp_spincount, environ)


def launcher_ranks(launcher: DictConfig) -> int:
    """Ranks per run of a launcher config: nodes x tasks_per_node (launcher=slurm_ddp), else 1."""
    nodes, tasks = launcher.get("nodes"), launcher.get("tasks_per_node")
    return int(nodes or 1) * int(tasks or 1) if "tasks_per_node" in launcher else 1


def launcher_ranks_per_node(launcher: DictConfig) -> int:
    """Ranks on one node of a launcher config: tasks_per_node (launcher=slurm_ddp), else 1."""
    return int(launcher.get("tasks_per_node") or 1) if "tasks_per_node" in launcher else 1


def _checked_plain(job: list[str], fn: Any) -> Any:
    """Run `fn`; a ValueError comes back naming the job, with its message whole (the memory
    plan's table is part of it)."""
    try:
        return fn()
    except ValueError as err:
        raise ValueError(f"job [{' '.join(job)}]: {err}") from None


def _checked(job: list[str], fn: Any) -> Any:
    """Run `fn`; turn any failure into a ValueError naming the job and Hydra's message (trimmed)."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - re-raised with the job named
        message = str(err).split("\nConfig search path:")[0].strip()
        if "LexerNoViableAlt" in message and any("~" in o.partition("=")[2] for o in job):
            message += (
                ". An unquoted value cannot hold `~` but as the home directory at the start of a "
                "path (key=~/x); quote it, key='~user/x', or give the path in full"
            )
        cause = err.__cause__
        if cause is not None and str(cause).strip():
            message += f" ({str(cause).strip().splitlines()[0]})"
        raise ValueError(f"job [{' '.join(job)}]: {message}") from None
