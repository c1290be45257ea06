"""Run the hindsight-credit probe: on a target in its own MLflow run, or on the live policy in training.

One probe: sample the population (branching.sample_batch), choose positions (plan.select_positions),
branch and grade (branching.roll_out_branches), estimate (estimates.estimate_credit), report
(report.*). `python -m quadrants.probe TARGET` runs `run_probe`: files under
``<outputs>/<study>/probe/<target>/<UTC time>/`` and an MLflow run tagged ``quadrants.role=probe``,
linked to the training run as evaluation runs are (``quadrants.source_run_id``). With
``probe.every=N`` the training loop calls `probe_in_training` every N steps and logs `probe/*`.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from quadrants.probe.branching import next_token_probs, roll_out_branches, sample_batch
from quadrants.probe.estimates import PositionCredit, estimate_credit
from quadrants.probe.plan import Positions, quadrant_index, select_positions
from quadrants.probe.report import (
    format_summary,
    probe_key,
    probe_metrics,
    write_credit_csv,
    write_figures,
)
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import RolloutEngine
from quadrants.rollout.hf import stop_token_ids
from quadrants.tasks.base import Task
from quadrants.tracking.base import Tracker

log = logging.getLogger("quadrants.probe")

if TYPE_CHECKING:
    from quadrants.config import RunConfig
    from quadrants.eval.target import EvalTarget
    from quadrants.train.step import StepContext


@dataclass
class ProbeResult:
    """What one probe measured and wrote."""

    metrics: dict[str, float]
    credit: PositionCredit
    positions: Positions
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def probe_policy(
    model: torch.nn.Module,
    tokenizer: Any,
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    cfg: RunConfig,
    *,
    out_dir: Path | None = None,
    announce: bool = True,
) -> ProbeResult:
    """One probe of `model` (sampled by `engine`) on `task`'s training prompts, as `cfg.probe` says."""
    probe = cfg.probe
    started = time.perf_counter()
    if announce:
        bound = probe.positions * (probe.branches + 1) * probe.continuations
        print(
            f"quadrants probe: {probe.prompts} prompts x {cfg.rollout.group_size} responses; at most {bound} "
            f"branching rollouts ({probe.positions} positions x {probe.branches + 1} branches x "
            f"{probe.continuations} continuations), at most {bound * cfg.rollout.max_new_tokens} tokens",
            flush=True,
        )
    problems = task.train_batch(probe.prompts, random.Random(probe.seed))
    sampled = sample_batch(model, tokenizer, engine, grader, problems, cfg)
    batch = sampled.batch
    candidates = batch.response_mask & ~batch.constant_group_mask[:, None]  # tokens an update moves
    if not candidates.any():
        candidates = batch.response_mask
    generator = torch.Generator().manual_seed(probe.seed)
    positions = select_positions(
        batch.entropy,
        quadrant_index(batch.quadrants),
        candidates,
        positions=probe.positions,
        entropy_bins=probe.entropy_bins,
        generator=generator,
    )
    probs = next_token_probs(
        model, sampled.rollouts, positions, temperature=cfg.rollout.temperature
    )
    graded = roll_out_branches(
        engine,
        grader,
        tokenizer,
        sampled,
        positions,
        probs,
        cfg,
        stop_ids=stop_token_ids(model, tokenizer),
        generator=generator,
        announce=announce,
    )
    credit = estimate_credit(
        graded,
        positions,
        sampled,
        resamples=probe.resamples,
        confidence=probe.confidence,
        pseudocount=probe.pseudocount,
        generator=generator,
    )
    metrics = probe_metrics(
        credit, positions, num_classes=max(2, graded.classes.numel()), confidence=probe.confidence
    )
    seconds = time.perf_counter() - started
    metrics[probe_key("rollouts")] = float(graded.rollouts)
    metrics[probe_key("tokens")] = float(graded.tokens)
    metrics[probe_key("seconds")] = seconds
    metrics[probe_key("rollouts_per_s")] = graded.rollouts / seconds if seconds > 0 else 0.0
    result = ProbeResult(metrics=metrics, credit=credit, positions=positions, seconds=seconds)
    if out_dir is not None:
        token_ids = sampled.rollouts.response_ids[positions.sequence, positions.token]
        result.files.append(
            write_credit_csv(out_dir / "credit.csv", credit, positions, token_ids, tokenizer)
        )
        result.files.extend(
            write_figures(out_dir, credit, positions, num_classes=max(2, graded.classes.numel()))
        )
        summary = out_dir / "metrics.json"
        summary.write_text(json.dumps(metrics, indent=1, sort_keys=True))
        result.files.append(summary)
    return result


def probe_in_training(
    ctx: StepContext, step: int, tracker: Tracker | None = None
) -> dict[str, float]:
    """`probe/*` metrics of the live policy (the loop calls this every `probe.every` steps; one process
    only: under torch.distributed it returns {} and says so once).

    Files go to ``<run_dir>/probe/step_<N>/`` and, with a tracker, to the run's artifacts."""
    cfg = ctx.cfg
    if (
        ctx.dist.world_size > 1
    ):  # the policy is sharded: one rank alone cannot run its forward passes
        if ctx.dist.is_main and step == cfg.probe.every:
            log.warning(
                "probe.every is ignored under torch.distributed; probe a checkpoint with python -m quadrants.probe"
            )
        return {}
    out_dir = Path(cfg.run_dir) / "probe" / f"step_{step:07d}" if cfg.run_dir else None
    with torch.random.fork_rng(
        devices=[]
    ):  # the engine reseeds torch: keep the training stream as it was
        result = probe_policy(
            ctx.model,
            ctx.tokenizer,
            ctx.engine,
            ctx.grader,
            ctx.task,
            cfg,
            out_dir=out_dir,
            announce=False,
        )
    if out_dir is not None and tracker is not None:
        tracker.log_artifact(out_dir, f"probe/step_{step:07d}")
    return result.metrics


# --- standalone: python -m quadrants.probe ------------------------------------------------------


def probe_dir(cfg: RunConfig, target: EvalTarget) -> Path:
    """``<outputs>/<study>/probe/<target label>/<UTC time>``: one directory (and MLflow run) per command."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    label = "".join(ch if ch.isalnum() or ch in "-_.@=" else "_" for ch in target.label)
    return Path(cfg.outputs).expanduser().resolve() / cfg.study / "probe" / label / stamp


def probe_params(cfg: RunConfig, target: EvalTarget) -> dict[str, Any]:
    from dataclasses import asdict

    params: dict[str, Any] = {
        "target": cfg.eval.target or target.model,
        "model": target.model,
        "checkpoint_step": target.step,
        "seed": cfg.seed,
    }
    params.update({f"probe.{k}": v for k, v in asdict(cfg.probe).items()})
    params.update(
        {
            f"rollout.{k}": getattr(cfg.rollout, k)
            for k in ("group_size", "temperature", "top_p", "max_new_tokens")
        }
    )
    return params


def run_probe(cfg: RunConfig, target: EvalTarget, *, tracker: Tracker | None = None) -> ProbeResult:
    """Probe `target` as `cfg.probe` says, in its own MLflow run; `cfg` validated and `target` resolved first."""
    from quadrants.eval.runner import GRADER_TIMEOUT_S, _grader_workers, eval_tags
    from quadrants.eval.target import load_target_policy
    from quadrants.rollout.registry import get_engine
    from quadrants.tracking.mlflow_tracker import MlflowTracker
    from quadrants.train.device import resolve_device
    from quadrants.train.job import artifact_location, tracking_uri
    from quadrants.train.loop import make_run_task

    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    directory = probe_dir(cfg, target)
    directory.mkdir(parents=True, exist_ok=True)
    own_tracker = tracker is None
    if tracker is None:
        tags = {**eval_tags(cfg, target), "quadrants.role": "probe"}
        tracker = MlflowTracker(
            tracking_uri(cfg),
            cfg.study,
            run_name=f"probe {target.label}",
            tags=tags,
            spool_dir=directory / "tracking",
            artifact_location=artifact_location(cfg),
        )
    run_id = tracker.start()
    if isinstance(tracker, MlflowTracker):
        print(
            f"quadrants: probing {target.label} ({target.kind}); MLflow run {run_id} at {tracking_uri(cfg)}",
            flush=True,
        )
    tracker.log_params(probe_params(cfg, target))
    try:
        torch.manual_seed(cfg.seed)
        model, tokenizer = load_target_policy(target, dtype=cfg.model.dtype, seed=cfg.seed)
        model = model.to(resolve_device(cfg.train.device))
        task = make_run_task(
            cfg, tokenizer
        )  # the run's task in the run's prompt format, as training renders it
        engine = get_engine(cfg.rollout.engine).sampler(cfg, model, tokenizer)
        try:
            with Grader(
                num_workers=_grader_workers(),
                timeout_s=GRADER_TIMEOUT_S,
                extraction=cfg.task.answer_extraction,
            ) as grader:
                result = probe_policy(
                    model, tokenizer, engine, grader, task, cfg, out_dir=directory / "results"
                )
        finally:
            engine.close()
        tracker.log_metrics(result.metrics, step=target.step)
        tracker.log_artifact(directory / "results", "probe")
    except BaseException:
        if own_tracker:
            tracker.finish("FAILED")
        raise
    if own_tracker:
        tracker.finish("FINISHED")
    print(format_summary(result.metrics), flush=True)
    print(
        f"quadrants: probe took {result.seconds:.1f} s ({result.metrics[probe_key('rollouts')]:.0f} rollouts, "
        f"{result.metrics[probe_key('rollouts_per_s')]:.1f} rollouts/s); files in {directory / 'results'}",
        flush=True,
    )
    return result
