"""One probe of a policy: `probe_policy` (the method, on any model and engine) and
`probe_in_training` (the training loop's call every `probe.every` steps, on the live policy).

One probe: sample the population (branching.sample_batch), choose positions (plan.select_positions),
branch and grade (branching.roll_out_branches), estimate (estimates.estimate_credit), report
(report.*). The standalone command (`python -m quadrants.probe TARGET`) is launch/probe.py.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from quadrants import seeds
from quadrants.distributed.collectives import DistEnv
from quadrants.probe.branching import (
    BranchOutcomes,
    ProbeSettings,
    next_token_probs,
    roll_out_branches,
    sample_batch,
)
from quadrants.probe.estimates import PositionCredit, estimate_credit
from quadrants.probe.positions import Positions, quadrant_index, select_positions
from quadrants.probe.report import (
    probe_key,
    probe_metrics,
    write_branches_csv,
    write_credit_csv,
    write_figures,
)
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import RolloutEngine
from quadrants.rollout.hf import stop_token_ids
from quadrants.tasks.base import Task
from quadrants.tracking.base import Tracker

log = logging.getLogger("quadrants.probe")


@dataclass
class ProbeResult:
    """What one probe measured and wrote."""

    metrics: dict[str, float]
    credit: PositionCredit
    positions: Positions
    graded: BranchOutcomes | None = None
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def probe_policy(
    model: torch.nn.Module,
    tokenizer: Any,
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    settings: ProbeSettings,
    *,
    out_dir: Path | None = None,
    announce: bool = True,
) -> ProbeResult:
    """One probe of `model` (sampled by `engine`) on `task`'s training prompts,
    as `settings.probe` says (`ProbeSettings.of(plan)`)."""
    probe, rollout = settings.probe, settings.rollout
    started = time.perf_counter()
    if announce:
        bound = probe.positions * (probe.branches + 1) * probe.continuations
        print(
            f"quadrants probe: {probe.prompts} prompts x {rollout.group_size} responses; at "
            f"most {bound} branching rollouts ({probe.positions} positions x {probe.branches + 1} "
            f"branches x {probe.continuations} continuations), at most "
            f"{bound * rollout.max_new_tokens} tokens",
            flush=True,
        )
    problems = task.train_batch(probe.prompts, random.Random(seeds.probe_prompts(probe.seed)))
    sampled = sample_batch(model, tokenizer, engine, grader, problems, settings)
    batch = sampled.batch
    candidates = batch.response_mask & ~batch.constant_group_mask[:, None]  # tokens an update moves
    if not candidates.any():
        candidates = batch.response_mask
    generator = torch.Generator().manual_seed(seeds.probe_positions(probe.seed))
    positions = select_positions(
        batch.entropy,
        quadrant_index(batch.quadrants),
        candidates,
        positions=probe.positions,
        entropy_bins=probe.entropy_bins,
        generator=generator,
    )
    probs = next_token_probs(
        model,
        sampled.rollouts,
        positions,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
    )
    graded = roll_out_branches(
        engine,
        grader,
        tokenizer,
        sampled,
        positions,
        probs,
        probe,
        rollout,
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
    prompts = sampled.rollouts.group_ids[positions.sequence]  # [N]: the bootstrap's clusters
    metrics = probe_metrics(
        credit,
        positions,
        prompts,
        num_classes=max(2, graded.classes.numel()),
        confidence=probe.confidence,
        resamples=probe.resamples,
        generator=generator,
    )
    seconds = time.perf_counter() - started
    metrics[probe_key("rollouts")] = float(graded.rollouts)
    metrics[probe_key("tokens")] = float(graded.tokens)
    metrics[probe_key("seconds")] = seconds
    metrics[probe_key("rollouts_per_s")] = graded.rollouts / seconds if seconds > 0 else 0.0
    result = ProbeResult(
        metrics=metrics, credit=credit, positions=positions, graded=graded, seconds=seconds
    )
    if out_dir is not None:
        token_ids = sampled.rollouts.response_ids[positions.sequence, positions.token]
        result.files.append(
            write_credit_csv(
                out_dir / "credit.csv", credit, positions, token_ids, tokenizer, prompts
            )
        )
        result.files.append(
            write_branches_csv(
                out_dir / "branches.csv",
                graded.branches.mass.double(),
                graded.outcomes,
                graded.forced,
                graded.classes,
                tokenizer,
            )
        )
        result.files.extend(
            write_figures(out_dir, credit, positions, num_classes=max(2, graded.classes.numel()))
        )
        summary = out_dir / "metrics.json"
        summary.write_text(json.dumps(metrics, indent=1, sort_keys=True))
        result.files.append(summary)
    return result


def probe_in_training(
    model: torch.nn.Module,
    tokenizer: Any,
    engine: RolloutEngine,
    grader: Grader,
    task: Task,
    settings: ProbeSettings,
    dist: DistEnv,
    step: int,
    tracker: Tracker | None = None,
) -> dict[str, float]:
    """`probe/*` metrics of the live policy (the loop calls this every `probe.every` steps; one
    process only: under torch.distributed it returns {} and says so once).

    Files go to ``<run_dir>/probe/step_<N>/`` and, with a tracker, to the run's artifacts."""
    if dist.world_size > 1:  # the policy is sharded: one rank alone cannot run its forward passes
        if dist.is_main and step == settings.probe.every:
            log.warning(
                "probe.every is ignored under torch.distributed; probe a checkpoint with "
                "python -m quadrants.probe"
            )
        return {}
    run_dir = settings.run_dir
    out_dir = Path(run_dir) / "probe" / f"step_{step:07d}" if run_dir else None
    with torch.random.fork_rng(
        devices=[]
    ):  # the engine reseeds torch: keep the training stream as it was
        result = probe_policy(
            model,
            tokenizer,
            engine,
            grader,
            task,
            settings,
            out_dir=out_dir,
            announce=False,
        )
    if out_dir is not None and tracker is not None:
        tracker.log_artifact(out_dir, f"probe/step_{step:07d}")
    return result.metrics
