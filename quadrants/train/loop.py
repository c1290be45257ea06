"""`run_training(cfg)`: the whole training run as an ordinary function (Hydra
calls it, tests call it).

Reads top to bottom: set up (threads, seeds, model, task, grader, engine, optimizer) -> resume from
the newest checkpoint in `cfg.run_dir` if there is one -> evaluate the starting policy -> steps (log
every step, checkpoint every N) -> evaluate at the end -> return a summary.

Steps are numbered by completed updates: step 0 is the starting policy (its held-out evaluation),
step s the state after s updates. Each step's metrics go to the tracker in one call, so a resumed
run (which re-runs the steps after its last checkpoint) can drop the ones the tracker already has.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from quadrants.config import RunConfig
from quadrants.cpu import tune_for
from quadrants.device import resolve_device
from quadrants.distributed.collectives import (
    DistEnv,
    check_layout,
    fill_from_rank0,
    fill_replica,
    gather_objects,
    rollout_replica,
    shard_model,
)
from quadrants.distributed.collectives import current as current_dist
from quadrants.distributed.placement import Sharded
from quadrants.eval.in_training import evaluate_policy
from quadrants.models.loading import load_policy
from quadrants.models.lora import trainable_parameters
from quadrants.objectives.control import STATE_KEY, advance_state, restore_state
from quadrants.ops.precision import cast_on_device, resolve_precision, store_parameters
from quadrants.rewards.grader import Grader, grader_workers
from quadrants.rollout.engine import RolloutEngine
from quadrants.rollout.identity import identity_checked
from quadrants.rollout.registry import get_engine
from quadrants.tasks import RenderedTask, make_task
from quadrants.tasks.benchmarks import known_benchmarks
from quadrants.tasks.prompt_length import LengthLimitedTask, prompt_token_counter
from quadrants.tasks.prompts import make_renderer
from quadrants.tasks.read_log import files_read
from quadrants.tracking import keys, provenance
from quadrants.tracking.base import NullTracker, Tracker
from quadrants.tracking.disk_full import DiskFullError, is_disk_full
from quadrants.tracking.run_info import flat_params
from quadrants.train.checkpoint import has_checkpoint, load_latest, restore, save_checkpoint
from quadrants.train.context import StepContext, build_step
from quadrants.train.offload import OptimizerOffload
from quadrants.train.placement import SingleProcess
from quadrants.train.preemption import checkpointed_steps
from quadrants.train.samples import write_samples
from quadrants.train.step import train_step
from quadrants.validation import check_lora_ranks, validate_config

log = logging.getLogger("quadrants.train")


@dataclass
class TrainingResult:
    """Summary of a finished run: the first and last held-out metrics and the
    last step's metrics."""

    initial_eval: dict[str, float] = field(default_factory=dict)
    final_eval: dict[str, float] = field(default_factory=dict)
    last_step: dict[str, float] = field(default_factory=dict)
    resumed_from: int = 0
    run_id: str | None = None
    seconds: float = 0.0


def fused_optimizer_applies(model: torch.nn.Module) -> bool:
    """Whether torch's fused AdamW kernel can step `model`: every parameter a plain floating
    tensor on the CPU or a CUDA device. It does the for-loop implementation's arithmetic in one
    pass per parameter (half its time on the tiny model: 1.9 vs 4.0 ms a step); a sharded
    (DTensor) parameter or another device keeps the default implementation."""
    parameters = list(model.parameters())
    return bool(parameters) and all(
        type(p) is torch.nn.Parameter and p.is_floating_point() and p.device.type in ("cpu", "cuda")
        for p in parameters
    )


def build_context(cfg: RunConfig, grader: Grader) -> StepContext:
    """Load everything a step needs (model, reference, engine, task, optimizer, objective), the
    modules on `train.device` (resolved first: train.device=cuda without CUDA
    fails before any load), and build the step from them (train/context.py `build_step`)."""
    dist_env = (
        current_dist()
    )  # world 1 without a process group; FSDP2-sharded under torchrun / srun
    device = resolve_device(cfg.train.device, dist_env.local_rank)
    check_lora_ranks(cfg, dist_env.world_size)
    # sharded: only rank 0 reads the weights, the others build the model on the meta device and
    # receive their shards from rank 0 (prepare_policy): one host copy per job, not one per rank
    weights = dist_env.is_main or not dist_env.sharded
    load = dict(dtype=cfg.model.dtype, seed=cfg.seed, weights=weights)
    model, tokenizer = load_policy(cfg.model.name_or_path, lora=cfg.model.lora, **load)
    ref_model = None
    # the KL reference: a frozen copy of the base, or under LoRA the policy itself with its
    # adapters switched off (train/step.py `reference_logprobs`)
    if cfg.objective.kl_coef > 0 and not cfg.model.lora.enabled:
        ref_model, _ = load_policy(cfg.model.name_or_path, **load)
        ref_model.requires_grad_(False).eval()
    tune_for(device, cfg.train.cpu, [model, ref_model])  # nothing unless device is the CPU
    # the parameters now in train.precision's storage dtype (float32 under fp32 and bf16-mixed):
    # AdamW's moments are allocated like them (torch/optim/adamw.py: zeros_like(param))
    model, ref_model, engine = prepare_policy(cfg, model, tokenizer, ref_model, dist_env, device)
    optimizer = torch.optim.AdamW(
        trainable_parameters(model),  # all of them, or under LoRA the adapters only
        lr=cfg.train.lr,
        weight_decay=cfg.train.weight_decay,
        betas=tuple(cfg.train.betas),
        fused=fused_optimizer_applies(model) or None,
    )
    warmup = cfg.train.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
    )
    # data parallelism behind one placement: a plain process never builds the sharded one
    placement = Sharded(dist_env) if dist_env.sharded else SingleProcess()
    return build_step(
        cfg,
        model,
        tokenizer=tokenizer,
        ref_model=ref_model,
        engine=engine,
        grader=grader,
        task=make_run_task(cfg, tokenizer),
        optimizer=optimizer,
        scheduler=scheduler,
        placement=placement,
        device=device,
    )


def prepare_policy(
    cfg: RunConfig,
    model: nn.Module,
    tokenizer: Any,
    ref_model: nn.Module | None,
    env: DistEnv,
    device: torch.device | None = None,
) -> tuple[nn.Module, nn.Module | None, RolloutEngine]:
    """Place the policy (and the frozen reference) on `device` (default: `train.device` resolved for
    this rank), shard them over the ranks, and start the rollout engine `rollout.engine` names
    (quadrants/rollout/registry.py) on the placed policy. An engine that asks for a replica (the HF
    engine) samples from the policy itself in one plain process, from a full per-rank copy on the
    same device when sharded, taken here before sharding.

    Sharded, only rank 0 needs the weights: the other ranks may pass the model on the meta device
    (`load_policy(weights=False)`, as `build_context` does), and every rank's shards (and replica)
    are filled from rank 0's values (`fill_from_rank0`), whatever the others passed.

    The modules are moved before `fully_shard`, so each rank's shards and its rollout copy are on
    `cuda:<LOCAL_RANK>` with CUDA (not run here) and the CPU otherwise (`.to` of a CPU module to the
    CPU is a no-op).

    The parameters are stored in `train.precision`'s dtype (ops/precision.py): float32 for fp32
    and bf16-mixed whatever `model.dtype` they were read in (a bf16 checkpoint cast up exactly),
    bfloat16 for pure bf16; under bf16-mixed a LoRA policy's frozen base linears in bf16
    (ops/precision.py `store_parameters`: autocast's matmul sees bf16(W) either way). Each tensor is
    moved to the device first and cast there, one at a time, so neither the host (a bf16
    checkpoint's load) nor the device (a LoRA base) ever holds a float32 copy of the model. The
    replica is taken after
    the cast: the HF engine samples from the trainer's parameters in their stored dtype (under
    autocast when they are stored in two dtypes, rollout/hf.py)."""
    check_layout(cfg, env.world_size)
    kind = get_engine(cfg.rollout.engine)
    device = resolve_device(cfg.train.device, env.local_rank) if device is None else device
    precision = resolve_precision(cfg.train.precision, device)
    # moved and cast one tensor at a time (ops/precision.py): no float32 copy on the host
    model = store_parameters(model, precision, device)
    if ref_model is not None:  # frozen: the policy's dtype, so that its forward is the policy's
        ref_model = cast_on_device(ref_model, device, lambda _: precision.param_dtype)
    options = dict(
        precision=precision,
        reshard_after_forward=cfg.distributed.reshard_after_forward,
        device=device,
    )
    # rank 0's full tensors, to fill every rank's shards from (the other ranks: on the meta device)
    full = model.state_dict() if env.sharded and env.is_main else {}
    full_ref = ref_model.state_dict() if env.sharded and env.is_main and ref_model else {}
    replica = rollout_replica(model, env) if kind.replica_for_ranks else None
    model = shard_model(
        model, env, activation_checkpointing=cfg.train.activation_checkpointing, **options
    )
    if env.sharded:
        fill_from_rank0(model, full, env, device)
        del full  # rank 0's full copy: only its shards remain
        if replica is not None:
            fill_replica(replica, model, device)
    if env.sharded and ref_model is not None:
        ref_model = shard_model(ref_model, env, **options)
        fill_from_rank0(ref_model, full_ref, env, device)
        del full_ref
    engine = kind.start(cfg, model, tokenizer, replica=replica, world_size=env.world_size)
    # every weight push checked: the engine scores what the trainer scores (rollout/identity.py)
    return model, ref_model, identity_checked(engine, cfg, precision, model)


@dataclass
class Run:
    """What the loop works with: the step's context, the run's config and its rank layout (the
    step itself reads neither)."""

    step: StepContext
    cfg: RunConfig
    dist: DistEnv

    model = property(lambda self: self.step.model)
    tokenizer = property(lambda self: self.step.tokenizer)
    engine = property(lambda self: self.step.engine)
    grader = property(lambda self: self.step.grader)
    task = property(lambda self: self.step.task)
    optimizer = property(lambda self: self.step.optimizer)
    scheduler = property(lambda self: self.step.scheduler)
    device = property(lambda self: self.step.device)
    spec = property(lambda self: self.step.objective.spec)
    params = property(lambda self: self.step.objective.params)


def make_run_task(cfg: RunConfig, tokenizer: Any) -> LengthLimitedTask:
    """The run's task with its prompts rendered in the run's prompt format (the function evaluation
    uses too), none longer than task.max_prompt_tokens (tasks/prompt_length.py); a dataset task
    also drops the problems of the benchmarks this run evaluates on."""
    params = dict(cfg.task.params)
    if params.get("decontaminate") is not None:  # None = every known benchmark already
        evaluated = [name for name in cfg.eval.benchmarks if name in known_benchmarks()]
        params["decontaminate"] = sorted({*params["decontaminate"], *evaluated})
    task = make_task(cfg.task.name, cfg.task.heldout_size, params)
    render = make_renderer(
        cfg.prompt.format,
        tokenizer=tokenizer,
        instruction=cfg.prompt.instruction,
        task_format=getattr(task, "prompt_format", None),
    )
    rendered = RenderedTask(task, render)
    return LengthLimitedTask(rendered, prompt_token_counter(tokenizer), cfg.task.max_prompt_tokens)


def task_tags(task: Any) -> dict[str, str]:
    """What a dataset task did to its rows, as run tags: `quadrants.decontaminated` (training
    problems dropped as benchmark problems) and `quadrants.skipped_empty`
    (rows without an answer)."""
    return {
        f"quadrants.{name}": str(getattr(task, name))
        for name in ("decontaminated", "skipped_empty")
        if hasattr(task, name)
    }


def _log_task(ctx: Run, tracker: Tracker, run_dir: Path | None) -> None:
    """The task's counts as params, and the first training prompt, rendered, as an artifact."""
    task = ctx.task
    info = {"prompt.rendered_format": getattr(getattr(task, "render", None), "format", "raw")}
    for name in ("decontaminated", "skipped_empty", "too_long", "too_long_heldout"):
        if hasattr(task, name):
            info[f"task.{name}"] = getattr(task, name)
    tracker.log_params(info)
    if getattr(task, "decontaminated", 0):
        log.info(
            "task %s: %d training problems dropped as benchmark problems (decontamination)",
            task.name,
            task.decontaminated,
        )
    if run_dir is not None and ctx.dist.is_main:
        (problem,) = task.train_batch(1, random.Random(ctx.cfg.seed))
        path = run_dir / "prompt_example.txt"
        path.write_text(problem.prompt)
        tracker.log_artifact(path, "prompt")
        log.info(
            "first training prompt, as the model sees it (%s):\n%s",
            info["prompt.rendered_format"],
            problem.prompt,
        )


def _evaluate(ctx: Run, step: int, tracker: Tracker) -> dict[str, float]:
    """Held-out metrics of the live policy (eval/in_training.py; {} on ranks other than 0)."""
    return evaluate_policy(
        ctx.engine, ctx.grader, ctx.task, ctx.tokenizer, ctx.cfg, ctx.dist, step, tracker
    )


def _resume(ctx: Run, run_dir: Path | None) -> tuple[int, str | None, dict[int, dict[str, float]]]:
    """(completed steps, known run id, metrics the tracker could not record) from the newest
    checkpoint and run.json in `run_dir`."""
    if run_dir is None:
        return 0, None, {}
    known_id = _read_run_id(run_dir)
    checkpoint = load_latest(run_dir)
    if checkpoint is None:
        return 0, known_id, {}
    restore(checkpoint, model=ctx.model, optimizer=ctx.optimizer, scheduler=ctx.scheduler)
    restore_state(ctx.params, checkpoint.state.get("objective_state"))
    ctx.engine.sync_weights(ctx.model)  # a separate engine (vLLM) still holds the starting weights
    log.info("resumed from %s (step %d)", checkpoint.path, checkpoint.step)
    return (
        checkpoint.step,
        checkpoint.run_id or known_id,
        dict(checkpoint.state.get("unlogged_metrics") or {}),
    )


def _read_run_id(run_dir: Path) -> str | None:
    path = run_dir / "run.json"
    return json.loads(path.read_text()).get("run_id") if path.exists() else None


def _write_run_id(run_dir: Path, run_id: str | None) -> None:
    if run_id is not None and _read_run_id(run_dir) != run_id:
        tmp = run_dir / "run.json.tmp"
        tmp.write_text(json.dumps({"run_id": run_id}))
        tmp.replace(run_dir / "run.json")


def _step_line(step: int, total: int, metrics: dict[str, float]) -> str:
    return (
        f"step {step}/{total} reward {metrics[keys.train('reward_mean')]:.3f} "
        f"solve {metrics[keys.train('solve_rate')]:.3f} entropy "
        f"{metrics[keys.train('entropy')]:.3f} len {metrics[keys.train('response_length')]:.1f}"
    )


def run_training(cfg: RunConfig, tracker: Tracker | None = None) -> TrainingResult:
    """Train one policy as `cfg` says, logging every step to `tracker`; resume if
    `cfg.run_dir` has a checkpoint."""
    validate_config(cfg)
    tracker = tracker or NullTracker()
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.run_dir) if cfg.run_dir else None
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result = TrainingResult()
    total = cfg.train.steps
    workers = grader_workers(cfg.task.grader_workers)  # the CPUs this task holds, less one
    extraction = cfg.task.answer_extraction
    with Grader(num_workers=workers, timeout_s=5.0, extraction=extraction) as grader:
        ctx = Run(build_context(cfg, grader), cfg, current_dist())
        try:
            first, known_id, unlogged = _resume(ctx, run_dir)
            offload = _optimizer_offload(ctx)  # train.offload_optimizer: states to the host
            result.resumed_from = first
            add_tags = getattr(tracker, "add_tags", None)  # MLflow: tags the run is created with
            if add_tags is not None:
                add_tags(task_tags(ctx.task))
            result.run_id = tracker.start(known_id)
            # versions, commit, GPUs, data read so far (also on a resume: a change is reported)
            tracker.log_params(provenance.params(files_read()))
            for logged_step, step_metrics in sorted(
                unlogged.items()
            ):  # a full disk kept them from the tracker
                tracker.log_metrics(step_metrics, step=logged_step)
            if first == 0:
                tracker.log_params(flat_params(cfg))
                _log_task(ctx, tracker, run_dir)
            if run_dir is not None:
                _write_run_id(run_dir, tracker.run_id)
                if first == 0 and (run_dir / "config.yaml").exists():
                    tracker.log_artifact(run_dir / "config.yaml", "config")
            if first == 0:
                result.initial_eval = _evaluate(ctx, 0, tracker)
                tracker.log_metrics(result.initial_eval, step=0)
                if result.initial_eval:  # {} with evaluation off, and on ranks other than 0
                    log.info("step 0 held-out: %s", _fmt(result.initial_eval))
            bar = tqdm(
                range(first, total),
                desc="train",
                initial=first,
                total=total,
                disable=not sys.stderr.isatty(),
                dynamic_ncols=True,
            )
            for index in checkpointed_steps(
                bar,
                optimizer=ctx.optimizer,
                save=_signal_save(ctx, run_dir, tracker, offload),
                first_step=first,
                is_saved=lambda s: has_checkpoint(run_dir, s),
            ):
                step = index + 1
                output = train_step(ctx.step, index)
                if offload is not None:  # until the next optimizer step (its pre-hook loads them)
                    offload.offload()
                metrics = output.metrics
                advance_state(ctx.spec, ctx.params, metrics, prefix=keys.objective(""))
                if step == total or (cfg.eval.every and step % cfg.eval.every == 0):
                    metrics.update(_evaluate(ctx, step, tracker))
                if cfg.probe.every and step % cfg.probe.every == 0:
                    from quadrants.probe.measure import probe_in_training

                    metrics.update(
                        probe_in_training(
                            ctx.model,
                            ctx.tokenizer,
                            ctx.engine,
                            ctx.grader,
                            ctx.task,
                            cfg,
                            ctx.dist,
                            step,
                            tracker,
                        )
                    )
                checkpoint_now = (
                    run_dir is not None
                    and cfg.checkpoint.every
                    and (step % cfg.checkpoint.every == 0 or step == total)
                )
                with stop_if_disk_full(ctx, run_dir, tracker, step, metrics, offload):
                    with disk_full_on_any_rank(ctx, run_dir):  # the records rank 0 writes
                        tracker.log_metrics(metrics, step=step)
                        result.last_step = metrics
                        every = cfg.tracking.log_samples_every
                        if (
                            run_dir is not None
                            and every
                            and ctx.dist.is_main
                            and (step % every == 0 or step == total)
                        ):
                            path = write_samples(
                                run_dir / "samples" / f"step_{step:06d}.json",
                                output,
                                ctx.tokenizer,
                                step,
                            )
                            tracker.log_artifact(path, "samples")
                        if checkpoint_now:
                            _write_run_id(run_dir, tracker.run_id)
                    if checkpoint_now:
                        _save(ctx, run_dir, step, tracker, offload)
                line = _step_line(step, total, metrics)
                bar.set_postfix_str(line.split(" ", 2)[2])
                if bar.disable:
                    log.info(line)
            result.final_eval = {k: v for k, v in result.last_step.items() if k.startswith("eval/")}
            # data files first read during the run (benchmarks of later evaluations)
            tracker.log_params(provenance.params(files_read(), environment=False))
            if total and result.final_eval:
                log.info("step %d held-out: %s", total, _fmt(result.final_eval))
        # also on a preemption exit; a vLLM engine under torchrun ends the process group with it
        finally:
            ctx.engine.close()
    tracker.flush()
    result.run_id = tracker.run_id
    result.seconds = time.perf_counter() - started
    return result


@contextmanager
def stop_if_disk_full(
    ctx: Run,
    run_dir: Path | None,
    tracker: Tracker,
    step: int,
    metrics: dict[str, float],
    offload: OptimizerOffload | None = None,
) -> Iterator[None]:
    """Recording step `step` (its metrics, samples, checkpoint) ran out of disk: try to checkpoint
    the step with its metrics inside (a resumed run logs them), then stop with one DiskFullError
    naming the path. A re-run with space resumes from the newest checkpoint; MLflow drops what it
    holds.

    Several ranks come here together, since the save is collective: a full disk in rank 0's
    records is raised on every rank by `disk_full_on_any_rank`, and a checkpoint's by DCP itself
    (`dcp.save` gathers every rank's write result and raises one CheckpointException on every
    rank: torch/distributed/checkpoint/state_dict_saver.py `_save_state_dict`, utils.py
    `_DistWrapper.all_reduce`)."""
    try:
        yield
    except Exception as error:
        if not is_disk_full(error):
            raise
        path = _full_path(error, run_dir)
        saved = "checkpoints are off"
        if run_dir is not None and ctx.cfg.checkpoint.every:
            try:
                _save(ctx, run_dir, step, tracker, offload, unlogged_metrics={step: metrics})
                saved = f"step {step} is checkpointed with its metrics"
            except Exception as again:  # noqa: BLE001 - the first error is the one to report
                saved = f"its checkpoint could not be written either ({type(again).__name__})"
        raise DiskFullError(
            path,
            f"stopped at step {step}: {saved}; free space and run the same command again to resume",
        ) from None


@contextmanager
def disk_full_on_any_rank(ctx: Run, run_dir: Path | None) -> Iterator[None]:
    """The block's full disk, raised on every rank when any rank hit it. One process: the block
    as it is, no exchange.

    Several ranks: the block holds what only rank 0 writes (the tracker's metrics, the samples,
    run.json), so a full disk there is rank 0's alone, while the save `stop_if_disk_full` then
    writes is collective. After the block the ranks exchange where their disk was full (one
    `gather_objects`; None: it was not), and every rank leaves it the same way: a rank that hit it
    with its own error, the others with a `DiskFullError` naming that path "on rank r". So all of
    them enter `stop_if_disk_full`'s save together, as one process does, instead of rank 0 saving
    while the others wait in the next collective (a hang until the process group's timeout).
    Another error is raised at once, as before (the other ranks then wait in that exchange)."""
    if not ctx.dist.sharded:
        yield
        return
    full: BaseException | None = None
    try:
        yield
    except Exception as error:
        if not is_disk_full(error):
            raise
        full = error
    where = gather_objects(None if full is None else str(_full_path(full, run_dir)), ctx.dist)
    if full is not None:
        raise full
    for rank, path in enumerate(where):
        if path is not None:
            raise DiskFullError(f"{path} on rank {rank}")


def _full_path(error: BaseException, run_dir: Path | None) -> Path | str:
    """The file (or directory) a disk-full `error` names, else the run directory."""
    return getattr(error, "path", None) or getattr(error, "filename", None) or run_dir or "?"


def _save(
    ctx: Run,
    run_dir: Path,
    step: int,
    tracker: Tracker,
    offload: OptimizerOffload | None,
    **extra: Any,
) -> None:
    """The one way the loop writes a checkpoint (every `checkpoint.every` steps, on a signal, and
    on a full disk): the optimizer's states brought back to the device first when
    train.offload_optimizer keeps them on the host (the full-disk save used to write them without
    that), then `save_checkpoint` with the run's objective state. `extra`: `rng` (a signal's RNG
    states) or `unlogged_metrics` (a full disk's)."""
    with _states_on_device(offload):
        save_checkpoint(
            run_dir,
            step,
            model=ctx.model,
            optimizer=ctx.optimizer,
            scheduler=ctx.scheduler,
            run_id=tracker.run_id,
            keep=ctx.cfg.checkpoint.keep,
            objective_state=ctx.params.get(STATE_KEY),
            **extra,
        )


def _signal_save(
    ctx: Run, run_dir: Path | None, tracker: Tracker, offload: OptimizerOffload | None
):
    """How a SLURM signal / SIGTERM checkpoints the last completed step (None:
    checkpoints are off)."""
    cfg = ctx.cfg
    if run_dir is None or not cfg.checkpoint.every:
        return None

    def save(step: int, rng: Any) -> None:
        _save(ctx, run_dir, step, tracker, offload, rng=rng)

    return save


def _optimizer_offload(ctx: Run) -> OptimizerOffload | None:
    """train.offload_optimizer on an accelerator: the optimizer's states offloaded now (after a
    resume restored them to the device) and between its steps (quadrants/train/offload.py). A run
    whose device resolved to the CPU (train.device=auto without a GPU) has nothing to free."""
    if not ctx.cfg.train.offload_optimizer:
        return None
    if ctx.device.type == "cpu":
        log.info("train.offload_optimizer: the states already live in host memory on the CPU")
        return None
    offload = OptimizerOffload(ctx.optimizer, ctx.device)
    offload.offload()
    return offload


@contextmanager
def _states_on_device(offload: OptimizerOffload | None) -> Iterator[None]:
    """The optimizer's states on the training device inside the block (a checkpoint save)."""
    if offload is None:
        yield
    else:
        with offload.loaded():
            yield


def _fmt(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.3f}" for k, v in metrics.items())
