"""`run_training(plan)`: the whole training run as an ordinary function (Hydra
calls it, tests call it).

Reads as the run's story: set up (threads, seeds, model, task, grader, engine, optimizer) -> resume
from the newest checkpoint in `plan.run_dir` if there is one -> start the tracker's run -> evaluate
the starting policy -> for each step: the step, its metrics to the tracker, and the components ->
finish (the final held-out metrics, a summary).

Each component owns its cadence and its state and is asked at every step (`maybe(step, ...)`); it
decides whether the step is one of its own: the held-out evaluation (run/held_out.py), the probe
(run/probing.py), the sample artifacts (run/sample_artifacts.py), the checkpoints with the disk-full
stop (run/checkpointing.py), the grading guard (run/grading.py) and the step's progress line
(run/step_progress.py). The shape is torchtitan's (pytorch/torchtitan, torchtitan/train.py
`Trainer.train`: a loop of `train_step`, `validator.should_validate(step)`,
`checkpointer.save(step, last_step=...)`).

Steps are numbered by completed updates: step 0 is the starting policy (its held-out evaluation),
step s the state after s updates. Each step's metrics go to the tracker in one call, so a resumed
run (which re-runs the steps after its last checkpoint) can drop the ones the tracker already has.

What the loop calls lives beside it: the parts built from the config (run/build.py), the records
and saves (run/records.py), the step itself (train/step.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from quadrants.distributed.collectives import current as current_dist
from quadrants.models.loading import attention_of
from quadrants.objectives.control import advance_state
from quadrants.rewards.custom import FunctionGrader
from quadrants.rewards.grader import Grader, grader_workers
from quadrants.run.build import Run, build_context
from quadrants.run.checkpointing import Checkpointing
from quadrants.run.grading import GradingGuard
from quadrants.run.held_out import HeldOutEvaluation
from quadrants.run.preemption import checkpointed_steps
from quadrants.run.probing import Probing
from quadrants.run.records import log_task, optimizer_offload, resume, task_tags, write_run_id
from quadrants.run.resume_identity import ResumeChange, change_params, check_resume, history_name
from quadrants.run.run_info import flat_params
from quadrants.run.sample_artifacts import SampleArtifacts
from quadrants.run.step_progress import StepProgress
from quadrants.run_plan import RunPlan
from quadrants.tasks.read_log import files_read
from quadrants.tracking import keys, provenance
from quadrants.tracking.base import NullTracker, Tracker
from quadrants.train.step import train_step

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


def run_training(plan: RunPlan, tracker: Tracker | None = None) -> TrainingResult:
    """Train one policy as `plan` says (quadrants/run_plan: parsed and checked, its data files
    too), logging every step to `tracker`; resume if `plan.run_dir` has a checkpoint."""
    if not plan.values_checked:
        raise ValueError(
            "run_training needs a checked plan: parse the configuration with RunPlan.parse(cfg) "
            "(RunPlan.unchecked is for tests of one part of the step)"
        )
    plan = plan.with_data_files()  # a plan parsed with files=False: checked here, on this machine
    # before anything is written or tracked: a resume under another config is refused
    change = check_resume(plan)
    tracker = tracker or NullTracker()
    run_dir = _set_up_process(plan)
    started = time.perf_counter()
    result = TrainingResult()
    with _built(plan) as ctx:
        first, known_id, unlogged = resume(ctx, run_dir)
        offload = optimizer_offload(ctx)  # train.offload_optimizer: states to the host
        result.resumed_from = first
        result.run_id = _start_tracking(ctx, tracker, run_dir, first, known_id, unlogged, change)
        evaluation = HeldOutEvaluation(ctx, tracker)
        result.initial_eval = evaluation.start(first)
        probe = Probing(ctx, tracker)
        samples = SampleArtifacts(ctx, run_dir, tracker)
        checkpoints = Checkpointing(ctx, run_dir, tracker, offload)
        # a reward that cannot be computed stops the run (run/grading.py)
        grading = GradingGuard(plan.task.max_error_frac, plan.task.error_steps, plan.task.reward)
        progress = StepProgress(first, plan.train.steps)
        for index in checkpointed_steps(  # a signal checkpoints the last completed step
            progress.bar,
            optimizer=ctx.optimizer,
            save=checkpoints.on_signal,
            first_step=first,
            is_saved=checkpoints.has,
        ):
            step = index + 1
            output = train_step(ctx.step, index)
            if offload is not None:  # until the next optimizer step (its pre-hook loads them)
                offload.offload()
            metrics = output.metrics
            advance_state(ctx.spec, ctx.params, metrics, prefix=keys.objective(""))
            evaluation.maybe(step, metrics)
            probe.maybe(step, metrics)
            # the step's records, then its checkpoint when due; a full disk: saved, stopped
            with checkpoints.recording(step, metrics):
                tracker.log_metrics(metrics, step=step)
                result.last_step = metrics
                samples.maybe(step, output)
            with checkpoints.kept_if_grading_fails(step):  # the stop saves the step
                grading.check(step, metrics)
            progress.done(step, metrics)
        result.final_eval = evaluation.final(result.last_step)
        # data files first read during the run (benchmarks of later evaluations)
        tracker.log_params(provenance.params(files_read(), environment=False))
    tracker.flush()
    result.run_id = tracker.run_id
    result.seconds = time.perf_counter() - started
    return result


def _set_up_process(plan: RunPlan) -> Path | None:
    """This process's threads and torch seed, and the run directory (None: a run without one)."""
    if plan.train.threads:
        torch.set_num_threads(plan.train.threads)
    torch.manual_seed(plan.seed)
    run_dir = Path(plan.run_dir) if plan.run_dir else None
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


@contextmanager
def _built(plan: RunPlan) -> Iterator[Run]:
    """The run's parts (run/build.py) around its grader: task.reward (the user's function,
    rewards/custom.py) or math-verify on the CPUs this task holds, less one. The engine is closed
    on the way out, also on a preemption exit (a vLLM engine under torchrun ends the process group
    with it)."""
    grading = (
        FunctionGrader(plan.task.reward)
        if plan.task.reward is not None
        else Grader(
            num_workers=grader_workers(plan.task.grader_workers),
            timeout_s=5.0,
            extraction=plan.task.answer_extraction,
        )
    )
    with grading as grader:
        dist = current_dist()
        plan = plan.for_ranks(dist.world_size)
        ctx = Run(build_context(plan, grader), plan, dist)
        try:
            yield ctx
        finally:
            ctx.engine.close()


def _start_tracking(
    ctx: Run,
    tracker: Tracker,
    run_dir: Path | None,
    first: int,
    known_id: str | None,
    unlogged: dict[int, dict[str, float]],
    change: ResumeChange | None,
) -> str | None:
    """The tracker's run started (or continued: `known_id`) with the task's tags; what it records
    at the start: an allowed config change, the provenance, the metrics a full disk kept from it,
    and for a run at step 0 its params, task and config file; run.json. Returns the run's id."""
    add_tags = getattr(tracker, "add_tags", None)  # MLflow: tags the run is created with
    if add_tags is not None:
        add_tags(task_tags(ctx.task))
    run_id = tracker.start(known_id)
    if change is not None:  # checkpoint.allow_config_change: recorded on the run
        record_change(change, tracker, run_dir)
    # versions, commit, GPUs, data read so far (also on a resume: a change is reported)
    tracker.log_params(provenance.params(files_read()))
    for logged_step, step_metrics in sorted(unlogged.items()):  # a full disk kept them from it
        tracker.log_metrics(step_metrics, step=logged_step)
    if first == 0:
        tracker.log_params(flat_params(ctx.plan))
        # the kernel the policy runs, model.attention=null resolved (run/build.py)
        tracker.log_params({"model.attention_ran": attention_of(ctx.model)})
        log_task(ctx, tracker, run_dir)
    if run_dir is not None:
        write_run_id(run_dir, tracker.run_id)
        if first == 0 and (run_dir / "config.yaml").exists():
            tracker.log_artifact(run_dir / "config.yaml", "config")
    return run_id


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
