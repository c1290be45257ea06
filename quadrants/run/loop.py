"""`run_training(cfg)`: the whole training run as an ordinary function (Hydra
calls it, tests call it).

Reads top to bottom: set up (threads, seeds, model, task, grader, engine, optimizer) -> resume from
the newest checkpoint in `cfg.run_dir` if there is one -> evaluate the starting policy -> steps (log
every step, checkpoint every N) -> evaluate at the end -> return a summary.

Steps are numbered by completed updates: step 0 is the starting policy (its held-out evaluation),
step s the state after s updates. Each step's metrics go to the tracker in one call, so a resumed
run (which re-runs the steps after its last checkpoint) can drop the ones the tracker already has.

What the loop calls lives beside it: the parts built from the config (run/build.py), the records
and saves (run/records.py), the step itself (train/step.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch

from quadrants.config import RunConfig
from quadrants.distributed.collectives import current as current_dist
from quadrants.eval.in_training import evaluate_policy
from quadrants.models.loading import attention_of
from quadrants.objectives.control import advance_state
from quadrants.progress import Progress
from quadrants.rewards.custom import FunctionGrader
from quadrants.rewards.grader import Grader, grader_workers
from quadrants.run.build import Run, build_context
from quadrants.run.checkpoint import has_checkpoint
from quadrants.run.grading import GradingFailed, GradingGuard
from quadrants.run.identity import ResumeChange, change_params, check_resume, history_name
from quadrants.run.preemption import checkpointed_steps
from quadrants.run.records import (
    disk_full_on_any_rank,
    log_task,
    optimizer_offload,
    resume,
    save_step,
    signal_save,
    stop_if_disk_full,
    task_tags,
    write_run_id,
)
from quadrants.run.samples import write_samples
from quadrants.tasks.read_log import files_read
from quadrants.tracking import keys, provenance
from quadrants.tracking.base import NullTracker, Tracker
from quadrants.tracking.headline import headline, headline_sources
from quadrants.tracking.run_info import flat_params
from quadrants.train.step import train_step
from quadrants.validation import validate_config

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


def _evaluate(ctx: Run, step: int, tracker: Tracker) -> dict[str, float]:
    """Held-out metrics of the live policy (eval/in_training.py; {} on ranks other than 0)."""
    return evaluate_policy(
        ctx.engine, ctx.grader, ctx.task, ctx.tokenizer, ctx.cfg, ctx.dist, step, tracker
    )


def _step_line(step: int, total: int, metrics: dict[str, float], seconds: float, eta: float) -> str:
    """One step's log line: its metrics, its wall time and the estimate for the steps left (the
    mean step time of this process so far, times the steps left)."""
    return (
        f"step {step}/{total} reward {metrics[keys.train('reward_mean')]:.3f} "
        f"solve {metrics[keys.train('solve_rate')]:.3f} entropy "
        f"{metrics[keys.train('entropy')]:.3f} len {metrics[keys.train('response_length')]:.1f} "
        f"time {seconds:.1f}s ETA {timedelta(seconds=round(eta))}"
    )


def run_training(cfg: RunConfig, tracker: Tracker | None = None) -> TrainingResult:
    """Train one policy as `cfg` says, logging every step to `tracker`; resume if
    `cfg.run_dir` has a checkpoint."""
    validate_config(cfg)
    # before anything is written or tracked: a resume under another config is refused
    change = check_resume(cfg)
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
    grading = (  # task.reward: the user's function in place of math-verify (rewards/custom.py)
        FunctionGrader(cfg.task.reward)
        if cfg.task.reward is not None
        else Grader(num_workers=workers, timeout_s=5.0, extraction=extraction)
    )
    with grading as grader:
        ctx = Run(build_context(cfg, grader), cfg, current_dist())
        try:
            first, known_id, unlogged = resume(ctx, run_dir)
            offload = optimizer_offload(ctx)  # train.offload_optimizer: states to the host
            result.resumed_from = first
            add_tags = getattr(tracker, "add_tags", None)  # MLflow: tags the run is created with
            if add_tags is not None:
                add_tags(task_tags(ctx.task))
            result.run_id = tracker.start(known_id)
            if change is not None:  # checkpoint.allow_config_change: recorded on the run
                record_change(change, tracker, run_dir)
            # versions, commit, GPUs, data read so far (also on a resume: a change is reported)
            tracker.log_params(provenance.params(files_read()))
            for logged_step, step_metrics in sorted(
                unlogged.items()
            ):  # a full disk kept them from the tracker
                tracker.log_metrics(step_metrics, step=logged_step)
            if first == 0:
                tracker.log_params(flat_params(cfg))
                # the kernel the policy runs, model.attention=null resolved (run/build.py)
                tracker.log_params({"model.attention_ran": attention_of(ctx.model)})
                log_task(ctx, tracker, run_dir)
            if run_dir is not None:
                write_run_id(run_dir, tracker.run_id)
                if first == 0 and (run_dir / "config.yaml").exists():
                    tracker.log_artifact(run_dir / "config.yaml", "config")
            if first == 0:
                result.initial_eval = _evaluate(ctx, 0, tracker)
                tracker.log_metrics(result.initial_eval, step=0)
                if result.initial_eval:  # {} with evaluation off, and on ranks other than 0
                    log.info("step 0 held-out: %s", _fmt(result.initial_eval))
            # off a terminal each step logs its own line with its time and ETA (below): no 10 %
            # lines
            bar = Progress(
                range(first, total),
                desc="train",
                unit="step",
                logger=log,
                initial=first,
                total=total,
                every=None,
            )
            # a reward that cannot be computed stops the run (run/grading.py)
            guard = GradingGuard(cfg.task.max_error_frac, cfg.task.error_steps, cfg.task.reward)
            loop_started = step_started = time.perf_counter()
            for index in checkpointed_steps(
                bar,
                optimizer=ctx.optimizer,
                save=signal_save(ctx, run_dir, tracker, offload),
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
                if step == total:  # final/avg_at_<n>, ...: short keys for MLflow's table and charts
                    sources = headline_sources(cfg.eval.benchmarks, ctx.task.name, cfg.eval.samples)
                    metrics.update(headline(metrics, sources))
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
                            write_run_id(run_dir, tracker.run_id)
                    if checkpoint_now:
                        save_step(ctx, run_dir, step, tracker, offload)
                try:
                    guard.check(step, metrics)
                except GradingFailed:
                    # kept for a resume once the reward is fixed (the same config resumes it)
                    if run_dir is not None and cfg.checkpoint.every and not checkpoint_now:
                        save_step(ctx, run_dir, step, tracker, offload)
                    raise
                now = time.perf_counter()
                eta = (now - loop_started) / (step - first) * (total - step)
                line = _step_line(step, total, metrics, now - step_started, eta)
                step_started = now
                bar.set_postfix_str(line.split(" ", 2)[2])
                if not bar.on_terminal:
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


def record_change(change: ResumeChange, tracker: Tracker, run_dir: Path | None) -> None:
    """An allowed config change on resume: one param per changed key, the config file the job
    kept for it (launch/job.py) as an artifact, and a warning in the log."""
    log.warning(
        "resuming after step %d with a changed config (checkpoint.allow_config_change):\n  %s",
        change.step,
        "\n  ".join(str(c) for c in change.changes),
    )
    tracker.log_params(change_params(change))
    if run_dir is not None and (run_dir / history_name(change)).exists():
        tracker.log_artifact(run_dir / history_name(change), "config")


def _fmt(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.3f}" for k, v in metrics.items())
